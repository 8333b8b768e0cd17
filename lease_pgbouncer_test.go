package inbox_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
)

// pgbouncerDSNOptions are what each driver needs behind a transaction-pooling proxy. lib/pq needs nothing. pgx's
// default statement cache prepares named statements and reuses them on later transactions, which the proxy runs on
// other server connections where they do not exist; describe mode uses unnamed statements only.
var pgbouncerDSNOptions = map[string]string{
	"postgres": "",
	"pgx":      "&statement_cache_mode=describe",
}

// deliverCopies hands copies of each event to h at once, from as many goroutines, as a broker redelivering them
// to several consumers would. A copy that fails is delivered again, as after a nack, until h accepts it. It
// returns the errors other than ErrLeaseHeld, which is the nack lease mode is built on.
func deliverCopies(t testing.TB, h message.HandlerFunc, ids []string, copies int) []error {
	t.Helper()
	var mu sync.Mutex
	var unexpected []error
	deadline := time.Now().Add(90 * time.Second)
	var wg sync.WaitGroup
	for _, id := range ids {
		for range copies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					_, err := h(newMsg(id))
					if err == nil {
						return
					}
					if !errors.Is(err, inbox.ErrLeaseHeld) {
						mu.Lock()
						unexpected = append(unexpected, fmt.Errorf("%s: %w", id, err))
						mu.Unlock()
					}
				}
				mu.Lock()
				unexpected = append(unexpected, fmt.Errorf("%s: still not accepted after 90s", id))
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	return unexpected
}

// eventIDs returns n event IDs with prefix.
func eventIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return ids
}

// callCounter counts an external call per event.
type callCounter struct {
	mu    sync.Mutex
	calls map[string]int
}

func (c *callCounter) call(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	c.calls[id]++
}

// requireOnceEach fails unless every one of ids was called exactly once.
func (c *callCounter) requireOnceEach(t testing.TB, ids []string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var wrong []string
	for _, id := range ids {
		if c.calls[id] != 1 {
			wrong = append(wrong, fmt.Sprintf("%s called %d times", id, c.calls[id]))
		}
	}
	require.Empty(t, wrong, "every event's external call happens exactly once")
}

// requireAllDone fails unless every row of consumer is 'done', and there is one per event.
func (b *testBundle) requireAllDone(t testing.TB, consumer string, n int) {
	t.Helper()
	var done, all int
	require.NoError(t, b.db.QueryRow(`SELECT count(*) FILTER (WHERE state = 'done'), count(*) FROM `+b.table+
		` WHERE consumer = $1`, consumer).Scan(&done, &all))
	require.Equal(t, n, all, "one row per event")
	require.Equal(t, n, done, "every row is 'done'")
}

func TestLease_BehindATransactionPoolingProxyEveryCallHappensOnce(t *testing.T) {
	t.Parallel()
	dsn := startPgbouncer(t)
	for _, driver := range driversBehindPgbouncer {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t) // migrated directly: the proxy is for the message path
			proxied := openVia(t, driver, dsn+pgbouncerDSNOptions[driver])
			ib, err := inbox.New(proxied, inbox.WithTable(b.table), inbox.WithConsumer("payments"),
				inbox.WithLease(30*time.Second), inbox.WithLogger(b.logs))
			require.NoError(t, err)
			var provider callCounter
			h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
				l := leaseOf(t, msg)
				if err := l.Extend(msg.Context(), 30*time.Second); err != nil {
					return nil, err
				}
				provider.call(msg.Metadata.Get(inbox.DefaultIDMetadataKey))
				time.Sleep(5 * time.Millisecond)
				return []*message.Message{message.NewMessage(l.IdempotencyKey(), []byte("receipt"))}, nil
			})

			ids := eventIDs("pay", 40)
			requireNoErrors(t, deliverCopies(t, h, ids, 3))
			provider.requireOnceEach(t, ids)
			b.requireAllDone(t, "payments", len(ids))
			require.Empty(t, b.logs.find("lease write failed"))
		})
	}
}
