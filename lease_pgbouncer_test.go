package inbox_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// pgbouncerDSNOptions are what each driver needs behind a transaction-pooling proxy: lib/pq needs nothing.
var pgbouncerDSNOptions = map[string]string{
	"postgres": "",
}

// requireAllDone fails unless every row of consumer is 'done', and there is one per event.
func (b *testBundle) requireAllDone(t testing.TB, consumer string, n int) {
	t.Helper()
	var done, all int
	require.NoError(t, b.db.QueryRow(`SELECT count(*) FILTER (WHERE state = 'done'), count(*) FROM `+b.Table+
		`_view WHERE consumer = $1`, consumer).Scan(&done, &all))
	require.Equal(t, n, all, "one row per event")
	require.Equal(t, n, done, "every row is 'done'")
}

func TestLease_BehindATransactionPoolingProxyEveryCallHappensOnce(t *testing.T) {
	t.Parallel()
	dsn := testkit.StartPgbouncer(t, testDSN(), "postgres")
	for _, driver := range driversBehindPgbouncer {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t) // migrated directly: the proxy is for the message path
			proxied := openVia(t, driver, dsn+pgbouncerDSNOptions[driver])
			ib, err := inbox.New(proxied, inbox.WithTable(b.Table), inbox.WithConsumer("payments"),
				inbox.WithLease(30*time.Second), inbox.WithLogger(b.Logs))
			require.NoError(t, err)
			var provider testkit.CallCounter
			h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
				l := leaseOf(t, msg)
				if err := l.Extend(msg.Context(), 30*time.Second); err != nil {
					return nil, err
				}
				provider.Call(msg.Metadata.Get(inbox.DefaultIDMetadataKey))
				time.Sleep(5 * time.Millisecond)
				return []*message.Message{message.NewMessage(l.IdempotencyKey(), []byte("receipt"))}, nil
			})

			ids := testkit.EventIDs("pay", 40)
			requireNoErrors(t, testkit.DeliverCopies(t, h, ids, 3))
			provider.RequireOnceEach(t, ids)
			b.requireAllDone(t, "payments", len(ids))
			require.Empty(t, b.Logs.Find("lease write failed"))
		})
	}
}
