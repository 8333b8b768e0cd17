package pgxinbox_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
)

// asHandlerFunc lets a NoPublishHandlerFunc go through the middleware by hand, as the router lets it.
func asHandlerFunc(h message.NoPublishHandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) { return nil, h(msg) }
}

// creditOn is the credit handler written for pgxinbox.Handler: every run adds amount to account 1 on tx.
func (b *testBundle) creditOn(amount int, calls *atomic.Int64) func(context.Context, pgx.Tx, *message.Message) error {
	return func(ctx context.Context, tx pgx.Tx, _ *message.Message) error {
		calls.Add(1)
		if tx == nil {
			panic("the function was called with a nil transaction")
		}
		_, err := tx.Exec(ctx, `UPDATE `+b.Accounts+` SET balance = balance + $1 WHERE id = 1`, amount)
		return err
	}
}

func TestHandler(t *testing.T) {
	t.Parallel()

	t.Run("AppliesTheEffectOnceUnderTheInbox", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		ib, err := pgxinbox.New(b.pool, b.Options()...)
		require.NoError(t, err)
		var calls atomic.Int64
		h := ib.Middleware(asHandlerFunc(pgxinbox.Handler(b.creditOn(100, &calls))))
		for range 3 { // the first delivery, then two copies
			_, err := h(newMsg("evt-1"))
			require.NoError(t, err)
		}
		require.Equal(t, 100, b.Balance(t))
		require.EqualValues(t, 1, calls.Load())
		require.Equal(t, 1, b.Rows(t, "wallet-credits"))
	})

	t.Run("InBatchModeAppliesEachEffectOnce", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		ib, err := pgxinbox.New(b.pool, b.Options(inbox.WithBatch(time.Millisecond, 8))...)
		require.NoError(t, err)
		var calls atomic.Int64
		h := ib.Middleware(asHandlerFunc(pgxinbox.Handler(b.creditOn(100, &calls))))
		for _, id := range []string{"evt-1", "evt-2", "evt-1"} {
			_, err := h(newMsg(id))
			require.NoError(t, err)
		}
		require.Equal(t, 200, b.Balance(t))
		require.EqualValues(t, 2, calls.Load())
	})

	t.Run("OutsideTheMiddlewareReturnsErrNoTxWithoutCallingTheFunction", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int64
		b := &testBundle{Wallet: &inboxtest.Wallet{Accounts: "never_used"}}
		err := pgxinbox.Handler(b.creditOn(100, &calls))(newMsg("evt-1"))
		require.ErrorIs(t, err, inbox.ErrNoTx)
		require.ErrorContains(t, err, "outside the inbox's middleware")
		require.Zero(t, calls.Load(), "never called with a nil transaction")
	})

	t.Run("UnderADatabaseSQLInboxReturnsErrNoTxNamingInboxHandler", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		ib, err := inbox.New(openStdlib(t, testDSN()), b.Options(inbox.WithRejectDelay(time.Millisecond))...)
		require.NoError(t, err)
		var calls atomic.Int64
		_, err = ib.Middleware(asHandlerFunc(pgxinbox.Handler(b.creditOn(100, &calls))))(newMsg("evt-1"))
		require.ErrorIs(t, err, inbox.ErrNoTx)
		require.ErrorContains(t, err, "*sql.Tx, not a pgx.Tx")
		require.ErrorContains(t, err, "inbox.Handler")
		require.Zero(t, calls.Load())
		require.Zero(t, b.Rows(t, "wallet-credits"), "the claim is rolled back with the failed handler")
	})

	t.Run("InboxHandlerUnderAPgxInboxReturnsErrNoTxNamingPgxinboxHandler", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		const delay = 50 * time.Millisecond
		ib, err := pgxinbox.New(b.pool, b.Options(inbox.WithRejectDelay(delay))...)
		require.NoError(t, err)
		var calls atomic.Int64
		fn := func(context.Context, *sql.Tx, *message.Message) error { calls.Add(1); return nil }
		start := time.Now()
		_, err = ib.Middleware(asHandlerFunc(inbox.Handler(fn)))(newMsg("evt-1"))
		require.GreaterOrEqual(t, time.Since(start), delay, "a wiring fault is held back for the reject delay, not redelivered at once")
		require.True(t, inbox.IsPermanent(err), "Retry must not run it again at once")
		require.ErrorIs(t, err, inbox.ErrNoTx)
		require.ErrorContains(t, err, "not a *sql.Tx")
		require.ErrorContains(t, err, "pgxinbox.Handler")
		require.Zero(t, calls.Load())
	})

	t.Run("InLeaseModeReturnsErrNoTxWithoutCallingTheFunction", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		ib, err := pgxinbox.New(b.pool, b.Options(inbox.WithLease(time.Minute))...)
		require.NoError(t, err)
		var calls atomic.Int64
		_, err = ib.Middleware(asHandlerFunc(pgxinbox.Handler(b.creditOn(100, &calls))))(newMsg("evt-1"))
		require.ErrorIs(t, err, inbox.ErrNoTx)
		require.ErrorContains(t, err, "LeaseFromContext")
		require.Zero(t, calls.Load())
	})
}

func TestProducingHandler_ADuplicateGetsTheSameProducedMessagesWithoutCallingTheFunction(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ib, err := pgxinbox.New(b.pool, b.Options()...)
	require.NoError(t, err)
	var calls atomic.Int64
	credit := b.creditOn(100, &calls)
	h := ib.Middleware(pgxinbox.ProducingHandler(func(ctx context.Context, tx pgx.Tx, msg *message.Message) ([]*message.Message, error) {
		if err := credit(ctx, tx, msg); err != nil {
			return nil, err
		}
		return []*message.Message{message.NewMessage("produced-1", []byte("credited"))}, nil
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
}
