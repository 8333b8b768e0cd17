package inbox_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectively-once/watermill-inbox/internal/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/dialect/postgres"
	"github.com/effectively-once/watermill-inbox/driver"
)

// slowFirstBegin is a pool whose first transaction takes a while to begin.
type slowFirstBegin struct {
	driver.Pool
	begun atomic.Int32
	delay time.Duration
}

func (p *slowFirstBegin) Begin(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if p.begun.Add(1) == 1 {
		time.Sleep(p.delay)
	}
	return p.Pool.Begin(ctx, opts)
}

// A message that finds nothing running goes alone, holding the turn on the connection. A copy of it that arrives
// meanwhile must not go in a batch that claims the ID before the lone message does: that batch would hold the row
// the lone message's claim waits for, while it waits for the turn the lone message holds, and both would hang for
// good. The copy waits for the lone message, and is then skipped as a duplicate.
func TestBatch_ACopyOfALoneMessageWaitsForItInsteadOfDeadlocking(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	pool := &slowFirstBegin{Pool: driver.StdSQL(b.db), delay: 300 * time.Millisecond}
	ib, err := inbox.OnDialect(postgres.Dialect(), pool).New(inbox.WithTable(b.Table), inbox.WithConsumer("wallet-credits"),
		inbox.WithBatch(0, 8))
	require.NoError(t, err)
	var calls atomic.Int64
	h := ib.Middleware(b.Credit(1, &calls))
	_, err = h(newMsg("warm-up")) // the schema check and the consumer's registration, and the slow BEGIN
	require.NoError(t, err)
	pool.begun.Store(0)

	// Each message gives up after 5 s, as a router's handler timeout would make it: a hang then ends as an error.
	deliver := func(id string) error {
		msg := newMsg(id)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		msg.SetContext(ctx)
		_, err := h(msg)
		return err
	}
	errs := make(chan error, 3)
	go func() { errs <- deliver("evt-1") }() // alone; its BEGIN takes 300 ms
	time.Sleep(50 * time.Millisecond)
	for _, id := range []string{"evt-1", "evt-2"} { // a copy, and another message: a batch forms at once
		go func() { errs <- deliver(id) }()
	}
	for range 3 {
		require.NoError(t, <-errs, "the lone message and the batch must not wait for each other")
	}
	require.EqualValues(t, 3, calls.Load(), "warm-up, evt-1 once, evt-2")
	require.Equal(t, 3, b.Balance(t))
}
