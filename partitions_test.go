package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/dialect/postgres"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
	"github.com/effectively-once/watermill-inbox/observe"
)

func TestPartitions_UUID7FloorIsTheLeastV7OfItsMillisecond(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	floor := inbox.UUID7Floor(at)
	id, err := uuid.Parse(floor)
	require.NoError(t, err)
	require.EqualValues(t, 7, id.Version())
	require.Equal(t, uuid.RFC4122, id.Variant())
	sec, nsec := id.Time().UnixTime()
	require.Equal(t, at.UnixMilli(), sec*1000+nsec/1e6, "the first 48 bits are the time in milliseconds")
	require.True(t, strings.HasSuffix(floor, "-7000-8000-000000000000"), floor)

	v7, err := uuid.NewV7()
	require.NoError(t, err)
	require.Less(t, inbox.UUID7Floor(time.Now().Add(-time.Second)), v7.String(), "a new v7 sorts after an earlier floor")
	require.Greater(t, inbox.UUID7Floor(time.Now().Add(time.Second)), v7.String(), "and before a later one")
}

// partitioned migrates a fresh inbox table partitioned by hour and returns it with its options.
func partitioned(t testing.TB, db *sql.DB) (string, []inbox.SharedOption) {
	t.Helper()
	table := testkit.UniqueName("inbox_parts")
	t.Cleanup(func() {
		dropInboxTables(db, table)
		_, _ = db.Exec(`DROP TABLE IF EXISTS ` + table + `_effects`)
	})
	opts := []inbox.SharedOption{inbox.WithTable(table), inbox.WithIDType(inbox.IDTypeUUID), inbox.WithPartitions(time.Hour)}
	require.NoError(t, inbox.OnSQL(db).Migrate(context.Background(), maintenanceOptions(opts)...))
	return table, opts
}

// v7At returns a UUIDv7 of time at, n telling apart IDs of one millisecond.
func v7At(at time.Time, n int) string {
	floor := inbox.UUID7Floor(at)
	return floor[:24] + fmt.Sprintf("%012x", n)
}

// partitionOf names the partition that holds the row of id.
func partitionOf(t *testing.T, db *sql.DB, table, id string) string {
	t.Helper()
	var name string
	require.NoError(t, db.QueryRow(`SELECT tableoid::regclass::text FROM `+table+` WHERE message_id = $1`, id).Scan(&name))
	return name
}

func TestPartitions_MigrateCreatesThePartitionsAndEachIDLandsInItsOwn(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	table, opts := partitioned(t, db)

	var kind string
	var parts int
	require.NoError(t, db.QueryRow(`SELECT c.relkind::text, (SELECT count(*) FROM pg_inherits WHERE inhparent = c.oid)
		FROM pg_class c WHERE c.oid = $1::regclass`, table).Scan(&kind, &parts))
	require.Equal(t, "p", kind)
	require.GreaterOrEqual(t, parts, 1+1+48, "the default partition, the hour before, and 48 hours ahead")

	ib, err := inbox.New(db, inboxOptions(opts, inbox.WithConsumer("wallet-credits"))...)
	require.NoError(t, err)
	now := time.Now()
	recent, old, v4 := v7At(now, 1), v7At(now.Add(-30*24*time.Hour), 2), uuid.NewString()
	h := ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	for _, id := range []string{recent, old, v4} {
		_, err := h(newMsg(id))
		require.NoError(t, err)
	}
	require.Equal(t, inbox.PartitionName(table, inbox.PeriodStart(now, time.Hour)), partitionOf(t, db, table, recent))
	require.Equal(t, table+"_default", partitionOf(t, db, table, old), "older than every partition")
	require.Equal(t, table+"_default", partitionOf(t, db, table, v4), "not a time")
}

func TestPartitions_TheCleanupDropsExpiredPartitionsWithTheirProducedMessagesAndCleansTheDefault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	table, opts := partitioned(t, db)

	// A partition ten hours old, as an earlier round would have made it, with a message that produced one.
	from := inbox.PeriodStart(time.Now().Add(-10*time.Hour), time.Hour)
	old := inbox.PartitionName(table, from)
	_, err := db.Exec(fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
		old, table, inbox.UUID7Floor(from), inbox.UUID7Floor(from.Add(time.Hour))))
	require.NoError(t, err)
	ib, err := inbox.New(db, inboxOptions(opts, inbox.WithConsumer("wallet-credits"))...)
	require.NoError(t, err)
	produce := ib.Middleware(func(*message.Message) ([]*message.Message, error) {
		return []*message.Message{message.NewMessage("", []byte(`{}`))}, nil
	})
	expired, stray, fresh := v7At(from.Add(time.Minute), 1), uuid.NewString(), v7At(time.Now(), 2)
	for _, id := range []string{expired, stray, fresh} {
		_, err := produce(newMsg(id))
		require.NoError(t, err)
	}
	require.Equal(t, old, partitionOf(t, db, table, expired))
	// The stray v4 ID in the default partition was applied six hours ago.
	_, err = db.Exec(`UPDATE `+table+` SET processed_at = processed_at - 6 * 60 WHERE message_id = $1`, stray)
	require.NoError(t, err)

	res, err := inbox.OnSQL(db).Cleanup(ctx, inbox.CleanupParams{Retention: 5 * time.Hour}, maintenanceOptions(opts)...)
	require.NoError(t, err)
	require.Equal(t, 1, res.PartitionsDropped)
	require.Zero(t, res.PartitionsCreated, "Migrate made the others")
	require.EqualValues(t, 1, res.Deleted, "the stray row of the default partition")

	var left []string
	rows, err := db.Query(`SELECT message_id::text FROM ` + table + ` UNION ALL SELECT message_id::text FROM ` + table + `_produced`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		left = append(left, id)
	}
	require.NoError(t, rows.Err())
	require.ElementsMatch(t, []string{fresh, fresh}, left, "the fresh row and its produced message stay; the rest went")
	var exists bool
	require.NoError(t, db.QueryRow(`SELECT to_regclass($1) IS NOT NULL`, old).Scan(&exists))
	require.False(t, exists)

	again, err := inbox.OnSQL(db).Cleanup(ctx, inbox.CleanupParams{Retention: 5 * time.Hour}, maintenanceOptions(opts)...)
	require.NoError(t, err)
	require.Zero(t, again.PartitionsDropped+again.PartitionsCreated+int(again.Deleted), "nothing left to do")
}

