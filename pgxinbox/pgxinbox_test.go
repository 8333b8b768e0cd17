package pgxinbox_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
)

func TestTransactionMode(t *testing.T) {
	t.Parallel()

	t.Run("AppliesAMessageOnceAndSkipsItsDuplicate", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		ib, err := pgxinbox.New(b.pool, b.options()...)
		require.NoError(t, err)
		var calls atomic.Int64
		h := ib.Middleware(b.credit(100, &calls))

		_, err = h(newMsg("evt-1"))
		require.NoError(t, err)
		_, err = h(newMsg("evt-1"))
		require.NoError(t, err)

		require.EqualValues(t, 1, calls.Load(), "the duplicate must not run the handler")
		require.Equal(t, 100, b.balance(t))
		require.Equal(t, 1, b.rows(t, "wallet-credits"))
		require.Equal(t, 1, b.logs.Count("skipped duplicate"))
	})

	t.Run("AHandlerErrorRollsBackTheEffectAndTheClaim", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		ib, err := pgxinbox.New(b.pool, b.options()...)
		require.NoError(t, err)
		failing := func(msg *message.Message) ([]*message.Message, error) {
			if _, err := b.credit(100, nil)(msg); err != nil {
				return nil, err
			}
			return nil, errors.New("fails after its write")
		}

		_, err = ib.Middleware(failing)(newMsg("evt-1"))
		require.ErrorContains(t, err, "fails after its write")
		require.Equal(t, 0, b.balance(t))
		require.Equal(t, 0, b.rows(t, "wallet-credits"))

		_, err = ib.Middleware(b.credit(100, nil))(newMsg("evt-1"))
		require.NoError(t, err)
		require.Equal(t, 100, b.balance(t), "the redelivery is applied, once")
	})

	t.Run("ReplaysTheProducedMessagesOfADuplicateWithTheirDerivedUUIDs", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		ib, err := pgxinbox.New(b.pool, b.options()...)
		require.NoError(t, err)
		var calls atomic.Int64
		h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			if _, err := b.credit(100, &calls)(msg); err != nil {
				return nil, err
			}
			return []*message.Message{
				message.NewMessage(watermill.NewUUID(), []byte(`{"credited":100}`)),
				message.NewMessage(watermill.NewUUID(), []byte("second")),
			}, nil
		})

		first, err := h(newMsg("evt-1"))
		require.NoError(t, err)
		again, err := h(newMsg("evt-1"))
		require.NoError(t, err)

		require.EqualValues(t, 1, calls.Load())
		require.Len(t, again, 2)
		for pos, m := range again {
			require.Equal(t, inbox.ProducedMessageUUID("wallet-credits", "evt-1", pos), m.UUID)
			require.Equal(t, first[pos].UUID, m.UUID)
			require.Equal(t, string(first[pos].Payload), string(m.Payload))
		}
	})

	t.Run("StoresUUIDEventIDsInAUUIDColumn", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t, inbox.WithIDType(inbox.IDTypeUUID))
		ib, err := pgxinbox.New(b.pool, b.options()...)
		require.NoError(t, err)
		id := uuid.NewString()
		h := ib.Middleware(b.credit(100, nil))

		_, err = h(newMsg(id))
		require.NoError(t, err)
		_, err = h(newMsg(id))
		require.NoError(t, err)
		require.Equal(t, 100, b.balance(t))
		state, _ := b.row(t, "wallet-credits", id)
		require.Equal(t, "done", state)
	})

	t.Run("AConnServesMessagesOneAtATime", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		conn, err := b.pool.Acquire(context.Background())
		require.NoError(t, err)
		t.Cleanup(conn.Release)
		ib, err := pgxinbox.New(conn.Conn(), b.options()...)
		require.NoError(t, err)
		h := ib.Middleware(b.credit(100, nil))
		for _, id := range []string{"evt-1", "evt-2", "evt-1"} {
			_, err := h(newMsg(id))
			require.NoError(t, err)
		}
		require.Equal(t, 200, b.balance(t))
	})
}

