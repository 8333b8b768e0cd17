package inboxtest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
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
			h := b.inbox(t, inbox.WithConsumer(name)).Middleware(b.credit(100, calls))
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
	require.EqualValues(t, names*callers*100, b.balance(t))
	var consumers, rows int64
	b.queryRow(t, `SELECT count(DISTINCT consumer), count(*) FROM `+b.d.View(b.table), nil, &consumers, &rows)
	require.EqualValues(t, [2]int64{names, names * callers}, [2]int64{consumers, rows})

	if b.d.ConsumerIDs == nil {
		return // the rows carry the name: there is no id to draw
	}
	var maxID, registered int64
	b.queryRow(t, b.d.ConsumerIDs(b.table), nil, &maxID, &registered)
	require.EqualValues(t, names, registered)
	require.EqualValues(t, names, maxID, "a caller that lost the race to register a name drew an id all the same")
}
