package testkit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

// apply runs the credit handler on a copy of each ID under ib and fails the test if one is not applied.
func (b *bundle) apply(t *testing.T, ib *inbox.Inbox, calls *atomic.Int64, ids ...string) {
	t.Helper()
	h := ib.Middleware(b.Credit(100, calls))
	for _, id := range ids {
		_, err := h(newMsg(id))
		require.NoError(t, err, "apply %s", id)
	}
}

func migrateTwiceAndConcurrently(t *testing.T, conn Conn) {
	b := newBundle(t, conn, false)
	ctx := context.Background()
	db := conn.Database()
	require.NoError(t, db.Migrate(ctx, inbox.WithTable(b.Table)))
	require.NoError(t, db.Migrate(ctx, inbox.WithTable(b.Table)), "a second run changes nothing")

	const instances = 8
	errs := make(chan error, instances)
	var wg sync.WaitGroup
	for range instances {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- db.Migrate(ctx, inbox.WithTable(b.Table))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	// The schema is whole: an inbox that may not create it applies a message and skips its duplicate.
	var calls atomic.Int64
	b.apply(t, b.inbox(t, inbox.WithAutoMigrate(false)), &calls, "evt-1", "evt-1")
	require.EqualValues(t, 1, calls.Load())
	require.EqualValues(t, 100, b.Balance(t))
	require.EqualValues(t, 1, b.rows(t))
}

func autoMigrate(t *testing.T, conn Conn) {
	b := newBundle(t, conn, false)
	ib := b.inbox(t)
	var calls atomic.Int64
	b.apply(t, ib, &calls, "evt-1", "evt-1")
	require.EqualValues(t, 1, calls.Load())
	require.EqualValues(t, 100, b.Balance(t))
	require.EqualValues(t, 1, b.rows(t))
	state, _ := b.row(t, "evt-1")
	require.Equal(t, "done", state)
}

// migrationRedoneUnderARunningInbox rolls the newest migration back and applies it again while two consumers' Inboxes
// stay built, as in a process that keeps running through the operator's change, in each way of claiming. On
// PostgreSQL that migration (007) numbers the consumers table anew, in the order of the names, so that the consumer
// registered first (wallet-credits) and the one registered second (payments) swap ids: an Inbox that kept the ids
// it learned before would record wallet-credits' messages under payments and skip, as a duplicate of payments', a
// message wallet-credits never applied.
func migrationRedoneUnderARunningInbox(t *testing.T, conn Conn) {
	for _, m := range []struct {
		name string
		opts []inbox.Option
		tx   bool // the handler has a transaction for its effect
	}{
		{"InTransactionMode", nil, true},
		{"InBatchMode", []inbox.Option{inbox.WithBatch(time.Millisecond, 8)}, true},
		{"InLeaseMode", []inbox.Option{inbox.WithLease(time.Minute)}, false},
		{"WithTheClaimAtCommit", []inbox.Option{inbox.WithClaimAtCommit()}, true},
	} {
		t.Run(m.name, func(t *testing.T) {
			if _, err := conn.Database().New(append(m.opts, inbox.WithConsumer(consumer))...); errors.Is(err, inbox.ErrInvalidOption) {
				t.Skipf("this database cannot claim so: %v", err)
			}
			migrationRedoneIn(t, conn, m.opts, m.tx)
		})
	}
}

func migrationRedoneIn(t *testing.T, conn Conn, opts []inbox.Option, inTx bool) {
	const payments = "payments"
	b := newBundle(t, conn, true)
	ctx := context.Background()
	// The effect of a handler with a transaction is a row of its consumer and ID, which commits with the claim or
	// not at all; a lease-mode handler's, which has none, is its run.
	effects := b.Table + "_effects"
	b.mustExec(t, `CREATE TABLE `+effects+` (consumer varchar(64) NOT NULL, message_id varchar(64) NOT NULL)`)
	t.Cleanup(func() { _, _ = b.exec(ctx, `DROP TABLE IF EXISTS `+effects) })
	var mu sync.Mutex
	runs := map[string]int{} // "consumer/ID" -> how often its lease-mode handler ran
	handler := func(name string) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			id, _ := inbox.EventIDFromContext(msg.Context())
			if inTx {
				return nil, conn.ExecInHandler(msg.Context(), `INSERT INTO `+effects+` (consumer, message_id) VALUES (`+
					b.p(1)+`, `+b.p(2)+`)`, name, id)
			}
			mu.Lock()
			runs[name+"/"+id]++
			mu.Unlock()
			return nil, nil
		}
	}
	applied := func() map[string]int {
		t.Helper()
		if !inTx {
			mu.Lock()
			defer mu.Unlock()
			return maps.Clone(runs)
		}
		out := map[string]int{}
		var names, ids []string
		require.NoError(t, b.inTx(ctx, func(tx driver.Tx) error {
			return scanPairs(ctx, tx, `SELECT consumer, message_id FROM `+effects, &names, &ids)
		}))
		for n := range names {
			out[names[n]+"/"+ids[n]]++
		}
		return out
	}
	wallets := b.inbox(t, opts...).Middleware(handler(consumer))
	pays := b.inbox(t, append(opts, inbox.WithConsumer(payments))...).Middleware(handler(payments))
	deliver := func(h message.HandlerFunc, ids ...string) {
		t.Helper()
		for _, id := range ids {
			_, err := h(newMsg(id))
			require.NoError(t, err, "deliver %s", id)
		}
	}
	// wallet-credits registers first, so that its id comes before payments' although its name sorts after.
	deliver(wallets, "evt-1")
	deliver(pays, "evt-1", "evt-2")

	stmts, err := b.d.RollBackNewest(b.Table)
	require.NoError(t, err)
	require.NoError(t, b.inTx(ctx, func(tx driver.Tx) error {
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("roll back the newest migration: %w", err)
			}
		}
		return nil
	}))
	require.NoError(t, conn.Database().Migrate(ctx, inbox.WithTable(b.Table)))

	// evt-2 is new to wallet-credits, though payments applied it; evt-4 is new to payments alone.
	deliver(wallets, "evt-2", "evt-3")
	deliver(pays, "evt-3", "evt-4")
	once := map[string]int{
		consumer + "/evt-1": 1, consumer + "/evt-2": 1, consumer + "/evt-3": 1,
		payments + "/evt-1": 1, payments + "/evt-2": 1, payments + "/evt-3": 1, payments + "/evt-4": 1,
	}
	require.Equal(t, once, applied(), "each message applied once, for its own consumer")
	deliver(wallets, "evt-2", "evt-3")
	deliver(pays, "evt-3", "evt-4")
	require.Equal(t, once, applied(), "the copies are skipped")

	// Each consumer's rows are its own: what the rollback kept of the first messages, and the new ones.
	var names, ids []string
	require.NoError(t, b.inTx(ctx, func(tx driver.Tx) error {
		return scanPairs(ctx, tx, `SELECT consumer, message_id FROM `+b.d.View(b.Table), &names, &ids)
	}))
	rows := map[string][]string{}
	for n := range names {
		rows[names[n]] = append(rows[names[n]], ids[n])
	}
	for name, want := range map[string][]string{consumer: {"evt-2", "evt-3"}, payments: {"evt-3", "evt-4"}} {
		kept := map[string][]string{consumer: {"evt-1"}, payments: {"evt-1", "evt-2"}}[name]
		require.Subset(t, rows[name], want, "%s's new messages are recorded under its name", name)
		require.Subset(t, append(append([]string(nil), kept...), want...), rows[name], "%s has no row of another consumer's", name)
	}
}