func TestPartitions_CleanupRefusesATableThatIsNotPartitioned(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	_, err := inbox.OnSQL(b.db).Cleanup(context.Background(), inbox.CleanupParams{},
		inbox.WithTable(b.Table), inbox.WithIDType(inbox.IDTypeUUID), inbox.WithPartitions(time.Hour))
	require.ErrorIs(t, err, inbox.ErrInvalidOption)
	require.ErrorContains(t, err, "not partitioned")
}

// TestPartitions_CopiesRacingAcrossABoundaryWhilePartitionsAreCreatedApplyOnce delivers four copies of each of 40
// IDs whose times straddle the boundary between two hours that have no partition yet, so they land in the default
// partition, while the two partitions are created, each moving its rows out of the default partition. A copy
// whose claim fails is delivered again, as a broker would. Every ID must be applied exactly once, and end in
// its own partition.
func TestPartitions_CopiesRacingAcrossABoundaryWhilePartitionsAreCreatedApplyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	table, opts := partitioned(t, db)
	effects := table + "_effects"
	_, err := db.Exec(`CREATE TABLE ` + effects + ` (id uuid PRIMARY KEY, applied int NOT NULL)`)
	require.NoError(t, err)

	boundary := inbox.PeriodStart(time.Now().Add(100*time.Hour), time.Hour) // beyond every partition made ahead
	var ids []string
	for k := range 40 {
		ids = append(ids, v7At(boundary.Add(time.Duration(k-20)*time.Millisecond), k))
	}
	ib, err := inbox.New(db, inboxOptions(opts, inbox.WithConsumer("wallet-credits"))...)
	require.NoError(t, err)
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		tx, _ := inbox.TxFromContext(msg.Context())
		_, err := tx.ExecContext(msg.Context(), `INSERT INTO `+effects+` (id, applied) VALUES ($1, 1)
			ON CONFLICT (id) DO UPDATE SET applied = `+effects+`.applied + 1`, msg.Metadata.Get(inbox.DefaultIDMetadataKey))
		return nil, err
	})

	var copies []string
	for _, id := range ids {
		copies = append(copies, id, id, id, id)
	}
	rand.Shuffle(len(copies), func(i, j int) { copies[i], copies[j] = copies[j], copies[i] })
	work := make(chan string)
	var wg sync.WaitGroup
	var redelivered atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				for try := 0; ; try++ {
					_, err := h(newMsg(id))
					if err == nil {
						break
					}
					if redelivered.Add(1) == 1 {
						t.Logf("first failed claim: %v", err)
					}
					if try > 50 {
						t.Errorf("copy of %s failed 50 times: %v", id, err)
						break
					}
				}
			}
		}()
	}
	pt := postgres.Dialect().(dialect.Partitioner)
	pool := driver.StdSQL(db)
	created := make(chan error, 1)
	go func() {
		var errs []error
		for n, from := range []time.Time{boundary.Add(-time.Hour), boundary} {
			time.Sleep(time.Duration(5+10*n) * time.Millisecond)
			p := dialect.PartitionParams{Table: table, Name: inbox.PartitionName(table, from), Default: table + "_default",
				From: inbox.UUID7Floor(from), To: inbox.UUID7Floor(from.Add(time.Hour))}
			for {
				err := inShortTxForTest(ctx, pool, func(tx driver.Tx) error { return pt.CreatePartition(ctx, tx, p) })
				if err == nil || postgres.Dialect().Classify(err) != dialect.LockConflict {
					errs = append(errs, err)
					break
				}
			}
		}
		created <- errors.Join(errs...)
	}()
	for _, id := range copies {
		work <- id
	}
	close(work)
	wg.Wait()
	require.NoError(t, <-created)

	var applied, once int
	require.NoError(t, db.QueryRow(`SELECT count(*), count(*) FILTER (WHERE applied = 1) FROM `+effects).Scan(&applied, &once))
	require.Equal(t, len(ids), applied, "every ID applied")
	require.Equal(t, len(ids), once, "and each once")
	for k, id := range ids {
		want := inbox.PartitionName(table, boundary)
		if k < 20 {
			want = inbox.PartitionName(table, boundary.Add(-time.Hour))
		}
		require.Equal(t, want, partitionOf(t, db, table, id), "ID %d", k)
	}
	t.Logf("%d copies failed their claim and were delivered again", redelivered.Load())
}

