package testkit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/observe"
)

// registrationRace delivers, for each of names new consumer names in turn, one message from each of callers
// inboxes at once, as replicas that start together with a new handler do. Each caller sends its own event ID, so
// every delivery applies.
func (b *bundle) registrationRace(t *testing.T, names, callers int, calls *atomic.Int64) {
	t.Helper()
	for n := range names {
		name := fmt.Sprintf("new-consumer-%03d", n)
		handlers := make([]func() error, callers)
		for c := range callers {
			h := b.inbox(t, inbox.WithConsumer(name)).Middleware(b.Credit(100, calls))
			id := fmt.Sprintf("evt-%d", c)
			handlers[c] = func() error { _, err := h(newMsg(id)); return err }
		}
		start := make(chan struct{})
		errs := make([]error, callers)
		var wg sync.WaitGroup
		for c, h := range handlers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[c] = h()
			}()
		}
		close(start)
		wg.Wait()
		for c, err := range errs {
			require.NoError(t, err, "caller %d of %s", c, name)
		}
	}
}

func registeringANameDrawsOneID(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	const names, callers = 40, 4
	var calls atomic.Int64
	b.registrationRace(t, names, callers, &calls)
	require.EqualValues(t, names*callers, calls.Load())
	require.EqualValues(t, names*callers*100, b.Balance(t))
	var consumers, rows int64
	b.queryRow(t, `SELECT count(DISTINCT consumer), count(*) FROM `+b.d.View(b.Table), nil, &consumers, &rows)
	require.EqualValues(t, [2]int64{names, names * callers}, [2]int64{consumers, rows})
	st, err := conn.Database().ReadStats(context.Background(), inbox.WithTable(b.Table))
	require.NoError(t, err)

	if b.d.ConsumerIDs == nil { // the rows carry the name: there is no id to draw, and no limit
		require.Zero(t, st.ConsumerIDs)
		return
	}
	var maxID, registered int64
	b.queryRow(t, b.d.ConsumerIDs(b.Table), nil, &maxID, &registered)
	require.EqualValues(t, names, registered)
	require.EqualValues(t, names, maxID, "a caller that lost the race to register a name drew an id all the same")
	require.EqualValues(t, [2]int64{32767, 32767 - names}, [2]int64{st.ConsumerIDs, st.ConsumerIDsLeft},
		"the identity handed out one id a name")
}

type NackRecorder struct {
	observe.NopObserver
	recorded[observe.NackEvent]
}

func (r *NackRecorder) Nacked(_ context.Context, e observe.NackEvent) { r.add(e) }

// recorded keeps the events of one Observer hook.
type recorded[E any] struct {
	mu     sync.Mutex
	events []E
}

func (r *recorded[E]) add(e E) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// Events returns the events so far, oldest first.
func (r *recorded[E]) Events() []E {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]E(nil), r.events...)
}

func exhaustedConsumerIDsHoldANewConsumerBack(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	const delay = 200 * time.Millisecond
	nacks := &NackRecorder{}
	opts := []inbox.Option{inbox.WithRejectDelay(delay), inbox.WithObserver(nacks)}
	var calls atomic.Int64
	registered := b.inbox(t, opts...)
	b.apply(t, registered, &calls, "evt-1")

	if b.d.ExhaustConsumerIDs == nil { // the rows carry the name: a new one always fits
		b.apply(t, b.inbox(t, append(opts, inbox.WithConsumer("newcomer"))...), &calls, "evt-1")
		require.EqualValues(t, 2, calls.Load())
		require.Empty(t, nacks.Events())
		st, err := conn.Database().ReadStats(context.Background(), inbox.WithTable(b.Table))
		require.NoError(t, err)
		require.Zero(t, st.ConsumerIDs)
		return
	}
	b.mustExec(t, b.d.ExhaustConsumerIDs(b.Table))

	newcomer := b.inbox(t, append(opts, inbox.WithConsumer("newcomer"))...).Middleware(b.Credit(100, &calls))
	for range 2 { // each delivery waits the reject delay, the first, which tried to register, and the next
		start := time.Now()
		_, err := newcomer(newMsg("evt-2"))
		waited := time.Since(start)
		require.ErrorIs(t, err, inbox.ErrConsumerIDsExhausted)
		require.ErrorContains(t, err, "register consumer newcomer in table "+b.Table)
		require.True(t, inbox.IsPermanent(err))
		require.GreaterOrEqual(t, waited, delay, "the message was nacked before the reject delay: %v", err)
	}
	events := nacks.Events()
	require.Len(t, events, 2)
	for _, e := range events {
		require.Equal(t, "newcomer", e.Consumer)
		require.Equal(t, "consumer_ids", e.Reason)
		require.Equal(t, delay, e.Delay)
		require.ErrorIs(t, e.Err, inbox.ErrConsumerIDsExhausted)
	}
	require.EqualValues(t, 1, calls.Load(), "the newcomer's handler never ran")

	// The consumer registered before goes on, in the inbox that knows its id and in one that looks it up.
	b.apply(t, registered, &calls, "evt-2")
	b.apply(t, b.inbox(t, opts...), &calls, "evt-3", "evt-3")
	require.EqualValues(t, 3, calls.Load())
	require.EqualValues(t, 300, b.Balance(t))
	require.Len(t, nacks.Events(), 2)
	st, err := conn.Database().ReadStats(context.Background(), inbox.WithTable(b.Table))
	require.NoError(t, err)
	require.EqualValues(t, [2]int64{32767, 0}, [2]int64{st.ConsumerIDs, st.ConsumerIDsLeft})
}
