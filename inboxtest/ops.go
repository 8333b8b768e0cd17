package inboxtest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
)

// apply runs the credit handler on a copy of each ID under ib and fails the test if one is not applied.
func (b *bundle) apply(t *testing.T, ib *inbox.Inbox, calls *atomic.Int64, ids ...string) {
	t.Helper()
	h := ib.Middleware(b.credit(100, calls))
	for _, id := range ids {
		_, err := h(newMsg(id))
		require.NoError(t, err, "apply %s", id)
	}
}

func migrateTwiceAndConcurrently(t *testing.T, conn Conn) {
	b := newBundle(t, conn, false)
	ctx := context.Background()
	db := conn.Database()
	require.NoError(t, db.Migrate(ctx, inbox.WithTable(b.table)))
	require.NoError(t, db.Migrate(ctx, inbox.WithTable(b.table)), "a second run changes nothing")

	const instances = 8
	errs := make(chan error, instances)
	var wg sync.WaitGroup
	for range instances {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- db.Migrate(ctx, inbox.WithTable(b.table))
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
	require.EqualValues(t, 100, b.balance(t))
	require.EqualValues(t, 1, b.rows(t))
}

func autoMigrate(t *testing.T, conn Conn) {
	b := newBundle(t, conn, false)
	ib := b.inbox(t)
	var calls atomic.Int64
	b.apply(t, ib, &calls, "evt-1", "evt-1")
	require.EqualValues(t, 1, calls.Load())
	require.EqualValues(t, 100, b.balance(t))
	require.EqualValues(t, 1, b.rows(t))
	state, _ := b.row(t, "evt-1")
	require.Equal(t, "done", state)
}

const thirtyDays = 30 * 24 * time.Hour

func cleanupDeletesExpired(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	ib := b.inbox(t)
	var calls atomic.Int64
	b.apply(t, ib, &calls, "evt-1", "evt-2", "evt-3")
	b.age(t, consumer, thirtyDays, "evt-1", "evt-2")

	res, err := conn.Database().Cleanup(context.Background(), inbox.CleanupParams{}, inbox.WithTable(b.table))
	require.NoError(t, err)
	require.False(t, res.Skipped)
	require.EqualValues(t, 2, res.Deleted)
	require.EqualValues(t, 1, b.rows(t))
	state, _ := b.row(t, "evt-3")
	require.Equal(t, "done", state, "a row inside the retention is kept")

	// What was deleted is forgotten: its next copy is applied again; what was kept is still a duplicate.
	b.apply(t, ib, &calls, "evt-1", "evt-3")
	require.EqualValues(t, 4, calls.Load())
	require.EqualValues(t, 400, b.balance(t))
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
		}}, inbox.WithTable(b.table))
		first <- result{res, err}
	}()
	<-inFirstBatch

	second, err := db.Cleanup(ctx, inbox.CleanupParams{}, inbox.WithTable(b.table))
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

	st, err := conn.Database().ReadStats(context.Background(), inbox.WithTable(b.table))
	require.NoError(t, err)
	require.Equal(t, b.table, st.Table)
	require.Len(t, st.Consumers, 2)
	p, w := st.Consumers[0], st.Consumers[1]
	require.Equal(t, "payments", p.Consumer)
	require.EqualValues(t, [6]int64{2, 0, 1, 1, 0, 0}, [6]int64{p.Rows, p.Done, p.Failed, p.Released, p.Processing, p.Expired})
	require.Equal(t, consumer, w.Consumer)
	require.EqualValues(t, [6]int64{2, 2, 0, 0, 0, 0}, [6]int64{w.Rows, w.Done, w.Failed, w.Released, w.Processing, w.Expired})
}

func forget(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	ib := b.inbox(t)
	var calls atomic.Int64
	b.apply(t, ib, &calls, "evt-1", "evt-2")
	ctx := context.Background()

	row, err := conn.Database().Forget(ctx, inbox.ForgetParams{Consumer: consumer, ID: "evt-1"}, inbox.WithTable(b.table))
	require.NoError(t, err)
	require.Equal(t, "done", row.State)
	require.EqualValues(t, 1, b.rows(t), "only that row is removed")
	state, _ := b.row(t, "evt-2")
	require.Equal(t, "done", state)

	_, err = conn.Database().Forget(ctx, inbox.ForgetParams{Consumer: consumer, ID: "evt-1"}, inbox.WithTable(b.table))
	require.ErrorIs(t, err, inbox.ErrNotFound)

	b.apply(t, ib, &calls, "evt-1", "evt-2")
	require.EqualValues(t, 3, calls.Load(), "the forgotten message is applied again, the other is not")
	require.EqualValues(t, 300, b.balance(t))
	require.EqualValues(t, 2, b.rows(t))
}

func remembers(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	var calls atomic.Int64
	b.apply(t, b.inbox(t), &calls, "evt-1", "evt-2")
	b.apply(t, b.inbox(t, inbox.WithConsumer("payments")), &calls, "pay-1")
	b.age(t, consumer, 3*24*time.Hour, "evt-1")
	b.age(t, "payments", 2*time.Hour, "pay-1")

	ms, err := conn.Database().Remembers(context.Background(), inbox.WithTable(b.table))
	require.NoError(t, err)
	require.Len(t, ms, 2)
	require.Equal(t, "payments", ms[0].Consumer)
	require.InDelta(t, (2 * time.Hour).Seconds(), ms[0].Age.Seconds(), 60)
	require.Equal(t, consumer, ms[1].Consumer)
	require.InDelta(t, (3 * 24 * time.Hour).Seconds(), ms[1].Age.Seconds(), 60, "the oldest row counts")
	require.True(t, ms[1].Covers(48*time.Hour))
	require.False(t, ms[0].Covers(48*time.Hour))
}
