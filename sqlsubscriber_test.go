package inbox_test

import (
	"database/sql"
	"errors"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

func TestMiddleware_WatermillSQLSubscriber(t *testing.T) {
	t.Parallel()

	t.Run("TheInboxJoinsTheSubscribersTransaction", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		topic := newSQLTopic(t, b.db)
		pub := newSQLPublisher(t, b.db)
		router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
		require.NoError(t, err)
		router.AddMiddleware(inbox.Middleware(b.db, inbox.WithTable(b.Table), inbox.WithLogger(b.Logs)))
		var calls, sameTx atomic.Int64
		router.AddConsumerHandler("wallet-credits", topic, newSQLSubscriber(t, b.db, "wallet"), func(msg *message.Message) error {
			ours, _ := inbox.TxFromContext(msg.Context())
			theirs, ok := wsql.TxFromContext(msg.Context())
			if ok && ours == theirs {
				sameTx.Add(1)
			}
			_, err := b.Credit(100, &calls)(msg)
			return err
		})
		testkit.RunRouter(t, router)

		require.NoError(t, pub.Publish(topic, newMsg("evt-1"), newMsg("evt-1"), newMsg("evt-2")))
		require.Eventually(t, func() bool { return b.Rows(t, "wallet-credits") == 2 && len(b.Logs.Find("skipped duplicate")) == 1 },
			10*time.Second, 20*time.Millisecond)
		require.EqualValues(t, 2, calls.Load())
		require.EqualValues(t, 2, sameTx.Load(), "the handler must see the subscriber's transaction, not a second one")
		require.Equal(t, 200, b.Balance(t))
	})

	t.Run("AHandlerErrorRollsBackTheSubscribersTransactionWithTheClaim", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		topic := newSQLTopic(t, b.db)
		router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
		require.NoError(t, err)
		router.AddMiddleware(inbox.Middleware(b.db, inbox.WithTable(b.Table)))
		var calls atomic.Int64
		router.AddConsumerHandler("wallet-credits", topic, newSQLSubscriber(t, b.db, "wallet"), func(msg *message.Message) error {
			if _, err := b.Credit(100, &calls)(msg); err != nil {
				return err
			}
			if calls.Load() == 1 {
				return errors.New("first attempt fails after its write")
			}
			return nil
		})
		testkit.RunRouter(t, router)

		require.NoError(t, newSQLPublisher(t, b.db).Publish(topic, newMsg("evt-1")))
		require.Eventually(t, func() bool { return b.Rows(t, "wallet-credits") == 1 }, 10*time.Second, 20*time.Millisecond)
		require.EqualValues(t, 2, calls.Load())
		require.Equal(t, 100, b.Balance(t))
	})
}

func TestMiddleware_WatermillSQLSubscriberRedeliversInTheSameTransaction(t *testing.T) {
	t.Parallel()
	// watermill-sql v3 resends a nacked message within the transaction it already holds. A failed statement aborts
	// that transaction; the inbox's savepoint must leave the redelivery a working one.
	b := newBundle(t)
	topic := newSQLTopic(t, b.db)
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddMiddleware(inbox.Middleware(b.db, inbox.WithTable(b.Table)))
	var calls atomic.Int64
	router.AddConsumerHandler("wallet-credits", topic, newSQLSubscriber(t, b.db, "wallet"), func(msg *message.Message) error {
		if calls.Add(1) == 1 {
			tx, _ := inbox.TxFromContext(msg.Context())
			_, err := tx.ExecContext(msg.Context(), `SELECT 1/0`)
			return err
		}
		_, err := b.Credit(100, nil)(msg)
		return err
	})
	testkit.RunRouter(t, router)

	require.NoError(t, newSQLPublisher(t, b.db).Publish(topic, newMsg("evt-1")))
	require.Eventually(t, func() bool { return b.Rows(t, "wallet-credits") == 1 }, 10*time.Second, 20*time.Millisecond)
	require.EqualValues(t, 2, calls.Load())
	require.Equal(t, 100, b.Balance(t))
}

func TestMiddleware_RouterShutdownMidHandlerRollsBackAndLosesNothing(t *testing.T) {
	t.Parallel()
	for name, join := range map[string]bool{"OwnTransaction": false, "SubscribersTransaction": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t)
			topic := newSQLTopic(t, b.db)
			mw := inbox.Middleware(b.db, inbox.WithTable(b.Table), inbox.WithSubscriberTx(join))

			first, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
			require.NoError(t, err)
			first.AddMiddleware(mw)
			started := make(chan struct{})
			first.AddConsumerHandler("wallet-credits", topic, newSQLSubscriber(t, b.db, "wallet"), func(msg *message.Message) error {
				if _, err := b.Credit(100, nil)(msg); err != nil {
					return err
				}
				close(started)
				<-msg.Context().Done() // a long call, interrupted by the shutdown
				return msg.Context().Err()
			})
			testkit.RunRouter(t, first)
			require.NoError(t, newSQLPublisher(t, b.db).Publish(topic, newMsg("evt-1")))
			<-started
			require.NoError(t, first.Close())
			require.Equal(t, 0, b.Balance(t))
			require.Equal(t, 0, b.Rows(t, "wallet-credits"))

			// The next process gets the message again and applies it, once.
			second, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
			require.NoError(t, err)
			second.AddMiddleware(mw)
			second.AddConsumerHandler("wallet-credits", topic, newSQLSubscriber(t, b.db, "wallet"), testkit.NoPublish(b.Credit(100, nil)))
			testkit.RunRouter(t, second)
			require.Eventually(t, func() bool { return b.Rows(t, "wallet-credits") == 1 }, 10*time.Second, 20*time.Millisecond)
			require.Equal(t, 100, b.Balance(t))
		})
	}
}

