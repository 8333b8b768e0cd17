package inbox_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

func TestModeSwitch_TransactionModeTakesOverWhatLeaseModeLeft(t *testing.T) {
	t.Parallel()

	t.Run("AReleasedRowIsAppliedOnce", func(t *testing.T) {
		t.Parallel()
		leased, b := setup(t, inbox.WithLease(time.Minute))
		_, err := leased.Middleware(func(*message.Message) ([]*message.Message, error) {
			return nil, errors.New("provider unavailable")
		})(newMsg("evt-1"))
		require.Error(t, err)

		// The consumer is switched to transaction mode; the redelivery must be applied, not held forever.
		tx, err := inbox.New(b.db, inbox.WithTable(b.Table), inbox.WithConsumer("wallet-credits"), inbox.WithRejectDelay(time.Hour))
		require.NoError(t, err)
		var calls atomic.Int64
		_, err = tx.Middleware(b.Credit(100, &calls))(newMsg("evt-1"))
		require.NoError(t, err)
		_, err = tx.Middleware(b.Credit(100, &calls))(newMsg("evt-1"))
		require.NoError(t, err)
		require.EqualValues(t, 1, calls.Load())
		require.Equal(t, 100, b.Balance(t))
		require.Equal(t, "done", b.stateOf(t, "wallet-credits", "evt-1"))
	})

	t.Run("AnExpiredLeaseIsTakenOver", func(t *testing.T) {
		t.Parallel()
		ib, b := setup(t)
		_, err := b.db.Exec(`INSERT INTO `+b.Table+` (consumer_id, message_id, state, attempts, lease_token, locked_until)
			VALUES ($1, 'evt-1', 'p', 1, gen_random_uuid(), now() - interval '1 second')`, b.consumerID(t, "wallet-credits"))
		require.NoError(t, err)
		var calls atomic.Int64
		_, err = ib.Middleware(b.Credit(100, &calls))(newMsg("evt-1"))
		require.NoError(t, err)
		require.EqualValues(t, 1, calls.Load())
		require.Equal(t, "done", b.stateOf(t, "wallet-credits", "evt-1"))
	})

	t.Run("ALiveLeaseIsWaitedFor", func(t *testing.T) {
		t.Parallel()
		ib, b := setup(t)
		_, err := b.db.Exec(`INSERT INTO `+b.Table+` (consumer_id, message_id, state, attempts, lease_token, locked_until)
			VALUES ($1, 'evt-1', 'p', 1, gen_random_uuid(), now() + interval '1 hour')`, b.consumerID(t, "wallet-credits"))
		require.NoError(t, err)
		var calls atomic.Int64
		_, err = ib.Middleware(b.Credit(100, &calls))(newMsg("evt-1"))
		require.ErrorIs(t, err, inbox.ErrLeaseHeld)
		require.Zero(t, calls.Load())
	})
}

func TestModeSwitch_ARowTakenOverAsApplyingCannotCommitBeforeItsHandlerFinished(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	consumer := b.consumerID(t, "wallet-credits")
	_, err := b.db.Exec(`INSERT INTO `+b.Table+` (consumer_id, message_id, state) VALUES ($1, 'evt-1', 'r')`, consumer)
	require.NoError(t, err)
	// What a joined claim's takeover writes, committed by the subscriber before the handler turned it 'done'.
	tx, err := b.db.Begin()
	require.NoError(t, err)
	_, err = tx.Exec(`UPDATE `+b.Table+` SET state = 'a' WHERE consumer_id = $1 AND message_id = 'evt-1'`, consumer)
	require.NoError(t, err)
	err = tx.Commit()
	require.Error(t, err, "the guard must refuse the commit")
	require.Contains(t, err.Error(), "would commit before its handler finished")
	require.Equal(t, "released", b.stateOf(t, "wallet-credits", "evt-1"))
}
