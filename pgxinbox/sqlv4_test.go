package pgxinbox_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	_ "github.com/lib/pq"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
)

// v4Adapter is one of watermill-sql v4's ways to its database, with the inbox over the same database the way a
// user of that client library builds it.
type v4Adapter struct {
	beginner func(b *testBundle) wsql.Beginner
	database func(b *testBundle) *inbox.Database
	// givesUpSafely is whether the subscriber can end its transaction while a handler that used it still runs
	// (its ack deadline passed, it closed) without a data race. Over database/sql it can: *sql.Tx serializes its
	// callers. Over pgx it cannot: v4 commits the pgx.Tx from its own goroutine with nothing ordering that commit
	// after the handler's statements, which the race detector reports inside pgx.
	givesUpSafely bool
}

// v4Adapters are both of watermill-sql v4's adapters: database/sql (over lib/pq) and pgx.
var v4Adapters = map[string]v4Adapter{
	"StdSQL": {
		beginner:      func(b *testBundle) wsql.Beginner { return wsql.BeginnerFromStdSQL(b.sqlDB) },
		database:      func(b *testBundle) *inbox.Database { return inbox.On(driver.StdSQL(b.sqlDB), pgxinbox.SQLv4Joiner()) },
		givesUpSafely: true,
	},
	"Pgx": {
		beginner: func(b *testBundle) wsql.Beginner { return wsql.BeginnerFromPgx(b.pool) },
		database: func(b *testBundle) *inbox.Database { return pgxinbox.Database(b.pool) },
	},
}

// v4Bundle is newBundle with a database/sql handle on the same database, over lib/pq.
func v4Bundle(t *testing.T) *testBundle {
	t.Helper()
	b := newBundle(t)
	db, err := sql.Open("postgres", testDSN())
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	b.sqlDB = db
	return b
}

// newV4Topic returns a topic of watermill-sql v4's PostgreSQL pub/sub that no other test uses, and drops its tables
// when the test ends.
func newV4Topic(t *testing.T, b *testBundle) string {
	t.Helper()
	topic := inboxtest.UniqueName("inbox_topic")
	t.Cleanup(func() {
		_, _ = b.pool.Exec(context.Background(), `DROP TABLE IF EXISTS "watermill_`+topic+`", "watermill_offsets_`+topic+`"`)
	})
	return topic
}

// publishV4 publishes msgs to topic with watermill-sql v4's publisher.
func publishV4(t *testing.T, b *testBundle, topic string, msgs ...*message.Message) {
	t.Helper()
	pub, err := wsql.NewPublisher(wsql.BeginnerFromPgx(b.pool), wsql.PublisherConfig{
		SchemaAdapter: wsql.DefaultPostgreSQLSchema{}, AutoInitializeSchema: true,
	}, nil)
	require.NoError(t, err)
	require.NoError(t, pub.Publish(topic, msgs...))
}

// newV4Subscriber subscribes through a to watermill-sql v4's PostgreSQL pub/sub as consumer group group.
func newV4Subscriber(t *testing.T, a v4Adapter, b *testBundle, group string) *wsql.Subscriber {
	t.Helper()
	return newV4SubscriberWith(t, a, b, group, nil, nil)
}

// newV4SubscriberWith is newV4Subscriber with an ack deadline (nil for v4's default) and a logger.
func newV4SubscriberWith(t *testing.T, a v4Adapter, b *testBundle, group string, ackDeadline *time.Duration, logger watermill.LoggerAdapter) *wsql.Subscriber {
	t.Helper()
	sub, err := wsql.NewSubscriber(a.beginner(b), wsql.SubscriberConfig{
		ConsumerGroup:    group,
		SchemaAdapter:    wsql.DefaultPostgreSQLSchema{},
		OffsetsAdapter:   wsql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true,
		PollInterval:     20 * time.Millisecond,
		ResendInterval:   20 * time.Millisecond,
		RetryInterval:    20 * time.Millisecond,
		AckDeadline:      ackDeadline,
	}, logger)
	require.NoError(t, err)
	return sub
}

