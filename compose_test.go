package inbox_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// composeRouter runs a router over a fresh gochannel with the given middlewares, first added outermost, and a
// handler on topic "deposits"; it returns the pub/sub to publish to and the poison queue's publisher.
func composeRouter(t *testing.T, b *testBundle, mws func(poison message.HandlerMiddleware) []message.HandlerMiddleware, h message.NoPublishHandlerFunc) (*testkit.RecordingPublisher, func(*message.Message)) {
	t.Helper()
	pubsub := testkit.NewGoChannel(t)
	poisoned := &testkit.RecordingPublisher{}
	poison, err := middleware.PoisonQueue(poisoned, "deposits.poison")
	require.NoError(t, err)
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddMiddleware(mws(poison)...)
	router.AddConsumerHandler("wallet-credits", "deposits", pubsub, h)
	testkit.RunRouter(t, router)
	return poisoned, func(msg *message.Message) { require.NoError(t, pubsub.Publish("deposits", msg)) }
}

func retry() message.HandlerMiddleware {
	return middleware.Retry{MaxRetries: 2, InitialInterval: time.Millisecond}.Middleware
}

// failingTwice fails its first two runs with a failed SQL statement, which aborts a PostgreSQL transaction, and
// credits on the third; it records the SQLSTATE of every failure.
func failingTwice(b *testBundle, calls *atomic.Int64, states *[]string, mu *sync.Mutex) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		tx, _ := inbox.TxFromContext(msg.Context())
		var err error
		if calls.Add(1) <= 2 {
			_, err = tx.ExecContext(msg.Context(), `SELECT 1/0`)
		} else {
			_, err = b.Credit(100, nil)(msg)
		}
		var pgErr interface{ SQLState() string } // lib/pq's and pgx's errors both have it
		if errors.As(err, &pgErr) {
			mu.Lock()
			*states = append(*states, pgErr.SQLState())
			mu.Unlock()
		}
		return err
	}
}

func TestComposition(t *testing.T) {
	t.Parallel()

	t.Run("PoisonQueueThenRetryThenInboxRetriesInAFreshTransaction", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		var calls atomic.Int64
		var mu sync.Mutex
		var states []string
		poisoned, publish := composeRouter(t, b, func(poison message.HandlerMiddleware) []message.HandlerMiddleware {
			return []message.HandlerMiddleware{poison, retry(), inbox.Middleware(b.db, inbox.WithTable(b.Table))}
		}, failingTwice(b, &calls, &states, &mu))
		publish(newMsg("evt-1"))

		require.EqualValues(t, 3, calls.Load())
		require.Equal(t, []string{"22012", "22012"}, states, "each retry starts clean: only the division fails")
		require.Equal(t, 100, b.Balance(t))
		require.Equal(t, 1, b.Rows(t, "wallet-credits"))
		require.Empty(t, poisoned.Messages("deposits.poison"))
	})

	t.Run("InboxOutsideRetryRetriesInAnAbortedTransaction", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		var calls atomic.Int64
		var mu sync.Mutex
		var states []string
		poisoned, publish := composeRouter(t, b, func(poison message.HandlerMiddleware) []message.HandlerMiddleware {
			return []message.HandlerMiddleware{poison, inbox.Middleware(b.db, inbox.WithTable(b.Table)), retry()}
		}, failingTwice(b, &calls, &states, &mu))
		publish(newMsg("evt-1"))

		// The third run would succeed on its own, but it runs in the transaction the first failure aborted.
		require.EqualValues(t, 3, calls.Load())
		require.Equal(t, []string{"22012", "25P02", "25P02"}, states)
		require.Equal(t, 0, b.Balance(t))
		require.Len(t, poisoned.Messages("deposits.poison"), 1)
	})

	t.Run("PoisonQueueOutsideTheInboxParksAFailingMessageWithNothingApplied", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		var calls atomic.Int64
		poisoned, publish := composeRouter(t, b, func(poison message.HandlerMiddleware) []message.HandlerMiddleware {
			return []message.HandlerMiddleware{poison, retry(), inbox.Middleware(b.db, inbox.WithTable(b.Table))}
		}, func(msg *message.Message) error {
			if _, err := b.Credit(100, &calls)(msg); err != nil {
				return err
			}
			return errors.New("account is frozen")
		})
		publish(newMsg("evt-1")) // returns after the ack that follows the poison-queue publish

		require.EqualValues(t, 3, calls.Load())
		parked := poisoned.Messages("deposits.poison")
		require.Len(t, parked, 1)
		require.Equal(t, "account is frozen", parked[0].Metadata.Get(middleware.ReasonForPoisonedKey))
		require.Equal(t, 0, b.Balance(t))
		require.Equal(t, 0, b.Rows(t, "wallet-credits"), "a parked message is not remembered: replaying it applies it")
	})
}