func TestLeaseMode_ClaimsReleasesOnFailureAndCompletesTheNextAttempt(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ib, err := pgxinbox.New(b.pool, b.options(inbox.WithLease(10*time.Second), inbox.WithMaxAttempts(3))...)
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
	state, n := b.row(t, "wallet-credits", "evt-1")
	require.Equal(t, "released", state)
	require.Equal(t, 1, n)

	produced, err := h(newMsg("evt-1"))
	require.NoError(t, err)
	require.Len(t, produced, 1)
	state, n = b.row(t, "wallet-credits", "evt-1")
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

func TestDeadLetter_AMessageWithoutAnEventIDIsParked(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	dlq := &recordingPublisher{}
	ib, err := pgxinbox.New(b.pool, b.options(inbox.WithDeadLetter(dlq, "inbox.dlq"))...)
	require.NoError(t, err)
	var calls atomic.Int64

	_, err = ib.Middleware(b.credit(100, &calls))(newMsg(""))
	require.NoError(t, err, "a dead-lettered message is acked")
	require.Zero(t, calls.Load())
	parked := dlq.Messages("inbox.dlq")
	require.Len(t, parked, 1)
	require.NotEmpty(t, parked[0].Metadata.Get(middleware.ReasonForPoisonedKey))
	require.Equal(t, 0, b.rows(t, "wallet-credits"))
}

func TestMigrate(t *testing.T) {
	t.Parallel()

	t.Run("TheFirstMessageCreatesTheTables", func(t *testing.T) {
		t.Parallel()
		b := &testBundle{pool: openPool(t, testDSN()), table: uniqueName("inbox_pgx"), logs: &recordingLogger{}}
		b.accounts = b.table + "_accounts"
		t.Cleanup(func() { b.drop(t) })
		_, err := b.pool.Exec(context.Background(), `CREATE TABLE `+b.accounts+` (id int PRIMARY KEY, balance bigint NOT NULL);
			INSERT INTO `+b.accounts+` VALUES (1, 0)`)
		require.NoError(t, err)

		h := pgxinbox.Middleware(b.pool, b.options()...)(b.credit(100, nil))
		_, err = h(newMsg("evt-1"))
		require.NoError(t, err)
		require.Equal(t, 1, b.rows(t, "wallet-credits"))
		require.Equal(t, 100, b.balance(t))
	})

	t.Run("MigratingTwiceChangesNothing", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		require.NoError(t, pgxinbox.Database(b.pool).Migrate(context.Background(), inbox.WithTable(b.table)))
	})

	t.Run("WithoutAutoMigrateAMissingTableHoldsTheMessageBack", func(t *testing.T) {
		t.Parallel()
		b := &testBundle{pool: openPool(t, testDSN()), table: uniqueName("inbox_pgx"), logs: &recordingLogger{}}
		b.accounts = b.table + "_accounts"
		t.Cleanup(func() { b.drop(t) })
		h := pgxinbox.Middleware(b.pool, b.options(inbox.WithAutoMigrate(false), inbox.WithRejectDelay(time.Millisecond))...)(b.credit(100, nil))
		_, err := h(newMsg("evt-1"))
		require.ErrorIs(t, err, inbox.ErrSchemaMissing)
	})
}

func TestOperations(t *testing.T) {
	t.Parallel()

	t.Run("CleanupDeletesRowsPastTheRetention", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		applyAll(t, b, "old-1", "old-2", "new-1")
		_, err := b.pool.Exec(context.Background(),
			`UPDATE `+b.table+` SET processed_at = `+inboxtest.PostgreSQL.ProcessedAgo(40*24*time.Hour)+` WHERE message_id LIKE 'old-%'`)
		require.NoError(t, err)

		res, err := pgxinbox.Database(b.pool).Cleanup(context.Background(), inbox.CleanupParams{Retention: 30 * 24 * time.Hour},
			inbox.WithTable(b.table))
		require.NoError(t, err)
		require.EqualValues(t, 2, res.Deleted)
		require.False(t, res.Skipped)
		require.Equal(t, 1, b.rows(t, "wallet-credits"))

		cl, err := pgxinbox.Database(b.pool).NewCleaner(inbox.CleanerConfig{}, inbox.WithTable(b.table))
		require.NoError(t, err)
		round, err := cl.Round(context.Background())
		require.NoError(t, err)
		require.Zero(t, round.Deleted)
	})

	t.Run("ReadStatsCountsRowsPerConsumer", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		applyAll(t, b, "evt-1", "evt-2")
		st, err := pgxinbox.Database(b.pool).ReadStats(context.Background(), inbox.WithTable(b.table))
		require.NoError(t, err)
		require.Len(t, st.Consumers, 1)
		require.Equal(t, "wallet-credits", st.Consumers[0].Consumer)
		require.EqualValues(t, 2, st.Consumers[0].Rows)
		require.Positive(t, st.TotalBytes)
	})

	t.Run("ForgetRemovesTheRowSoTheNextCopyIsAppliedAgain", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		applyAll(t, b, "evt-1")
		row, err := pgxinbox.Database(b.pool).Forget(context.Background(),
			inbox.ForgetParams{Consumer: "wallet-credits", ID: "evt-1"}, inbox.WithTable(b.table))
		require.NoError(t, err)
		require.Equal(t, "done", row.State)
		_, err = pgxinbox.Database(b.pool).Forget(context.Background(),
			inbox.ForgetParams{Consumer: "wallet-credits", ID: "evt-1"}, inbox.WithTable(b.table))
		require.ErrorIs(t, err, inbox.ErrNotFound)
		applyAll(t, b, "evt-1")
		require.Equal(t, 200, b.balance(t))
	})

	t.Run("RemembersReportsHowFarBackEachConsumerRemembers", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		applyAll(t, b, "evt-1")
		// Two hours pass: the row ages, and so does the consumer's record of when it began to remember.
		_, err := b.pool.Exec(context.Background(), `UPDATE `+b.table+` SET processed_at = `+inboxtest.PostgreSQL.ProcessedAgo(2*time.Hour))
		require.NoError(t, err)
		_, err = b.pool.Exec(context.Background(), inboxtest.PostgreSQL.AgeConsumer(b.table, 2*time.Hour), "wallet-credits")
		require.NoError(t, err)
		ms, err := pgxinbox.Database(b.pool).Remembers(context.Background(), inbox.WithTable(b.table))
		require.NoError(t, err)
		require.Len(t, ms, 1)
		require.True(t, ms[0].Covers(time.Hour))
		require.False(t, ms[0].Covers(3*time.Hour))
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

// applyAll applies a credit of 100 for each ID, in transaction mode.
func applyAll(t *testing.T, b *testBundle, ids ...string) {
	t.Helper()
	ib, err := pgxinbox.New(b.pool, b.options()...)
	require.NoError(t, err)
	h := ib.Middleware(b.credit(100, nil))
	for _, id := range ids {
		_, err := h(newMsg(id))
		require.NoError(t, err)
	}
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
