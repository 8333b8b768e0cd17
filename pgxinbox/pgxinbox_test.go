package pgxinbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
)

// The transaction mode's behaviour on every driver is in the driver suite (suite_test.go); these are this
// module's own.
func TestTransactionMode(t *testing.T) {
	t.Parallel()

	t.Run("StoresUUIDEventIDsInAUUIDColumn", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t, inbox.WithIDType(inbox.IDTypeUUID))
		ib, err := pgxinbox.New(b.pool, b.Options()...)
		require.NoError(t, err)
		id := uuid.NewString()
		h := ib.Middleware(b.Credit(100, nil))

		_, err = h(newMsg(id))
		require.NoError(t, err)
		_, err = h(newMsg(id))
		require.NoError(t, err)
		require.Equal(t, 100, b.Balance(t))
		state, _ := b.Row(t, "wallet-credits", id)
		require.Equal(t, "done", state)
	})

	t.Run("AConnServesMessagesOneAtATime", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		conn, err := b.pool.Acquire(context.Background())
		require.NoError(t, err)
		t.Cleanup(conn.Release)
		ib, err := pgxinbox.New(conn.Conn(), b.Options()...)
		require.NoError(t, err)
		h := ib.Middleware(b.Credit(100, nil))
		for _, id := range []string{"evt-1", "evt-2", "evt-1"} {
			_, err := h(newMsg(id))
			require.NoError(t, err)
		}
		require.Equal(t, 200, b.Balance(t))
	})
}

func TestLeaseMode_ClaimsReleasesOnFailureAndCompletesTheNextAttempt(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ib, err := pgxinbox.New(b.pool, b.Options(inbox.WithLease(10*time.Second), inbox.WithMaxAttempts(3))...)
	require.NoError(t, err)
	var keys []string
	var attempts []int
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		l, ok := inbox.LeaseFromContext(msg.Context())
		if !ok {
			return nil, errors.New("no lease in the handler's context")
		}
		_, txOK := pgxinbox.TxFromContext(msg.Context())
		if txOK {
			return nil, errors.New("lease mode must hold no transaction open around the handler")
		}
		keys = append(keys, l.IdempotencyKey())
		attempts = append(attempts, l.Attempt())
		require.NoError(t, l.Extend(msg.Context(), 20*time.Second))
		if l.Attempt() == 1 {
			return nil, errors.New("provider unavailable")
		}
		return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte("charged"))}, nil
	})

	_, err = h(newMsg("evt-1"))
	require.ErrorContains(t, err, "provider unavailable")
	state, n := b.Row(t, "wallet-credits", "evt-1")
	require.Equal(t, "released", state)
	require.Equal(t, 1, n)

	produced, err := h(newMsg("evt-1"))
	require.NoError(t, err)
	require.Len(t, produced, 1)
	state, n = b.Row(t, "wallet-credits", "evt-1")
	require.Equal(t, "done", state)
	require.Equal(t, 2, n)

	again, err := h(newMsg("evt-1"))
	require.NoError(t, err)
	require.Len(t, again, 1, "a duplicate returns the stored produced message")
	require.Equal(t, produced[0].UUID, again[0].UUID)

	want := inbox.IdempotencyKey("wallet-credits", "evt-1")
	require.Equal(t, []string{want, want}, keys, "every attempt calls out with the same key")
	require.Equal(t, []int{1, 2}, attempts)
}

func TestMigrate(t *testing.T) {
	t.Parallel()

	t.Run("TheFirstMessageCreatesTheTables", func(t *testing.T) {
		t.Parallel()
		b := newEmptyBundle(t)
		h := pgxinbox.Middleware(b.pool, b.Options()...)(b.Credit(100, nil))
		_, err := h(newMsg("evt-1"))
		require.NoError(t, err)
		require.Equal(t, 1, b.Rows(t, "wallet-credits"))
		require.Equal(t, 100, b.Balance(t))
	})

	t.Run("WithoutAutoMigrateAMissingTableHoldsTheMessageBack", func(t *testing.T) {
		t.Parallel()
		b := newEmptyBundle(t)
		h := pgxinbox.Middleware(b.pool, b.Options(inbox.WithAutoMigrate(false), inbox.WithRejectDelay(time.Millisecond))...)(b.Credit(100, nil))
		_, err := h(newMsg("evt-1"))
		require.ErrorIs(t, err, inbox.ErrSchemaMissing)
	})
}

func TestConvenience(t *testing.T) {
	t.Parallel()

	t.Run("NewRefusesANilPool", func(t *testing.T) {
		t.Parallel()
		_, err := pgxinbox.New(nil)
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
	})

	t.Run("MiddlewarePanicsOnAnInvalidOption", func(t *testing.T) {
		t.Parallel()
		var recovered any
		func() {
			defer func() { recovered = recover() }()
			pgxinbox.Middleware(unusedBeginner{}, inbox.WithMaxIDLength(0))
		}()
		err, ok := recovered.(error)
		require.True(t, ok, "Middleware must panic with an error, got %v", recovered)
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
	})

	t.Run("TxFromContextReportsFalseOutsideTheHandler", func(t *testing.T) {
		t.Parallel()
		tx, ok := pgxinbox.TxFromContext(context.Background())
		require.False(t, ok)
		require.Nil(t, tx)
	})
}

// unusedBeginner is a pool that is never asked for a transaction.
type unusedBeginner struct{}

func (unusedBeginner) BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error) {
	return nil, errors.New("no database")
}

// A batch that forms reads how many connections the pool allows, so that batches waiting for their turn leave
// some free. The limit is read once, when the pool is wrapped: pgxpool's Config copies the whole configuration on
// every call, which once cost batch mode about 7% of the bytes it allocated.
func TestPool_ItsLimitOfConnectionsIsReadOnce(t *testing.T) {
	p := openPool(t, testDSN())
	limited, ok := pgxinbox.Pool(p).(interface{ MaxConns() int })
	require.True(t, ok, "the pool does not tell its limit of connections")
	require.Equal(t, 10, limited.MaxConns())
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = limited.MaxConns() }), "MaxConns allocates")
}
