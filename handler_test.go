package inbox_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// asHandlerFunc lets a NoPublishHandlerFunc go through the middleware by hand, as the router lets it.
func asHandlerFunc(h message.NoPublishHandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) { return nil, h(msg) }
}

// creditOn is the credit handler written for inbox.Handler: every run adds amount to account 1 on tx.
func (b *testBundle) creditOn(amount int, calls *atomic.Int64) func(context.Context, *sql.Tx, *message.Message) error {
	return func(ctx context.Context, tx *sql.Tx, _ *message.Message) error {
		calls.Add(1)
		if tx == nil {
			panic("the function was called with a nil transaction")
		}
		_, err := tx.ExecContext(ctx, `UPDATE `+b.Accounts+` SET balance = balance + $1 WHERE id = 1`, amount)
		return err
	}
}

func TestHandler(t *testing.T) {
	t.Parallel()

	t.Run("AppliesTheEffectOnceUnderTheInbox", func(t *testing.T) {
		t.Parallel()
		ib, b := setup(t)
		var calls atomic.Int64
		h := ib.Middleware(asHandlerFunc(inbox.Handler(b.creditOn(100, &calls))))
		for range 3 { // the first delivery, then two copies
			_, err := h(newMsg("evt-1"))
			require.NoError(t, err)
		}
		require.Equal(t, 100, b.Balance(t))
		require.EqualValues(t, 1, calls.Load())
		require.Equal(t, 1, b.Rows(t, "wallet-credits"))
	})

	t.Run("AnErrorOfTheFunctionRollsTheEffectBack", func(t *testing.T) {
		t.Parallel()
		ib, b := setup(t)
		var calls atomic.Int64
		failing := func(ctx context.Context, tx *sql.Tx, msg *message.Message) error {
			require.NoError(t, b.creditOn(100, &calls)(ctx, tx, msg))
			return context.DeadlineExceeded
		}
		_, err := ib.Middleware(asHandlerFunc(inbox.Handler(failing)))(newMsg("evt-1"))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Zero(t, b.Balance(t))
		require.Zero(t, b.Rows(t, "wallet-credits"))
	})

	t.Run("OutsideTheMiddlewareReturnsErrNoTxWithoutCallingTheFunction", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int64
		b := &testBundle{Wallet: &testkit.Wallet{Accounts: "never_used"}}
		err := inbox.Handler(b.creditOn(100, &calls))(newMsg("evt-1"))
		require.ErrorIs(t, err, inbox.ErrNoTx)
		require.ErrorContains(t, err, "outside the inbox's middleware")
		require.ErrorContains(t, err, "inbox.Middleware")
		require.Zero(t, calls.Load(), "never called with a nil transaction")
	})

	t.Run("InLeaseModeReturnsErrNoTxWithoutCallingTheFunction", func(t *testing.T) {
		t.Parallel()
		ib, b := setup(t, inbox.WithLease(time.Minute))
		var calls atomic.Int64
		_, err := ib.Middleware(asHandlerFunc(inbox.Handler(b.creditOn(100, &calls))))(newMsg("evt-1"))
		require.ErrorIs(t, err, inbox.ErrNoTx)
		require.ErrorContains(t, err, "lease mode")
		require.ErrorContains(t, err, "LeaseFromContext")
		require.Zero(t, calls.Load())
		require.Zero(t, b.Balance(t))
	})

	t.Run("InBatchModeAppliesEachEffectOnce", func(t *testing.T) {
		t.Parallel()
		ib, b := setup(t, inbox.WithBatch(time.Millisecond, 8))
		var calls atomic.Int64
		h := ib.Middleware(asHandlerFunc(inbox.Handler(b.creditOn(100, &calls))))
		for _, id := range []string{"evt-1", "evt-2", "evt-1"} {
			_, err := h(newMsg(id))
			require.NoError(t, err)
		}
		require.Equal(t, 200, b.Balance(t))
		require.EqualValues(t, 2, calls.Load())
	})

	t.Run("UnderTheRouterAppliesTheEffectOnce", func(t *testing.T) {
		t.Parallel()
		ib, b := setup(t)
		pubsub := testkit.NewGoChannel(t)
		router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
		require.NoError(t, err)
		router.AddMiddleware(ib.Middleware)
		var calls atomic.Int64
		router.AddConsumerHandler("wallet-credits", "deposits", pubsub, inbox.Handler(b.creditOn(100, &calls)))
		testkit.RunRouter(t, router)
		for _, id := range []string{"evt-1", "evt-1", "evt-2"} {
			require.NoError(t, pubsub.Publish("deposits", newMsg(id))) // returns once the router acked it
		}
		require.Equal(t, 200, b.Balance(t))
		require.EqualValues(t, 2, calls.Load())
	})
}

func TestProducingHandler(t *testing.T) {
	t.Parallel()

	t.Run("ADuplicateGetsTheSameProducedMessagesWithoutCallingTheFunction", func(t *testing.T) {
		t.Parallel()
		ib, b := setup(t)
		var calls atomic.Int64
		credit := b.creditOn(100, &calls)
		h := ib.Middleware(inbox.ProducingHandler(func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
			if err := credit(ctx, tx, msg); err != nil {
				return nil, err
			}
			return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte("credited"))}, nil
		}))
		first, err := h(newMsg("evt-1"))
		require.NoError(t, err)
		again, err := h(newMsg("evt-1"))
		require.NoError(t, err)
		require.Len(t, first, 1)
		require.Len(t, again, 1)
		require.Equal(t, first[0].UUID, again[0].UUID)
		require.Equal(t, 100, b.Balance(t))
		require.EqualValues(t, 1, calls.Load())
	})

	t.Run("OutsideTheMiddlewareReturnsErrNoTxWithoutCallingTheFunction", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int64
		produced, err := inbox.ProducingHandler(func(context.Context, *sql.Tx, *message.Message) ([]*message.Message, error) {
			calls.Add(1)
			return nil, nil
		})(newMsg("evt-1"))
		require.ErrorIs(t, err, inbox.ErrNoTx)
		require.ErrorContains(t, err, "inbox.ProducingHandler")
		require.Nil(t, produced)
		require.Zero(t, calls.Load())
	})
}
