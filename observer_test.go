package inbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/inboxtest"
)

// The observer's hooks on every driver are in the driver suite (inboxtest's TheObserver... cases); these need
// PostgreSQL's own SQL to make a commit fail, to leave a lease behind, or to age rows for the cleanup.

func TestObserver_TransactionMode(t *testing.T) {
	t.Parallel()

	t.Run("AFailedCommitIsReportedWithItsErrorAndDuration", func(t *testing.T) {
		t.Parallel()
		obs := &inboxtest.EventRecorder{}
		ib, b := setup(t, inbox.WithObserver(obs))
		// A deferred foreign key is checked at the commit, so the handler's insert fails the commit, not itself.
		child := b.table + "_child"
		_, err := b.db.Exec(`CREATE TABLE ` + child + ` (account_id int REFERENCES ` + b.accounts + ` (id) DEFERRABLE INITIALLY DEFERRED)`)
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = b.db.Exec(`DROP TABLE IF EXISTS ` + child) })

		_, err = ib.Middleware(func(m *message.Message) ([]*message.Message, error) {
			tx, _ := inbox.TxFromContext(m.Context())
			_, err := tx.ExecContext(m.Context(), `INSERT INTO `+child+` VALUES (42)`)
			return nil, err
		})(newMsg("evt-1"))
		require.Error(t, err)

		require.Equal(t, []string{"Claimed", "Committed", "Finished"}, obs.Hooks())
		commit, _ := inboxtest.OnlyEvent[inbox.CommitEvent](t, obs, "Committed")
		require.Error(t, commit.Err)
		require.Positive(t, commit.Duration)
		finish, _ := inboxtest.OnlyEvent[inbox.FinishEvent](t, obs, "Finished")
		require.Equal(t, inbox.OutcomeFailed, finish.Outcome)
		require.ErrorIs(t, finish.Err, commit.Err)
		require.Zero(t, b.rows(t, "wallet-credits"), "the claim went with the failed commit")
	})
}

func TestObserver_LeaseMode(t *testing.T) {
	t.Parallel()

	t.Run("ATakeoverIsReportedBeforeTheClaimOfTheNextAttempt", func(t *testing.T) {
		t.Parallel()
		obs := &inboxtest.EventRecorder{}
		ib, b := setup(t, inbox.WithLease(time.Minute), inbox.WithObserver(obs))
		_, err := b.db.Exec(`INSERT INTO `+b.table+` (consumer_id, message_id, state, attempts, lease_token, locked_until)
			VALUES ($1, 'evt-1', 'p', 1, $2, now() - interval '1 second')`, b.consumerAged(t, "wallet-credits", 0), watermill.NewUUID())
		require.NoError(t, err)
		var inHandler any
		_, err = ib.Middleware(func(m *message.Message) ([]*message.Message, error) {
			inHandler = inboxtest.SpanOf(m.Context())
			return nil, nil
		})(newMsg("evt-1"))
		require.NoError(t, err)

		require.Equal(t, []string{"LeaseTakenOver", "Claimed", "Committed", "Finished"}, obs.Hooks())
		takeover, _ := inboxtest.OnlyEvent[inbox.LeaseEvent](t, obs, "LeaseTakenOver")
		require.Equal(t, 2, takeover.Attempt)
		require.Equal(t, inbox.ModeLease, takeover.Mode)
		claim, _ := inboxtest.OnlyEvent[inbox.ClaimEvent](t, obs, "Claimed")
		require.Equal(t, 2, claim.Attempt)
		require.Equal(t, inbox.ModeLease, claim.Mode)
		require.Equal(t, "span of evt-1", inHandler)
		commit, _ := inboxtest.OnlyEvent[inbox.CommitEvent](t, obs, "Committed")
		require.NoError(t, commit.Err)
		require.Positive(t, commit.Duration)
		finish, _ := inboxtest.OnlyEvent[inbox.FinishEvent](t, obs, "Finished")
		require.Equal(t, inbox.OutcomeCommitted, finish.Outcome)
	})

	t.Run("AHolderWhoseLeaseWasTakenOverReportsTheLostLease", func(t *testing.T) {
		t.Parallel()
		obs := &inboxtest.EventRecorder{}
		ib, b := setup(t, inbox.WithLease(time.Minute), inbox.WithObserver(obs))
		_, err := ib.Middleware(func(*message.Message) ([]*message.Message, error) {
			// Another holder took the message over meanwhile: the row carries its token now.
			_, err := b.db.Exec(`UPDATE `+b.table+` SET lease_token = $1 WHERE message_id = 'evt-1'`, watermill.NewUUID())
			return nil, err
		})(newMsg("evt-1"))
		require.ErrorIs(t, err, inbox.ErrLeaseLost)

		require.Equal(t, []string{"Claimed", "LeaseLost", "Committed", "Finished"}, obs.Hooks())
		lost, rec := inboxtest.OnlyEvent[inbox.LeaseEvent](t, obs, "LeaseLost")
		require.Equal(t, "evt-1", lost.EventID)
		require.Equal(t, 1, lost.Attempt)
		require.Equal(t, "span of evt-1", rec.Span)
		commit, _ := inboxtest.OnlyEvent[inbox.CommitEvent](t, obs, "Committed")
		require.ErrorIs(t, commit.Err, inbox.ErrLeaseLost)
		finish, _ := inboxtest.OnlyEvent[inbox.FinishEvent](t, obs, "Finished")
		require.Equal(t, inbox.OutcomeLeaseLost, finish.Outcome)
	})
}

func TestObserver_CleanupReportsTheRowsOfEachConsumer(t *testing.T) {
	t.Parallel()
	obs := &inboxtest.EventRecorder{}
	_, b := setup(t)
	b.insertAged(t, "billing", "billing", "done", 3, thirtyDays, 1)
	b.insertAged(t, "shipping", "shipping", "done", 5, thirtyDays, 1)
	_, err := inbox.OnSQL(b.db).Cleanup(context.Background(), inbox.CleanupParams{BatchSize: 2}, inbox.WithTable(b.table), inbox.WithObserver(obs))
	require.NoError(t, err)

	perConsumer := map[string]int64{}
	for _, r := range obs.Events() {
		e := r.Event.(inbox.CleanupEvent)
		require.Equal(t, b.table, e.Table)
		require.LessOrEqual(t, e.Rows, int64(2), "one event per batch")
		perConsumer[e.Consumer] += e.Rows
	}
	require.Equal(t, map[string]int64{"billing": 3, "shipping": 5}, perConsumer)
}