// subscribersNative returns the client library's own transaction of watermill-sql v4's subscriber in ctx.
func subscribersNative(ctx context.Context) any {
	tx, _ := wsql.TxFromContext(ctx)
	switch t := tx.(type) {
	case *wsql.StdSQLTx:
		return t.Tx
	case *wsql.PgxTx:
		return t.Tx
	}
	return nil
}

// execNative runs query on the inbox's transaction in ctx, whichever library's it is.
func execNative(ctx context.Context, query string, args ...any) error {
	switch tx := inbox.NativeTxFromContext(ctx).(type) {
	case *sql.Tx:
		_, err := tx.ExecContext(ctx, query, args...)
		return err
	case pgx.Tx:
		_, err := tx.Exec(ctx, query, args...)
		return err
	}
	return errors.New("no inbox transaction in the handler's context")
}

// creditV4 adds amount to account 1 on the inbox's transaction.
func (b *testBundle) creditV4(amount int, calls *atomic.Int64) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		if calls != nil {
			calls.Add(1)
		}
		return execNative(msg.Context(), `UPDATE `+b.Accounts+` SET balance = balance + $1 WHERE id = 1`, amount)
	}
}

func TestSQLv4Join(t *testing.T) {
	t.Parallel()
	for name, a := range v4Adapters {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			t.Run("TheHandlerSeesTheSubscribersOwnTransaction", func(t *testing.T) {
				t.Parallel()
				b := v4Bundle(t)
				topic := newV4Topic(t, b)
				router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
				require.NoError(t, err)
				ib, err := a.database(b).New(b.Options()...)
				require.NoError(t, err)
				router.AddMiddleware(ib.Middleware)
				var calls, sameTx atomic.Int64
				router.AddConsumerHandler("wallet-credits", topic, newV4Subscriber(t, a, b, "wallet"), func(msg *message.Message) error {
					ours := inbox.NativeTxFromContext(msg.Context())
					if ours != nil && ours == subscribersNative(msg.Context()) {
						sameTx.Add(1)
					}
					return b.creditV4(100, &calls)(msg)
				})
				inboxtest.RunRouter(t, router)

				publishV4(t, b, topic, newMsg("evt-1"), newMsg("evt-1"), newMsg("evt-2"))
				require.Eventually(t, func() bool { return b.Rows(t, "wallet-credits") == 2 && b.Logs.Count("skipped duplicate") == 1 },
					10*time.Second, 20*time.Millisecond)
				require.EqualValues(t, 2, calls.Load())
				require.EqualValues(t, 2, sameTx.Load(), "the handler must see the subscriber's transaction, not a second one")
				require.Equal(t, 200, b.Balance(t))
			})

			t.Run("ANackLeavesNoWritesBehind", func(t *testing.T) {
				t.Parallel()
				b := v4Bundle(t)
				topic := newV4Topic(t, b)
				router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
				require.NoError(t, err)
				ib, err := a.database(b).New(b.Options()...)
				require.NoError(t, err)
				router.AddMiddleware(ib.Middleware)
				var calls atomic.Int64
				router.AddConsumerHandler("wallet-credits", topic, newV4Subscriber(t, a, b, "wallet"), func(msg *message.Message) error {
					n := calls.Add(1)
					if err := b.creditV4(100, nil)(msg); err != nil {
						return err
					}
					switch n {
					case 1:
						return errors.New("first attempt fails after its write")
					case 2: // a failed statement aborts the transaction; the savepoint must undo that too
						return execNative(msg.Context(), `SELECT 1/0`)
					}
					return nil
				})
				inboxtest.RunRouter(t, router)

				publishV4(t, b, topic, newMsg("evt-1"))
				require.Eventually(t, func() bool { return b.Rows(t, "wallet-credits") == 1 }, 10*time.Second, 20*time.Millisecond)
				require.EqualValues(t, 3, calls.Load())
				require.Equal(t, 100, b.Balance(t), "only the attempt that succeeded may leave its write")
			})

			if !a.givesUpSafely {
				return
			}

			t.Run("ACommitWithTheHandlerHalfRunIsRefused", func(t *testing.T) {
				t.Parallel()
				b := v4Bundle(t)
				topic := newV4Topic(t, b)
				router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
				require.NoError(t, err)
				ib, err := a.database(b).New(b.Options()...)
				require.NoError(t, err)
				router.AddMiddleware(ib.Middleware)
				// The subscriber commits its transaction when its ack deadline passes, handler running or not, and
				// delivers the message again.
				deadline := 300 * time.Millisecond
				subLogs := &recordingLogger{}
				var calls atomic.Int64
				release := make(chan struct{})
				router.AddConsumerHandler("wallet-credits", topic, newV4SubscriberWith(t, a, b, "wallet", &deadline, subLogs), func(msg *message.Message) error {
					if err := b.creditV4(100, nil)(msg); err != nil {
						return err
					}
					if calls.Add(1) == 1 {
						<-release // a long call, still running when the subscriber commits
					}
					return nil
				})
				inboxtest.RunRouter(t, router)
				t.Cleanup(func() { close(release) })

				publishV4(t, b, topic, newMsg("evt-1"))
				require.Eventually(t, func() bool { return b.Rows(t, "wallet-credits") == 1 }, 10*time.Second, 20*time.Millisecond)
				require.Equal(t, 100, b.Balance(t), "the half-run handler's write was refused; the redelivery applied once")
				require.EqualValues(t, 2, calls.Load())
				require.Equal(t, 1, subLogs.Count("could not commit tx for querying message"),
					"the subscriber tried to commit the half-run transaction, and the inbox's guard refused it")
			})

			t.Run("ARouterClosedMidHandlerLosesNothing", func(t *testing.T) {
				t.Parallel()
				b := v4Bundle(t)
				topic := newV4Topic(t, b)
				ib, err := a.database(b).New(b.Options()...)
				require.NoError(t, err)

				first, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
				require.NoError(t, err)
				first.AddMiddleware(ib.Middleware)
				started := make(chan struct{})
				gate, release := inboxtest.Gate(t)
				first.AddConsumerHandler("wallet-credits", topic, newV4Subscriber(t, a, b, "wallet"), func(msg *message.Message) error {
					if err := b.creditV4(100, nil)(msg); err != nil {
						return err
					}
					close(started)
					<-gate // a long call, still running when the subscriber ends its transaction
					return nil
				})
				done := make(chan error, 1)
				go func() { done <- first.Run(context.Background()) }()
				<-first.Running()
				publishV4(t, b, topic, newMsg("evt-1"))
				select {
				case <-started:
				case <-time.After(30 * time.Second):
					t.Fatal("the subscriber did not deliver the message within 30 s")
				}
				closed := make(chan error, 1)
				go func() { closed <- first.Close() }()
				require.Eventually(t, func() bool { return subscriberTxEnded(t, b) }, 10*time.Second, 20*time.Millisecond)
				release()
				require.NoError(t, <-closed)
				require.NoError(t, <-done)
				require.Equal(t, 0, b.Balance(t), "the half-run handler's write must not be committed")
				require.Equal(t, 0, b.Rows(t, "wallet-credits"))

				// The next process gets the message again and applies it, once.
				second, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
				require.NoError(t, err)
				second.AddMiddleware(ib.Middleware)
				second.AddConsumerHandler("wallet-credits", topic, newV4Subscriber(t, a, b, "wallet"), b.creditV4(100, nil))
				inboxtest.RunRouter(t, second)
				require.Eventually(t, func() bool { return b.Rows(t, "wallet-credits") == 1 }, 10*time.Second, 20*time.Millisecond)
				require.Equal(t, 100, b.Balance(t))
			})
		})
	}
}