// TestMiddleware_ASubscriberTransactionNoJoinerFindsIsHeldBackNotLeftBehind: a Database built with On and no
// joiner does not join watermill-sql's subscriber (New and Middleware join v3's by default). A message that carries that subscriber's transaction
// through an inbox that cannot join it is held back with ErrInvalidOption, never applied in a second transaction
// the user did not choose; WithSubscriberTx(false) is that choice, and then the message is applied once.
func TestMiddleware_ASubscriberTransactionNoJoinerFindsIsHeldBackNotLeftBehind(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string][]inbox.Option{
		"NoJoiner":             nil,
		"OwnTransactionChosen": {inbox.WithSubscriberTx(false)},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t)
			topic := newSQLTopic(t, b.db)
			router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
			require.NoError(t, err)
			ib, err := inbox.On(driver.StdSQL(b.db)).New(append([]inbox.Option{inbox.WithTable(b.Table),
				inbox.WithLogger(b.Logs), inbox.WithRejectDelay(10 * time.Millisecond)}, opts...)...)
			require.NoError(t, err)
			router.AddMiddleware(ib.Middleware)
			var calls atomic.Int64
			router.AddConsumerHandler("wallet-credits", topic, newSQLSubscriber(t, b.db, "wallet"), func(msg *message.Message) error {
				_, err := b.Credit(100, &calls)(msg)
				return err
			})
			testkit.RunRouter(t, router)

			require.NoError(t, newSQLPublisher(t, b.db).Publish(topic, newMsg("evt-1")))
			if opts == nil {
				require.Eventually(t, func() bool { return len(b.Logs.Find("cannot apply messages")) >= 2 },
					30*time.Second, 10*time.Millisecond)
				require.Zero(t, calls.Load(), "the handler must not run outside the transaction the message carries")
				require.Zero(t, b.Rows(t, "wallet-credits"))
				logged := b.Logs.Find("cannot apply messages")[0]
				require.ErrorIs(t, logged.Err, inbox.ErrInvalidOption)
				require.ErrorContains(t, logged.Err, "inbox.SQLv3Joiner")
				return
			}
			require.Eventually(t, func() bool { return b.Rows(t, "wallet-credits") == 1 }, 10*time.Second, 10*time.Millisecond)
			require.EqualValues(t, 1, calls.Load())
			require.Equal(t, 100, b.Balance(t))
		})
	}
}

// otherDatabase creates a PostgreSQL database beside the test's, on the same server, and returns a handle on it; the
// database is dropped when the test ends.
func otherDatabase(t *testing.T, db *sql.DB) *sql.DB {
	t.Helper()
	name := testkit.UniqueName("inbox_other")
	_, err := db.Exec(`CREATE DATABASE ` + name)
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := db.Exec(`DROP DATABASE IF EXISTS ` + name + ` WITH (FORCE)`); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(testDSN())
	require.NoError(t, err)
	u.Path = "/" + name
	other, err := sql.Open(testDriver, u.String())
	require.NoError(t, err)
	t.Cleanup(func() { other.Close() })
	return other
}

// TestMiddleware_ASubscriberOnAnotherDatabaseIsHeldBackNamingTheOption: watermill-sql's subscriber reads from a
// database other than the inbox's, and the inbox joins its transaction by default. Its claim would find no inbox
// table there (or another inbox's), so the message is held back with an error that says the subscriber's
// transaction is on another database and names WithSubscriberTx(false); with that option the message is applied
// once, on the inbox's database.
func TestMiddleware_ASubscriberOnAnotherDatabaseIsHeldBackNamingTheOption(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string][]inbox.Option{
		"Joined":               nil,
		"OwnTransactionChosen": {inbox.WithSubscriberTx(false)},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t)
			other := otherDatabase(t, b.db)
			topic := newSQLTopic(t, other)
			router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
			require.NoError(t, err)
			ib, err := inbox.New(b.db, append([]inbox.Option{inbox.WithTable(b.Table), inbox.WithLogger(b.Logs),
				inbox.WithRejectDelay(10 * time.Millisecond)}, opts...)...)
			require.NoError(t, err)
			router.AddMiddleware(ib.Middleware)
			var calls atomic.Int64
			router.AddConsumerHandler("wallet-credits", topic, newSQLSubscriber(t, other, "wallet"), func(msg *message.Message) error {
				_, err := b.Credit(100, &calls)(msg)
				return err
			})
			testkit.RunRouter(t, router)

			require.NoError(t, newSQLPublisher(t, other).Publish(topic, newMsg("evt-1")))
			if opts == nil {
				require.Eventually(t, func() bool { return len(b.Logs.Find("cannot apply messages")) >= 2 },
					30*time.Second, 10*time.Millisecond)
				require.Zero(t, calls.Load(), "the handler must not run in a transaction on another database")
				require.Zero(t, b.Rows(t, "wallet-credits"))
				for _, logged := range b.Logs.Find("cannot apply messages") {
					require.ErrorIs(t, logged.Err, inbox.ErrInvalidOption)
					require.ErrorContains(t, logged.Err, "another database than the inbox's")
					require.ErrorContains(t, logged.Err, "WithSubscriberTx(false)")
				}
				return
			}
			require.Eventually(t, func() bool { return b.Rows(t, "wallet-credits") == 1 }, 10*time.Second, 10*time.Millisecond)
			require.EqualValues(t, 1, calls.Load())
			require.Equal(t, 100, b.Balance(t))
		})
	}
}
