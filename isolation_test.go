package inbox_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// withIsolation returns the test DSN with default_transaction_isolation set for its sessions only: lib/pq and pgx
// send it to the server as a runtime parameter, so the shared server's settings stay as they are.
func withIsolation(level string) string {
	sep := "?"
	if strings.Contains(testDSN(), "?") {
		sep = "&"
	}
	return testDSN() + sep + "default_transaction_isolation=" + strings.ReplaceAll(level, " ", "%20")
}

// sqlStateOf returns the SQLSTATE code of a PostgreSQL error, or "" for other errors.
func sqlStateOf(err error) string {
	var e interface{ SQLState() string }
	if errors.As(err, &e) {
		return e.SQLState()
	}
	return ""
}

func TestLease_UnderSerializableDefaultIsolationEveryCallHappensOnce(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	var provider testkit.CallCounter
	var handlers []message.HandlerFunc
	for range 3 { // three consumer processes, each with its own pool
		db := openVia(t, testDriver, withIsolation("serializable"))
		var level string
		require.NoError(t, db.QueryRow(`SHOW default_transaction_isolation`).Scan(&level))
		require.Equal(t, "serializable", level)
		ib, err := inbox.New(db, inbox.WithTable(b.Table), inbox.WithConsumer("payments"),
			inbox.WithLease(30*time.Second), inbox.WithLogger(b.Logs))
		require.NoError(t, err)
		handlers = append(handlers, ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			l := leaseOf(t, msg)
			if err := l.Extend(msg.Context(), 30*time.Second); err != nil {
				return nil, err
			}
			provider.Call(msg.Metadata.Get(inbox.DefaultIDMetadataKey))
			time.Sleep(2 * time.Millisecond)
			return []*message.Message{message.NewMessage(l.IdempotencyKey(), []byte("receipt"))}, nil
		}))
	}
	ids := testkit.EventIDs("pay", 60)
	errs := testkit.DeliverCopies(t, fanOut(handlers), ids, 3)
	requireNoErrors(t, errs)
	provider.RequireOnceEach(t, ids)
	b.requireAllDone(t, "payments", len(ids))
	require.Empty(t, b.Logs.Find("lease write failed"))
}

// fanOut returns a handler that passes each call to the next of hs in turn, as a broker spreads copies over the
// processes of a consumer group.
func fanOut(hs []message.HandlerFunc) message.HandlerFunc {
	var next atomic.Int64
	return func(msg *message.Message) ([]*message.Message, error) {
		return hs[int(next.Add(1))%len(hs)](msg)
	}
}

// requireNoErrors fails with a count and the first few of errs, if there are any.
func requireNoErrors(t testing.TB, errs []error) {
	t.Helper()
	if len(errs) == 0 {
		return
	}
	first := errs[:min(len(errs), 5)]
	t.Fatalf("%d unexpected errors, the first %d:\n%v", len(errs), len(first), errors.Join(first...))
}

func TestTransactionMode_UnderEveryIsolationLevelEachEffectLandsOnce(t *testing.T) {
	t.Parallel()
	for _, level := range []string{"read committed", "repeatable read", "serializable"} {
		t.Run(strings.ReplaceAll(level, " ", "_"), func(t *testing.T) {
			t.Parallel()
			b := newBundle(t)
			effects := b.Table + "_effects"
			_, err := b.db.Exec(`CREATE TABLE ` + effects + ` (event_id text NOT NULL)`) // no key: a second effect would show
			require.NoError(t, err)
			t.Cleanup(func() { _, _ = b.db.Exec(`DROP TABLE IF EXISTS ` + effects) })

			db := openVia(t, testDriver, withIsolation(level))
			ib, err := inbox.New(db, inbox.WithTable(b.Table), inbox.WithConsumer("ledger"))
			require.NoError(t, err)
			h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
				tx, _ := inbox.TxFromContext(msg.Context())
				var current string
				if err := tx.QueryRowContext(msg.Context(), `SHOW transaction_isolation`).Scan(&current); err != nil {
					return nil, err
				}
				if current != level {
					return nil, errors.New("the handler runs at " + current)
				}
				_, err := tx.ExecContext(msg.Context(), `INSERT INTO `+effects+` VALUES ($1)`, msg.Metadata.Get(inbox.DefaultIDMetadataKey))
				return nil, err
			})

			ids := testkit.EventIDs("evt", 60)
			errs := testkit.DeliverCopies(t, h, ids, 3)
			codes := map[string]int{}
			for _, err := range errs {
				codes[sqlStateOf(err)]++
			}
			t.Logf("%s: %d failed deliveries of %d copies, by SQLSTATE: %v", level, len(errs), 3*len(ids), codes)
			for code := range codes {
				require.Contains(t, []string{"40001", "40P01"}, code, "only conflicts fail, and a redelivery settles them")
			}
			var wrong int
			require.NoError(t, b.db.QueryRow(`SELECT count(*) FROM (SELECT event_id FROM `+effects+
				` GROUP BY event_id HAVING count(*) <> 1) w`).Scan(&wrong))
			require.Zero(t, wrong, "every event's effect landed exactly once")
			var n int
			require.NoError(t, b.db.QueryRow(`SELECT count(DISTINCT event_id) FROM `+effects).Scan(&n))
			require.Equal(t, len(ids), n)
			b.requireAllDone(t, "ledger", len(ids))
		})
	}
}