// scanPairs appends the two text columns query returns to firsts and seconds.
func scanPairs(ctx context.Context, tx driver.Tx, query string, firsts, seconds *[]string) error {
	rows, err := tx.Query(ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var a, b string
		if err := rows.Scan(&a, &b); err != nil {
			return err
		}
		*firsts, *seconds = append(*firsts, a), append(*seconds, b)
	}
	return rows.Err()
}

const thirtyDays = 30 * 24 * time.Hour

func cleanupDeletesExpired(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	ib := b.inbox(t)
	var calls atomic.Int64
	b.apply(t, ib, &calls, "evt-1", "evt-2", "evt-3")
	b.age(t, consumer, thirtyDays, "evt-1", "evt-2")

	res, err := conn.Database().Cleanup(context.Background(), inbox.CleanupParams{}, inbox.WithTable(b.Table))
	require.NoError(t, err)
	require.False(t, res.Skipped)
	require.EqualValues(t, 2, res.Deleted)
	require.EqualValues(t, 1, b.rows(t))
	state, _ := b.row(t, "evt-3")
	require.Equal(t, "done", state, "a row inside the retention is kept")

	// What was deleted is forgotten: its next copy is applied again; what was kept is still a duplicate.
	b.apply(t, ib, &calls, "evt-1", "evt-3")
	require.EqualValues(t, 4, calls.Load())
	require.EqualValues(t, 400, b.Balance(t))
}

func cleanupConcurrentIsSkipped(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	var calls atomic.Int64
	b.apply(t, b.inbox(t), &calls, "evt-1", "evt-2", "evt-3")
	b.age(t, consumer, thirtyDays, "evt-1", "evt-2")
	ctx := context.Background()
	db := conn.Database()

	inFirstBatch := make(chan struct{})
	gate, release := Gate(t)
	type result struct {
		res inbox.CleanupResult
		err error
	}
	first := make(chan result, 1)
	go func() {
		var once sync.Once
		res, err := db.Cleanup(ctx, inbox.CleanupParams{BatchSize: 1, Progress: func(inbox.CleanupProgress) {
			once.Do(func() { close(inFirstBatch); <-gate })
		}}, inbox.WithTable(b.Table))
		first <- result{res, err}
	}()
	<-inFirstBatch

	second, err := db.Cleanup(ctx, inbox.CleanupParams{}, inbox.WithTable(b.Table))
	require.NoError(t, err)
	require.True(t, second.Skipped, "the first round holds the lock")
	require.Zero(t, second.Deleted)
	require.EqualValues(t, 2, b.rows(t), "the skipped round deleted nothing")

	release()
	r := <-first
	require.NoError(t, r.err)
	require.False(t, r.res.Skipped)
	require.EqualValues(t, 2, r.res.Deleted)
	require.EqualValues(t, 1, b.rows(t))
}

