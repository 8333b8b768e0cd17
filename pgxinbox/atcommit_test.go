package pgxinbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/observe"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
)

// finishes records the Claimed and Finished events of an inbox, by event ID.
type finishes struct {
	observe.NopObserver
	mu       sync.Mutex
	claimed  map[string]int
	outcomes map[string][]observe.Outcome
	skipped  map[string]int
}

func newFinishes() *finishes {
	return &finishes{claimed: map[string]int{}, outcomes: map[string][]observe.Outcome{}, skipped: map[string]int{}}
}

func (f *finishes) Claimed(ctx context.Context, e observe.ClaimEvent) context.Context {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claimed[e.EventID]++
	return ctx
}

func (f *finishes) Finished(_ context.Context, e observe.FinishEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.outcomes[e.EventID] = append(f.outcomes[e.EventID], e.Outcome)
}

func (f *finishes) DuplicateSkipped(_ context.Context, e observe.SkipEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.skipped[e.EventID]++
}

func TestClaimAtCommit(t *testing.T) {
	t.Parallel()

	// BEGIN goes with the handler's statement, and the claim with COMMIT: two round trips, in every mode pgx sends
	// statements in.
	for _, mode := range []string{"cache_statement", "cache_describe", "exec", "simple_protocol"} {
		t.Run("AMessageCostsTwoRoundTripsIn_"+mode, func(t *testing.T) {
			t.Parallel()
			const messages = 20
			trips, b, h, calls := messagesOverCountedPool(t, queryExecModes[mode], messages, inbox.WithClaimAtCommit())
			require.Equal(t, int64(2*messages), trips)
			require.Equal(t, messages+1, b.Balance(t))
			require.Equal(t, messages+1, b.Rows(t, "wallet-credits"))

			// A copy runs its handler, whose effect goes back with the failed claim, and is then skipped.
			_, err := h(newMsg("evt-0"))
			require.NoError(t, err)
			require.EqualValues(t, messages+2, calls.Load(), "the copy's handler ran")
			require.Equal(t, messages+1, b.Balance(t), "and its credit was rolled back")
		})
	}

	t.Run("AMessageWhoseHandlerRunsNoStatementCostsOneRoundTrip", func(t *testing.T) {
		t.Parallel()
		var trips tripCounter
		pool := openCountingPool(t, &trips, pgx.QueryExecModeCacheStatement)
		b := newBundleOn(t, pool)
		ib, err := pgxinbox.New(pool, b.Options(inbox.WithClaimAtCommit())...)
		require.NoError(t, err)
		h := ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })
		_, err = h(newMsg("warm-up"))
		require.NoError(t, err)
		trips.reset()
		for i := range 10 {
			_, err := h(newMsg(fmt.Sprintf("evt-%d", i)))
			require.NoError(t, err)
		}
		require.Equal(t, int64(10), trips.trips.Load(), "BEGIN, the claim and COMMIT in one")
		require.Equal(t, 11, b.Rows(t, "wallet-credits"))
	})

	t.Run("ACommitThatFailsAfterTheClaimIsNackedAndAppliesNothing", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		_, err := b.pool.Exec(context.Background(), `CREATE TABLE `+b.Accounts+`_once (n int UNIQUE DEFERRABLE INITIALLY DEFERRED)`)
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = b.pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+b.Accounts+`_once`) })
		ib, err := pgxinbox.New(b.pool, b.Options(inbox.WithClaimAtCommit())...)
		require.NoError(t, err)
		h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			if _, err := b.Credit(1, nil)(msg); err != nil {
				return nil, err
			}
			tx, _ := pgxinbox.TxFromContext(msg.Context())
			_, err := tx.Exec(msg.Context(), `INSERT INTO `+b.Accounts+`_once VALUES ($1), ($1)`, 1) // checked at COMMIT
			return nil, err
		})
		_, err = h(newMsg("evt-1"))
		require.ErrorContains(t, err, "commit")
		require.Zero(t, b.Balance(t))
		require.Zero(t, b.Rows(t, "wallet-credits"))
		require.Zero(t, b.pool.Stat().AcquiredConns())
	})

	t.Run("ACopyIsSkippedItsEffectRolledBackAndWhatTheFirstProducedSentAgain", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		obs := newFinishes()
		ib, err := pgxinbox.New(b.pool, b.Options(inbox.WithClaimAtCommit(), inbox.WithObserver(obs))...)
		require.NoError(t, err)
		var calls atomic.Int64
		h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			if _, err := b.Credit(1, &calls)(msg); err != nil {
				return nil, err
			}
			return []*message.Message{message.NewMessage(fmt.Sprintf("out-%d", calls.Load()), []byte("credited"))}, nil
		})
		first, err := h(newMsg("evt-1"))
		require.NoError(t, err)
		require.Len(t, first, 1)
		again, err := h(newMsg("evt-1"))
		require.NoError(t, err)
		require.Len(t, again, 1, "the copy returns what the first run produced")
		require.Equal(t, first[0].UUID, again[0].UUID)
		require.Equal(t, "credited", string(again[0].Payload))
		require.EqualValues(t, 2, calls.Load())
		require.Equal(t, 1, b.Balance(t))

		obs.mu.Lock()
		defer obs.mu.Unlock()
		require.Equal(t, 2, obs.claimed["evt-1"], "one Claimed per delivery")
		require.Equal(t, []observe.Outcome{observe.OutcomeCommitted, observe.OutcomeDuplicate}, obs.outcomes["evt-1"])
		require.Equal(t, 1, obs.skipped["evt-1"])
	})

	t.Run("RacingCopiesApplyOnce", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		ib, err := pgxinbox.New(b.pool, b.Options(inbox.WithClaimAtCommit())...)
		require.NoError(t, err)
		const ids, copies = 20, 4
		require.Empty(t, inboxtest.DeliverCopies(t, ib.Middleware(b.Credit(1, nil)), inboxtest.EventIDs("evt", ids), copies))
		require.Equal(t, ids, b.Balance(t), "each ID credited once")
		require.Equal(t, ids, b.Rows(t, "wallet-credits"))
	})

	t.Run("AFailingHandlerIsNackedAndACopyOfAnAppliedMessageIsSkippedAsUsual", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		ib, err := pgxinbox.New(b.pool, b.Options(inbox.WithClaimAtCommit())...)
		require.NoError(t, err)
		var fail atomic.Bool
		var calls atomic.Int64
		h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			if _, err := b.Credit(1, &calls)(msg); err != nil {
				return nil, err
			}
			if fail.Load() {
				return nil, errors.New("the handler failed")
			}
			return nil, nil
		})
		_, err = h(newMsg("applied"))
		require.NoError(t, err)

		fail.Store(true)
		_, err = h(newMsg("new"))
		require.ErrorContains(t, err, "the handler failed", "nacked")
		_, err = h(newMsg("applied"))
		require.NoError(t, err, "a copy is skipped, whatever its handler would now do, as without the option")
		require.Equal(t, 1, b.Balance(t))
		require.Equal(t, 1, b.Rows(t, "wallet-credits"))
	})

	t.Run("APanickingHandlerPanicsAndACopyIsSkipped", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		ib, err := pgxinbox.New(b.pool, b.Options(inbox.WithClaimAtCommit())...)
		require.NoError(t, err)
		var panics atomic.Bool
		h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			if _, err := b.Credit(1, nil)(msg); err != nil {
				return nil, err
			}
			if panics.Load() {
				panic("the handler panicked")
			}
			return nil, nil
		})
		_, err = h(newMsg("applied"))
		require.NoError(t, err)
		panics.Store(true)
		require.PanicsWithValue(t, "the handler panicked", func() { _, _ = h(newMsg("new")) })
		_, err = h(newMsg("applied"))
		require.NoError(t, err)
		require.Equal(t, 1, b.Balance(t))
		require.Zero(t, b.pool.Stat().AcquiredConns(), "every connection went back to the pool")
	})

	t.Run("ARowLeaseModeReleasedIsTakenOver", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		lease, err := pgxinbox.New(b.pool, b.Options(inbox.WithLease(time.Minute))...)
		require.NoError(t, err)
		_, err = lease.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, errors.New("call failed") })(newMsg("evt-1"))
		require.Error(t, err)
		state, _ := b.Row(t, "wallet-credits", "evt-1")
		require.Equal(t, "released", state)

		ib, err := pgxinbox.New(b.pool, b.Options(inbox.WithClaimAtCommit())...)
		require.NoError(t, err)
		_, err = ib.Middleware(b.Credit(1, nil))(newMsg("evt-1"))
		require.NoError(t, err)
		require.Equal(t, 1, b.Balance(t))
		state, _ = b.Row(t, "wallet-credits", "evt-1")
		require.Equal(t, "done", state)
	})

	t.Run("AnIDTheTableRefusesIsRejectedAsUsual", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t, inbox.WithIDType(inbox.IDTypeUUID))
		dlq := &recordingPublisher{}
		ib, err := pgxinbox.New(b.pool, b.Options(inbox.WithClaimAtCommit(), inbox.WithIDType(inbox.IDTypeUUID),
			inbox.WithDeadLetter(dlq, "dead"))...)
		require.NoError(t, err)
		var calls atomic.Int64
		h := ib.Middleware(b.Credit(1, &calls))
		_, err = h(newMsg("not-a-uuid"))
		require.NoError(t, err, "dead-lettered, and acked")
		require.Len(t, dlq.Messages("dead"), 1)
		require.Zero(t, b.Balance(t))

		const id = "0195f3a0-0000-7000-8000-000000000001"
		calls.Store(0)
		_, err = h(newMsg(id))
		require.NoError(t, err)
		require.EqualValues(t, 1, calls.Load(), "a UUID is claimed at commit, at the first try")
		require.Equal(t, 1, b.Balance(t))
	})

	t.Run("IsRefusedWithLeaseModeBatchModeAndOverDatabaseSQL", func(t *testing.T) {
		t.Parallel()
		pool := openPool(t, testDSN())
		for _, opts := range [][]inbox.Option{
			{inbox.WithClaimAtCommit(), inbox.WithLease(time.Minute)},
			{inbox.WithClaimAtCommit(), inbox.WithBatch(0, 8)},
		} {
			_, err := pgxinbox.New(pool, opts...)
			require.ErrorIs(t, err, inbox.ErrInvalidOption)
		}
		_, err := inbox.New(openStdlib(t, testDSN()), inbox.WithClaimAtCommit())
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
		require.ErrorContains(t, err, "pgxinbox")
	})
}
