package maintain

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// Ahead is how far past the database's clock partitions are kept created (inbox.PartitionsAhead).
const Ahead = 48 * time.Hour

// Detaching a partition takes the inbox table's exclusive lock, which every claim waits for, and which the DETACH
// waits for until the claims in flight end. It waits detachLockTimeout at most (the dialect's DetachPartition sets
// it), up to detachTries times, detachGap apart, and a round that still cannot get it leaves the partition to the
// next round.
const (
	detachLockTimeout = 50 * time.Millisecond
	detachTries       = 20
	detachGap         = 250 * time.Millisecond
)

// Partitioner returns the dialect's partition operations, or an error for a dialect without them.
func Partitioner(d dialect.Dialect, invalid error) (dialect.Partitioner, error) {
	pt, ok := d.(dialect.Partitioner)
	if !ok {
		return nil, fmt.Errorf("%w: WithPartitions: the %s dialect cannot partition the inbox table", invalid, d.Name())
	}
	return pt, nil
}

// plan compares a table's partitions with what the period, the database's clock and the cutoff ask
// for: the partitions to create, from one period before now to Ahead after it, skipping any range an
// existing partition overlaps; and the inbox's own partitions (named by PartitionName) whose whole range lies
// before cutoff, to drop. A zero cutoff drops nothing.
func plan(table string, l dialect.PartitionList, period time.Duration, cutoff time.Time) (create, drop []dialect.PartitionParams) {
	type span struct{ from, to time.Time }
	var existing []span
	for _, r := range l.Ranges {
		from, okFrom := uuid7Time(r.From)
		to, okTo := uuid7Time(r.To)
		if !okFrom || !okTo {
			continue
		}
		existing = append(existing, span{from, to})
		if !cutoff.IsZero() && !to.After(cutoff) && strings.HasPrefix(r.Name, table+"_p") {
			r.Table, r.Default = table, l.Default
			drop = append(drop, r)
		}
	}
	end := l.Now.Add(max(Ahead, 2*period))
	for from := PeriodStart(l.Now, period).Add(-period); from.Before(end); from = from.Add(period) {
		to := from.Add(period)
		if !cutoff.IsZero() && !to.After(cutoff) {
			continue // it would be dropped at once
		}
		overlaps := false
		for _, e := range existing {
			overlaps = overlaps || (from.Before(e.to) && e.from.Before(to))
		}
		if !overlaps {
			create = append(create, dialect.PartitionParams{Table: table, Name: PartitionName(table, from),
				From: UUID7Floor(from), To: UUID7Floor(to), Default: l.Default})
		}
	}
	return create, drop
}

// PeriodStart is the start of the period t falls in, periods counted from the Unix epoch.
func PeriodStart(t time.Time, period time.Duration) time.Time {
	ms, p := t.UnixMilli(), period.Milliseconds()
	return time.UnixMilli(ms - ms%p).UTC()
}

// PartitionName names the partition of the period that starts at from: the table's name, "_p" and the start in
// UTC to the minute, at most 63 bytes for a table name of at most 48.
func PartitionName(table string, from time.Time) string {
	return table + "_p" + from.UTC().Format("20060102t1504")
}

// UUID7Floor is the least UUIDv7 of t's millisecond: the timestamp, version 7, the variant bits, zeros.
func UUID7Floor(t time.Time) string {
	var b [16]byte
	ms := uint64(t.UnixMilli())
	for n := range 6 {
		b[n] = byte(ms >> (8 * (5 - n)))
	}
	b[6], b[8] = 0x70, 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// uuid7Time is the time of a UUID's first 48 bits, which is its creation time for a UUIDv7.
func uuid7Time(id string) (time.Time, bool) {
	raw, err := hex.DecodeString(strings.ReplaceAll(id, "-", ""))
	if err != nil || len(raw) != 16 {
		return time.Time{}, false
	}
	var ms int64
	for _, c := range raw[:6] {
		ms = ms<<8 | int64(c)
	}
	return time.UnixMilli(ms).UTC(), true
}

// PartitionResult counts what one pass over the partitions did, and names the default partition.
type PartitionResult struct {
	Created, Dropped int
	DefaultPartition string
}

// Partitions creates the partitions the table lacks and drops the expired ones (none when cutoff is zero),
// each in a transaction run by run. One that could not take its locks in time is left for the next pass.
func Partitions(ctx context.Context, e Env, period time.Duration, cutoff time.Time,
	run func(func(driver.Tx) error) error) (res PartitionResult, err error) {
	d := e.Dialect
	pt, err := Partitioner(d, e.Invalid)
	if err != nil {
		return res, err
	}
	var l dialect.PartitionList
	if err := e.ShortTx(ctx, func(tx driver.Tx) (err error) {
		l, err = pt.Partitions(ctx, tx, e.Table)
		return err
	}); err != nil {
		return res, fmt.Errorf("inbox: list the partitions of %s: %w", e.Table, err)
	}
	if !l.Partitioned {
		return res, fmt.Errorf("%w: WithPartitions: table %s is not partitioned; Migrate partitions a table only when "+
			"it creates it", e.Invalid, e.Table)
	}
	res.DefaultPartition = l.Default
	create, drop := plan(e.Table, l, period, cutoff)
	for _, p := range create {
		err := run(func(tx driver.Tx) error { return pt.CreatePartition(ctx, tx, p) })
		if busy(e, err, "create", p) {
			continue
		}
		if err != nil {
			return res, fmt.Errorf("inbox: create partition %s: %w", p.Name, err)
		}
		res.Created++
	}
	// Each expired partition is detached in a transaction of its own that waits at most detachLockTimeout for the
	// table's lock, and tries again after detachGap when it could not get it: claims queue behind a waiting
	// DETACH, so its wait is their stall, and the gap between detaches lets the queue drain. The files are dropped
	// afterwards, each without the table's lock.
	for n, p := range drop {
		if n > 0 {
			if err := sleep(ctx, detachGap); err != nil {
				return res, err
			}
		}
		var err error
		for try := 0; try < detachTries; try++ {
			if err = run(func(tx driver.Tx) error { return pt.DetachPartition(ctx, tx, p) }); !e.LockTaken(err) {
				break
			}
			if err := sleep(ctx, detachGap); err != nil {
				return res, err
			}
		}
		if busy(e, err, "detach", p) {
			continue
		}
		if err != nil {
			return res, fmt.Errorf("inbox: detach partition %s: %w", p.Name, err)
		}
		l.Detached = append(l.Detached, p.Name)
	}
	for _, name := range l.Detached {
		p := dialect.PartitionParams{Table: e.Table, Name: name}
		err := run(func(tx driver.Tx) error { return pt.DropPartition(ctx, tx, p) })
		if busy(e, err, "drop", p) {
			continue
		}
		if err != nil {
			return res, fmt.Errorf("inbox: drop detached partition %s: %w", name, err)
		}
		res.Dropped++
	}
	return res, nil
}

// busy reports, and logs, a partition operation that could not take its locks in time: the next pass tries it
// again.
func busy(e Env, err error, op string, p dialect.PartitionParams) bool {
	if !e.LockTaken(err) {
		return false
	}
	e.Logger.Info("Inbox left a partition for the next round: its lock was taken",
		watermill.LogFields{"table": e.Table, "partition": p.Name, "operation": op})
	return true
}