func readStats(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	var calls atomic.Int64
	b.apply(t, b.inbox(t), &calls, "evt-1", "evt-2")

	// Another consumer in lease mode: one message dead-lettered after its only attempt, one released for another.
	failing := func(*message.Message) ([]*message.Message, error) { return nil, errors.New("provider unavailable") }
	dlq := &RecordingPublisher{}
	_, err := b.inbox(t, inbox.WithConsumer("payments"), inbox.WithLease(time.Minute), inbox.WithMaxAttempts(1),
		inbox.WithDeadLetter(dlq, "payments.dlq")).Middleware(failing)(newMsg("pay-1"))
	require.NoError(t, err)
	_, err = b.inbox(t, inbox.WithConsumer("payments"), inbox.WithLease(time.Minute)).Middleware(failing)(newMsg("pay-2"))
	require.Error(t, err)

	st, err := conn.Database().ReadStats(context.Background(), inbox.WithTable(b.Table))
	require.NoError(t, err)
	require.Equal(t, b.Table, st.Table)
	require.Len(t, st.Consumers, 2)
	p, w := st.Consumers[0], st.Consumers[1]
	require.Equal(t, "payments", p.Consumer)
	require.EqualValues(t, [6]int64{2, 0, 1, 1, 0, 0}, [6]int64{p.Rows, p.Done, p.Failed, p.Released, p.Processing, p.Expired})
	require.Equal(t, consumer, w.Consumer)
	require.EqualValues(t, [6]int64{2, 2, 0, 0, 0, 0}, [6]int64{w.Rows, w.Done, w.Failed, w.Released, w.Processing, w.Expired})
	require.Positive(t, st.TableBytes)
	require.Positive(t, st.IndexBytes)
	require.GreaterOrEqual(t, st.TotalBytes, st.TableBytes+st.IndexBytes)

	_, err = conn.Database().ReadStats(context.Background(), inbox.WithTable(b.Table+"_missing"))
	require.ErrorIs(t, err, inbox.ErrSchemaMissing)
}

func forget(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	ib := b.inbox(t)
	var calls atomic.Int64
	b.apply(t, ib, &calls, "evt-1", "evt-2")
	ctx := context.Background()

	row, err := conn.Database().Forget(ctx, inbox.ForgetParams{Consumer: consumer, ID: "evt-1"}, inbox.WithTable(b.Table),
		inbox.WithLogger(b.Logs))
	require.NoError(t, err)
	require.Equal(t, "done", row.State)
	require.WithinDuration(t, time.Now(), row.ProcessedAt, 2*time.Minute, "the row it removed")
	logged := b.Logs.Find("Inbox row forgotten")
	require.Len(t, logged, 1, "what an operator removed is in the log")
	require.Equal(t, "evt-1", logged[0].Fields["event_id"])
	require.Equal(t, consumer, logged[0].Fields["consumer"])
	require.EqualValues(t, 1, b.rows(t), "only that row is removed")
	state, _ := b.row(t, "evt-2")
	require.Equal(t, "done", state)

	_, err = conn.Database().Forget(ctx, inbox.ForgetParams{Consumer: consumer, ID: "evt-1"}, inbox.WithTable(b.Table))
	require.ErrorIs(t, err, inbox.ErrNotFound)

	b.apply(t, ib, &calls, "evt-1", "evt-2")
	require.EqualValues(t, 3, calls.Load(), "the forgotten message is applied again, the other is not")
	require.EqualValues(t, 300, b.Balance(t))
	require.EqualValues(t, 2, b.rows(t))
}

func remembers(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	var calls atomic.Int64
	b.apply(t, b.inbox(t), &calls, "evt-1", "evt-2")
	b.apply(t, b.inbox(t, inbox.WithConsumer("payments")), &calls, "pay-1")
	b.age(t, consumer, 3*24*time.Hour, "evt-1")
	b.age(t, "payments", 2*time.Hour, "pay-1")

	ms, err := conn.Database().Remembers(context.Background(), inbox.WithTable(b.Table))
	require.NoError(t, err)
	require.Len(t, ms, 2)
	require.Equal(t, "payments", ms[0].Consumer)
	require.InDelta(t, (2 * time.Hour).Seconds(), ms[0].Age.Seconds(), 60)
	require.Equal(t, consumer, ms[1].Consumer)
	require.InDelta(t, (3 * 24 * time.Hour).Seconds(), ms[1].Age.Seconds(), 60, "the oldest row counts")
	require.True(t, ms[1].Covers(48*time.Hour))
	require.False(t, ms[0].Covers(48*time.Hour))
}
