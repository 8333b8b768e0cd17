package maintain

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// LockName is the cleanup's row in the locks table: one cleanup of the table at a time.
const LockName = "cleanup"

// CleanupParams are a round's checked parameters (inbox.CleanupParams, with its defaults applied).
type CleanupParams struct {
	Retention time.Duration
	BatchSize int
	// Pause is the wait after each batch that deleted rows; zero rests Rest times as long as the batch took.
	Pause time.Duration
	Rest  int
	// PartitionPeriod, when positive, makes the round maintain the table's partitions first.
	PartitionPeriod time.Duration
	// Deleted is called with the rows a batch deleted of one consumer, the batches so far and the round's total.
	Deleted func(ctx context.Context, consumer string, rows int64, batches int, total int64)
}

// CleanupResult is what a round did, as inbox.CleanupResult documents it.
type CleanupResult struct {
	Skipped                                       bool
	Cutoff                                        time.Time
	Deleted, Abandoned                            int64
	Batches, PartitionsCreated, PartitionsDropped int
	Took                                          time.Duration
}

// cleanupLockHold is how long the cleanup's lock is held past its last batch: longer than any one batch takes, so
// that a live cleaner never loses it, and short enough that the lock of a cleaner that died is free again well
// before the next round (DefaultCleanupInterval). The pause between batches is added to it.
const cleanupLockHold = 5 * time.Minute

// Cleanup runs one cleanup round, as inbox.Database.Cleanup documents.
func Cleanup(ctx context.Context, e Env, p CleanupParams) (res CleanupResult, err error) {
	start := time.Now()
	holder := watermill.NewUUID()
	hold := cleanupLockHold + p.Pause
	var locked bool
	lock := dialect.LockParams{Table: e.Table, Name: LockName, Holder: holder, Hold: hold, Back: p.Retention}
	err = e.ShortTx(ctx, func(tx driver.Tx) error {
		var err error
		locked, res.Cutoff, err = e.Dialect.Locks().TakeLock(ctx, tx, lock)
		return err
	})
	if err != nil {
		return res, e.Wrap("cleanup: lock", err)
	}
	fields := watermill.LogFields{"table": e.Table, "retention": p.Retention.String(), "cutoff": res.Cutoff}
	if !locked {
		res.Skipped = true
		e.Logger.Debug("Inbox cleanup skipped: another instance is cleaning this table", fields)
		return res, nil
	}
	defer func() { err = errors.Join(err, unlock(ctx, e, holder)) }()

	r := cleanupRound{ctx: ctx, e: e, p: p, lock: lock, res: &res}
	if p.PartitionPeriod > 0 {
		pr, err := Partitions(ctx, e, p.PartitionPeriod, res.Cutoff, r.batch)
		if err != nil {
			return res, err
		}
		res.PartitionsCreated, res.PartitionsDropped, r.walkOnly = pr.Created, pr.Dropped, pr.DefaultPartition
	}
	if sc, ok := e.Dialect.(dialect.SpanCleaner); ok {
		err = r.walk(sc)
	} else {
		err = r.byConsumer()
	}
	if err != nil {
		return res, err
	}

	err = e.ShortTx(ctx, func(tx driver.Tx) error {
		var err error
		res.Abandoned, err = e.Dialect.Maintenance().CountAbandoned(ctx, tx, e.Table, res.Cutoff)
		return err
	})
	if err != nil {
		return res, e.Wrap("count abandoned leases", err)
	}
	res.Took = time.Since(start)
	fields = fields.Add(watermill.LogFields{"deleted": res.Deleted, "batches": res.Batches, "took": res.Took.String()})
	if p.PartitionPeriod > 0 {
		fields = fields.Add(watermill.LogFields{"partitions_created": res.PartitionsCreated, "partitions_dropped": res.PartitionsDropped})
	}
	e.Logger.Info("Inbox cleanup finished", fields)
	if res.Abandoned > 0 {
		e.Logger.Error("Inbox holds abandoned leases: find them with the CLI's stats, settle them, then forget them",
			fmt.Errorf("inbox: %d rows of %s are 'processing' with a lease that ran out before %s and no copy took them over",
				res.Abandoned, e.Table, res.Cutoff.Format(time.RFC3339)),
			fields.Add(watermill.LogFields{"abandoned": res.Abandoned}))
	}
	return res, nil
}

// cleanupRound is one round of the cleanup, holding the lock; its batches each run in a short transaction that
// first extends the lock, so that a cleaner that lost it deletes nothing more.
type cleanupRound struct {
	ctx  context.Context
	e    Env
	p    CleanupParams
	lock dialect.LockParams
	res  *CleanupResult
	// took is how long the last batch took.
	took time.Duration
	// walkOnly is the one partition the walk cleans, with managed partitions (partitions.go in this package): the others are
	// dropped whole.
	walkOnly string
}

// batch runs fn in a short transaction after extending the lock.
func (r *cleanupRound) batch(fn func(tx driver.Tx) error) error {
	start := time.Now()
	defer func() { r.took = time.Since(start) }()
	err := r.e.ShortTx(r.ctx, func(tx driver.Tx) error {
		held, err := r.e.Dialect.Locks().ExtendLock(r.ctx, tx, r.lock)
		if err != nil {
			return err
		}
		if !held {
			return errCleanupLockLost
		}
		return fn(tx)
	})
	r.res.Batches++
	if err != nil {
		return r.e.Wrap("cleanup", err)
	}
	return nil
}