// subscriberTxEnded reports whether no transaction holds a lock on the test's accounts any more: the subscriber's
// transaction, in which the handler wrote, has ended.
func subscriberTxEnded(t *testing.T, b *testBundle) bool {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_locks WHERE relation = $1::regclass AND mode = 'RowExclusiveLock'`, b.Accounts).Scan(&n))
	return n == 0
}

// TestSQLv4_WithoutTheJoinerTheMessageIsHeldBack: an inbox whose Database has no v4 joiner (inbox.On with none, as
// the package-level functions build it) does not apply a message that carries v4's transaction in a second one
// behind the user's back; it holds it back with ErrInvalidOption, and nothing is written. The check recognises
// both of v4's adapters.
func TestSQLv4_WithoutTheJoinerTheMessageIsHeldBack(t *testing.T) {
	t.Parallel()
	for name, a := range v4Adapters {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := v4Bundle(t)
			topic := newV4Topic(t, b)
			router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
			require.NoError(t, err)
			unjoined := inbox.On(driver.StdSQL(b.sqlDB)) // no joiner
			if name == "Pgx" {
				unjoined = inbox.On(pgxinbox.Pool(b.pool))
			}
			ib, err := unjoined.New(b.Options(inbox.WithRejectDelay(10 * time.Millisecond))...)
			require.NoError(t, err)
			router.AddMiddleware(ib.Middleware)
			var calls atomic.Int64
			router.AddConsumerHandler("wallet-credits", topic, newV4Subscriber(t, a, b, "wallet"), b.creditV4(100, &calls))
			inboxtest.RunRouter(t, router)

			publishV4(t, b, topic, newMsg("evt-1"))
			require.Eventually(t, func() bool { return b.Logs.Count("cannot apply messages") >= 2 }, 30*time.Second, 10*time.Millisecond)
			require.Zero(t, calls.Load(), "the handler must not run outside the transaction the message carries")
			require.Zero(t, b.Rows(t, "wallet-credits"))
			require.Zero(t, b.Balance(t))
		})
	}
}

// TestSQLv4_ATransactionTheHandlerCannotReachIsHeldBack: an inbox whose Database is of one client library, joining
// v4's subscriber over the other library's adapter, would give its handlers no transaction (TxFromContext finds none
// of its type). It holds the message back before the handler runs, with an error that names the cause and the ways
// out, and writes nothing.
func TestSQLv4_ATransactionTheHandlerCannotReachIsHeldBack(t *testing.T) {
	t.Parallel()
	crossed := map[string]struct {
		subscriber string
		database   func(b *testBundle) *inbox.Database
	}{
		"StdSQLInboxPgxSubscriber": {"Pgx", func(b *testBundle) *inbox.Database {
			return inbox.On(driver.StdSQL(b.sqlDB), pgxinbox.SQLv4Joiner())
		}},
		"PgxInboxStdSQLSubscriber": {"StdSQL", func(b *testBundle) *inbox.Database { return pgxinbox.Database(b.pool) }},
	}
	for name, c := range crossed {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := v4Bundle(t)
			topic := newV4Topic(t, b)
			router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
			require.NoError(t, err)
			nacks := &inboxtest.NackRecorder{}
			ib, err := c.database(b).New(b.Options(inbox.WithRejectDelay(10*time.Millisecond), inbox.WithObserver(nacks))...)
			require.NoError(t, err)
			router.AddMiddleware(ib.Middleware)
			var calls atomic.Int64
			router.AddConsumerHandler("wallet-credits", topic, newV4Subscriber(t, v4Adapters[c.subscriber], b, "wallet"),
				b.creditV4(100, &calls))
			inboxtest.RunRouter(t, router)

			publishV4(t, b, topic, newMsg("evt-1"))
			require.Eventually(t, func() bool { return len(nacks.Events()) > 0 }, 30*time.Second, 10*time.Millisecond)
			e := nacks.Events()[0]
			require.ErrorIs(t, e.Err, inbox.ErrInvalidOption)
			require.Equal(t, "config", e.Reason)
			for _, names := range []string{"pgxinbox", "adapter", "WithSubscriberTx(false)"} {
				require.Contains(t, e.Err.Error(), names)
			}
			require.Zero(t, calls.Load(), "the handler must not run without a transaction it can reach")
			require.Zero(t, b.Rows(t, "wallet-credits"))
			require.Zero(t, b.Balance(t))
		})
	}
}