// inShortTxForTest runs f in a transaction of pool and commits it unless f fails.
func inShortTxForTest(ctx context.Context, pool driver.Pool, f func(driver.Tx) error) error {
	tx, err := pool.Begin(ctx, driver.TxOptions{})
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		return errors.Join(err, tx.Rollback(ctx))
	}
	return tx.Commit(ctx)
}

func TestPartitions_APartitionLeftDetachedIsDroppedByTheNextRound(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	table, opts := partitioned(t, db)
	// A round detaches expired partitions in one transaction and drops them in others; one that stopped in
	// between leaves a detached table under the inbox's name for partitions, which no listing of partitions shows.
	from := inbox.PeriodStart(time.Now().Add(-10*time.Hour), time.Hour)
	left := inbox.PartitionName(table, from)
	_, err := db.Exec(fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
		left, table, inbox.UUID7Floor(from), inbox.UUID7Floor(from.Add(time.Hour))))
	require.NoError(t, err)
	_, err = db.Exec(`ALTER TABLE ` + table + ` DETACH PARTITION ` + left)
	require.NoError(t, err)

	res, err := inbox.OnSQL(db).Cleanup(context.Background(), inbox.CleanupParams{}, maintenanceOptions(opts)...)
	require.NoError(t, err)
	require.Equal(t, 1, res.PartitionsDropped)
	var exists bool
	require.NoError(t, db.QueryRow(`SELECT to_regclass($1) IS NOT NULL`, left).Scan(&exists))
	require.False(t, exists)
}

// conflictCounter counts the fingerprint conflicts the inbox reports.
type conflictCounter struct {
	observe.NopObserver
	n atomic.Int64
}

func (c *conflictCounter) FingerprintConflict(context.Context, observe.ConflictEvent) { c.n.Add(1) }

// A row that a new partition takes out of the default partition keeps every column, the fingerprint with the
// rest: a later copy of its event ID with another payload is still reported.
func TestPartitions_RowsMovedOutOfTheDefaultPartitionKeepTheirFingerprints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	table := testkit.UniqueName("inbox_parts_fp")
	t.Cleanup(func() { dropInboxTables(db, table) })
	conflicts := &conflictCounter{}
	opts := []inbox.SharedOption{inbox.WithTable(table), inbox.WithIDType(inbox.IDTypeUUID),
		inbox.WithPartitions(time.Hour), inbox.WithFingerprint(inbox.Fingerprint{}), inbox.WithObserver(conflicts)}
	require.NoError(t, inbox.OnSQL(db).Migrate(ctx, maintenanceOptions(opts)...))
	ib, err := inbox.New(db, inboxOptions(opts, inbox.WithConsumer("wallet-credits"))...)
	require.NoError(t, err)
	var applied atomic.Int64
	h := ib.Middleware(func(*message.Message) ([]*message.Message, error) { applied.Add(1); return nil, nil })

	from := inbox.PeriodStart(time.Now().Add(100*time.Hour), time.Hour) // beyond every partition made ahead
	var ids []string
	for k := range 10 {
		id := v7At(from.Add(time.Duration(k)*time.Minute), k)
		ids = append(ids, id)
		_, err := h(newMsg(id))
		require.NoError(t, err)
		require.Equal(t, table+"_default", partitionOf(t, db, table, id))
	}

	p := dialect.PartitionParams{Table: table, Name: inbox.PartitionName(table, from), Default: table + "_default",
		From: inbox.UUID7Floor(from), To: inbox.UUID7Floor(from.Add(time.Hour))}
	require.NoError(t, inShortTxForTest(ctx, driver.StdSQL(db), func(tx driver.Tx) error {
		return postgres.Dialect().(dialect.Partitioner).CreatePartition(ctx, tx, p)
	}))

	var moved, withoutFingerprint int
	require.NoError(t, db.QueryRow(`SELECT count(*), count(*) FILTER (WHERE fingerprint IS NULL) FROM `+p.Name).
		Scan(&moved, &withoutFingerprint))
	require.Equal(t, len(ids), moved, "every row of the range moved to the new partition")
	require.Zero(t, withoutFingerprint, "a moved row keeps its fingerprint")

	for _, id := range ids {
		msg := newMsg(id)
		msg.Payload = []byte(`{"account_id":1,"amount":999}`)
		_, err := h(msg)
		require.NoError(t, err)
	}
	require.EqualValues(t, len(ids), applied.Load(), "the copies were skipped")
	require.EqualValues(t, len(ids), conflicts.n.Load(), "and each reported as a reused event ID")
}