// deleted reports the rows one batch deleted, per consumer, then pauses if the params ask for it.
func (r *cleanupRound) deleted(counts map[string]int64) error {
	var total int64
	for consumer, n := range counts {
		if n == 0 {
			continue
		}
		total += n
		r.res.Deleted += n
		if r.p.Deleted != nil {
			r.p.Deleted(r.ctx, consumer, n, r.res.Batches, r.res.Deleted)
		}
	}
	pause := r.p.Pause
	if pause == 0 {
		pause = time.Duration(r.p.Rest) * r.took
	}
	if total > 0 && pause > 0 {
		if err := sleep(r.ctx, pause); err != nil {
			return fmt.Errorf("inbox: cleanup %s: %w", r.e.Table, err)
		}
	}
	return nil
}

// walk cleans the table in one walk of the pages that hold expired rows, for every consumer at once: windows of
// about a batch of rows each, in page order, then whatever the walk did not meet, then the cleanup index's
// summaries of the pages it emptied (dialect.SpanCleaner).
func (r *cleanupRound) walk(sc dialect.SpanCleaner) error {
	pages := dialect.CleanupPagesParams{Table: r.e.Table, Partition: r.walkOnly, Cutoff: r.res.Cutoff, Limit: r.p.BatchSize}
	var span dialect.Span
	err := r.batch(func(tx driver.Tx) error {
		var err error
		span, err = sc.CleanupSpan(r.ctx, tx, pages)
		return err
	})
	if err != nil {
		return err
	}
	// A window of about a batch of rows. Without statistics (a table never analyzed), the guess of 60 rows a page
	// errs on the wide side, which costs less: a window that holds more than a batch is walked again, while one
	// that holds a handful makes a transaction per page.
	rowsPerPage := span.RowsPerPage
	if rowsPerPage <= 0 {
		rowsPerPage = 60
	}
	window := max(1, int64(float64(r.p.BatchSize)/rowsPerPage))
	for from := span.First; from <= span.Last; {
		pages.From, pages.To = from, min(from+window, span.Last+1)
		var counts map[string]int64
		if err := r.batch(func(tx driver.Tx) (err error) {
			counts, err = sc.CleanupPages(r.ctx, tx, pages)
			return err
		}); err != nil {
			return err
		}
		if err := r.deleted(counts); err != nil {
			return err
		}
		if total(counts) < int64(r.p.BatchSize) {
			from = pages.To // the window is done; a full batch may have left rows in it
		}
	}
	for {
		var counts map[string]int64
		if err := r.batch(func(tx driver.Tx) (err error) {
			counts, err = sc.CleanupRest(r.ctx, tx, pages)
			return err
		}); err != nil {
			return err
		}
		if len(counts) == 0 {
			break
		}
		if err := r.deleted(counts); err != nil {
			return err
		}
	}
	if span.Last < span.First {
		return nil
	}
	pages.From, pages.To = span.First, span.Last+1
	err = r.batch(func(tx driver.Tx) error { return sc.CleanupSummarize(r.ctx, tx, pages) })
	if r.e.LockTaken(err) {
		r.e.Logger.Debug("Inbox cleanup left the summaries of the pages it emptied to VACUUM: their lock was taken",
			watermill.LogFields{"table": r.e.Table})
		return nil
	}
	return err
}

func total(counts map[string]int64) (n int64) {
	for _, c := range counts {
		n += c
	}
	return n
}

// byConsumer cleans one consumer's rows after another, each in batches that walk the cleanup index from where the
// previous batch ended.
func (r *cleanupRound) byConsumer() error {
	consumers, err := listConsumers(r.ctx, r.e)
	if err != nil {
		return err
	}
	for _, consumer := range consumers {
		from := time.Time{} // year 1, before any processed_at
		for {
			var b dialect.CleanupBatch
			if err := r.batch(func(tx driver.Tx) (err error) {
				b, err = r.e.Dialect.Maintenance().CleanupBatch(r.ctx, tx, dialect.CleanupBatchParams{
					Table: r.e.Table, Consumer: consumer, From: from, Cutoff: r.res.Cutoff, Limit: r.p.BatchSize})
				return err
			}); err != nil {
				return err
			}
			from = b.Next
			if b.Picked == 0 {
				break
			}
			if err := r.deleted(map[string]int64{consumer: b.Deleted}); err != nil {
				return err
			}
		}
	}
	return nil
}

// errCleanupLockLost stops a cleanup whose lock ran out and was taken by another instance, before it deletes more.
var errCleanupLockLost = errors.New("the cleanup lock ran out and another instance took it; stopping before the next batch")

// unlock releases the cleanup lock, outliving a cancelled ctx so that a stopped cleanup does not make the next
// round wait for the lock to run out. A failure is returned; the lock then runs out on its own.
func unlock(ctx context.Context, e Env, holder string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := e.ShortTx(ctx, func(tx driver.Tx) error {
		return e.Dialect.Locks().ReleaseLock(ctx, tx, dialect.LockParams{Table: e.Table, Name: LockName, Holder: holder})
	})
	if err != nil {
		return e.Wrap("cleanup: unlock", err)
	}
	return nil
}

// listConsumers returns the consumers that have rows, in order.
func listConsumers(ctx context.Context, e Env) ([]string, error) {
	var out []string
	err := e.ShortTx(ctx, func(tx driver.Tx) error {
		var err error
		out, err = e.Dialect.Maintenance().Consumers(ctx, tx, e.Table)
		return err
	})
	if err != nil {
		return nil, e.Wrap("list consumers", err)
	}
	return out, nil
}
