package inbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/inboxtest"
)

// recordingObserver keeps every event the inbox reports, in order, under the name of its hook.
type recordingObserver struct {
	mu     sync.Mutex
	events []recorded
}

type recorded struct {
	hook  string
	event any
	span  any // the value recordingObserver's Claimed put into the context the hook got, or nil
}

type spanKey struct{}

func (o *recordingObserver) add(ctx context.Context, hook string, e any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, recorded{hook: hook, event: e, span: ctx.Value(spanKey{})})
}

// Claimed records e and returns a context carrying the event ID, to show which later hooks receive it.
func (o *recordingObserver) Claimed(ctx context.Context, e inbox.ClaimEvent) context.Context {
	o.add(ctx, "Claimed", e)
	return context.WithValue(ctx, spanKey{}, "span of "+e.EventID)
}
func (o *recordingObserver) Committed(ctx context.Context, e inbox.CommitEvent) {
	o.add(ctx, "Committed", e)
}
func (o *recordingObserver) Finished(ctx context.Context, e inbox.FinishEvent) {
	o.add(ctx, "Finished", e)
}
func (o *recordingObserver) DuplicateSkipped(ctx context.Context, e inbox.SkipEvent) {
	o.add(ctx, "DuplicateSkipped", e)
}
func (o *recordingObserver) DeadLettered(ctx context.Context, e inbox.DeadLetterEvent) {
	o.add(ctx, "DeadLettered", e)
}
func (o *recordingObserver) Nacked(ctx context.Context, e inbox.NackEvent) { o.add(ctx, "Nacked", e) }
func (o *recordingObserver) LeaseTakenOver(ctx context.Context, e inbox.LeaseEvent) {
	o.add(ctx, "LeaseTakenOver", e)
}
func (o *recordingObserver) LeaseLost(ctx context.Context, e inbox.LeaseEvent) {
	o.add(ctx, "LeaseLost", e)
}
func (o *recordingObserver) FingerprintConflict(ctx context.Context, e inbox.ConflictEvent) {
	o.add(ctx, "FingerprintConflict", e)
}
func (o *recordingObserver) RowsCleaned(ctx context.Context, e inbox.CleanupEvent) {
	o.add(ctx, "RowsCleaned", e)
}

// hooks returns the names of the hooks called so far, in order.
func (o *recordingObserver) hooks() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, r := range o.events {
		out = append(out, r.hook)
	}
	return out
}

// only returns the one event of hook, failing when there is not exactly one.
func only[E any](t *testing.T, o *recordingObserver, hook string) (E, recorded) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	var found []recorded
	for _, r := range o.events {
		if r.hook == hook {
			found = append(found, r)
		}
	}
	require.Len(t, found, 1, "calls of %s", hook)
	return found[0].event.(E), found[0]
}

func TestObserver_TransactionMode(t *testing.T) {
	t.Parallel()

	t.Run("AClaimIsBracketedByClaimedAndFinishedAndTheHandlerRunsWithClaimedsContext", func(t *testing.T) {
		t.Parallel()
		obs := &recordingObserver{}
		ib, b := setup(t, inbox.WithObserver(obs))
		var inHandler any
		msg := newMsg("evt-1")
		_, err := ib.Middleware(func(m *message.Message) ([]*message.Message, error) {
			inHandler = m.Context().Value(spanKey{})
			return b.credit(100, nil)(m)
		})(msg)
		require.NoError(t, err)

		require.Equal(t, []string{"Claimed", "Committed", "Finished"}, obs.hooks())
		claim, _ := only[inbox.ClaimEvent](t, obs, "Claimed")
		require.Equal(t, "wallet-credits", claim.Consumer)
		require.Equal(t, "evt-1", claim.EventID)
		require.Equal(t, inbox.ModeTransaction, claim.Mode)
		require.Same(t, msg, claim.Message)
		require.Equal(t, 1, claim.Attempt)
		require.Positive(t, claim.Duration)
		require.Equal(t, "span of evt-1", inHandler, "the handler runs with the context Claimed returned")

		commit, rec := only[inbox.CommitEvent](t, obs, "Committed")
		require.NoError(t, commit.Err)
		require.Positive(t, commit.Duration)
		require.Equal(t, "span of evt-1", rec.span)
		finish, rec := only[inbox.FinishEvent](t, obs, "Finished")
		require.Equal(t, inbox.OutcomeCommitted, finish.Outcome)
		require.NoError(t, finish.Err)
		require.GreaterOrEqual(t, finish.Duration, commit.Duration)
		require.Equal(t, "span of evt-1", rec.span, "the end event gets the context Claimed returned")
	})

	t.Run("ACopyOfAnAppliedMessageIsReportedAsADuplicateWithoutAClaim", func(t *testing.T) {
		t.Parallel()
		obs := &recordingObserver{}
		ib, b := setup(t)
		h := b.credit(100, nil)
		_, err := ib.Middleware(h)(newMsg("evt-1"))
		require.NoError(t, err)
		ib, err = inbox.New(b.db, append(b.opts, inbox.WithObserver(obs))...)
		require.NoError(t, err)
		_, err = ib.Middleware(h)(newMsg("evt-1"))
		require.NoError(t, err)

		require.Equal(t, []string{"DuplicateSkipped"}, obs.hooks())
		skip, _ := only[inbox.SkipEvent](t, obs, "DuplicateSkipped")
		require.Equal(t, "evt-1", skip.EventID)
		require.Equal(t, inbox.ModeTransaction, skip.Mode)
		require.Positive(t, skip.Duration)
	})

	t.Run("AFailedCommitIsReportedWithItsErrorAndDuration", func(t *testing.T) {
		t.Parallel()
		obs := &recordingObserver{}
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

		require.Equal(t, []string{"Claimed", "Committed", "Finished"}, obs.hooks())
		commit, _ := only[inbox.CommitEvent](t, obs, "Committed")
		require.Error(t, commit.Err)
		require.Positive(t, commit.Duration)
		finish, _ := only[inbox.FinishEvent](t, obs, "Finished")
		require.Equal(t, inbox.OutcomeFailed, finish.Outcome)
		require.ErrorIs(t, finish.Err, commit.Err)
		require.Zero(t, b.rows(t, "wallet-credits"), "the claim went with the failed commit")
	})

	t.Run("AFailingOrPanickingHandlerFinishesAsFailedWithoutACommit", func(t *testing.T) {
		t.Parallel()
		obs := &recordingObserver{}
		ib, _ := setup(t, inbox.WithObserver(obs))
		down := errors.New("down")
		_, err := ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, down })(newMsg("evt-1"))
		require.ErrorIs(t, err, down)
		require.Panics(t, func() {
			_, _ = ib.Middleware(func(*message.Message) ([]*message.Message, error) { panic("boom") })(newMsg("evt-2"))
		})

		require.Equal(t, []string{"Claimed", "Finished", "Claimed", "Finished"}, obs.hooks())
		obs.mu.Lock()
		defer obs.mu.Unlock()
		for _, r := range []recorded{obs.events[1], obs.events[3]} {
			e := r.event.(inbox.FinishEvent)
			require.Equal(t, inbox.OutcomeFailed, e.Outcome)
			require.Error(t, e.Err)
			require.NotNil(t, r.span)
		}
	})
}

func TestObserver_Rejects(t *testing.T) {
	t.Parallel()

	t.Run("AnUnusableMessageWithoutADeadLetterTopicIsReportedAsNacked", func(t *testing.T) {
		t.Parallel()
		obs := &recordingObserver{}
		ib, _ := setup(t, inbox.WithObserver(obs), inbox.WithRejectDelay(10*time.Millisecond))
		msg := message.NewMessage(watermill.NewUUID(), nil)
		_, err := ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })(msg)
		require.ErrorIs(t, err, inbox.ErrMissingEventID)

		require.Equal(t, []string{"Nacked"}, obs.hooks())
		nack, _ := only[inbox.NackEvent](t, obs, "Nacked")
		require.Equal(t, "missing_id", nack.Reason)
		require.Equal(t, "wallet-credits", nack.Consumer)
		require.Equal(t, inbox.ModeTransaction, nack.Mode)
		require.Equal(t, 10*time.Millisecond, nack.Delay)
		require.ErrorIs(t, nack.Err, inbox.ErrMissingEventID)
	})

	t.Run("AnUnusableMessageWithADeadLetterTopicIsReportedAsDeadLettered", func(t *testing.T) {
		t.Parallel()
		obs := &recordingObserver{}
		ib, _ := setup(t, inbox.WithObserver(obs), inbox.WithDeadLetter(&inboxtest.RecordingPublisher{}, "dlq"))
		_, err := ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })(message.NewMessage(watermill.NewUUID(), nil))
		require.NoError(t, err)

		require.Equal(t, []string{"DeadLettered"}, obs.hooks())
		dead, _ := only[inbox.DeadLetterEvent](t, obs, "DeadLettered")
		require.Equal(t, "missing_id", dead.Reason)
		require.Equal(t, "wallet-credits", dead.Consumer)
	})

	t.Run("AFailedDeadLetterPublishIsReportedAsNacked", func(t *testing.T) {
		t.Parallel()
		obs := &recordingObserver{}
		ib, _ := setup(t, inbox.WithObserver(obs), inbox.WithRejectDelay(10*time.Millisecond),
			inbox.WithDeadLetter(&inboxtest.RecordingPublisher{FailFirst: 1}, "dlq"))
		_, err := ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })(message.NewMessage(watermill.NewUUID(), nil))
		require.Error(t, err)

		nack, _ := only[inbox.NackEvent](t, obs, "Nacked")
		require.Equal(t, "dead_letter_failed", nack.Reason)
	})

	t.Run("AMissingSchemaIsReportedAsNackedForTheSchema", func(t *testing.T) {
		t.Parallel()
		obs := &recordingObserver{}
		db := openDB(t)
		ib, err := inbox.New(db, inbox.WithTable(uniqueName("inbox_absent")), inbox.WithConsumer("wallet-credits"),
			inbox.WithAutoMigrate(false), inbox.WithRejectDelay(10*time.Millisecond), inbox.WithObserver(obs),
			inbox.WithLogger(watermill.NopLogger{}))
		require.NoError(t, err)
		_, err = ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })(newMsg("evt-1"))
		require.ErrorIs(t, err, inbox.ErrSchemaMissing)

		nack, _ := only[inbox.NackEvent](t, obs, "Nacked")
		require.Equal(t, "schema", nack.Reason)
		require.Equal(t, "wallet-credits", nack.Consumer)
	})
}

func TestObserver_LeaseMode(t *testing.T) {
	t.Parallel()

	t.Run("ATakeoverIsReportedBeforeTheClaimOfTheNextAttempt", func(t *testing.T) {
		t.Parallel()
		obs := &recordingObserver{}
		ib, b := setup(t, inbox.WithLease(time.Minute), inbox.WithObserver(obs))
		_, err := b.db.Exec(`INSERT INTO `+b.table+` (consumer_id, message_id, state, attempts, lease_token, locked_until)
			VALUES ($1, 'evt-1', 'p', 1, $2, now() - interval '1 second')`, b.consumerAged(t, "wallet-credits", 0), watermill.NewUUID())
		require.NoError(t, err)
		var inHandler any
		_, err = ib.Middleware(func(m *message.Message) ([]*message.Message, error) {
			inHandler = m.Context().Value(spanKey{})
			return nil, nil
		})(newMsg("evt-1"))
		require.NoError(t, err)

		require.Equal(t, []string{"LeaseTakenOver", "Claimed", "Committed", "Finished"}, obs.hooks())
		takeover, _ := only[inbox.LeaseEvent](t, obs, "LeaseTakenOver")
		require.Equal(t, 2, takeover.Attempt)
		require.Equal(t, inbox.ModeLease, takeover.Mode)
		claim, _ := only[inbox.ClaimEvent](t, obs, "Claimed")
		require.Equal(t, 2, claim.Attempt)
		require.Equal(t, inbox.ModeLease, claim.Mode)
		require.Equal(t, "span of evt-1", inHandler)
		commit, _ := only[inbox.CommitEvent](t, obs, "Committed")
		require.NoError(t, commit.Err)
		require.Positive(t, commit.Duration)
		finish, _ := only[inbox.FinishEvent](t, obs, "Finished")
		require.Equal(t, inbox.OutcomeCommitted, finish.Outcome)
	})

	t.Run("AHolderWhoseLeaseWasTakenOverReportsTheLostLease", func(t *testing.T) {
		t.Parallel()
		obs := &recordingObserver{}
		ib, b := setup(t, inbox.WithLease(time.Minute), inbox.WithObserver(obs))
		_, err := ib.Middleware(func(*message.Message) ([]*message.Message, error) {
			// Another holder took the message over meanwhile: the row carries its token now.
			_, err := b.db.Exec(`UPDATE `+b.table+` SET lease_token = $1 WHERE message_id = 'evt-1'`, watermill.NewUUID())
			return nil, err
		})(newMsg("evt-1"))
		require.ErrorIs(t, err, inbox.ErrLeaseLost)

		require.Equal(t, []string{"Claimed", "LeaseLost", "Committed", "Finished"}, obs.hooks())
		lost, rec := only[inbox.LeaseEvent](t, obs, "LeaseLost")
		require.Equal(t, "evt-1", lost.EventID)
		require.Equal(t, 1, lost.Attempt)
		require.Equal(t, "span of evt-1", rec.span)
		commit, _ := only[inbox.CommitEvent](t, obs, "Committed")
		require.ErrorIs(t, commit.Err, inbox.ErrLeaseLost)
		finish, _ := only[inbox.FinishEvent](t, obs, "Finished")
		require.Equal(t, inbox.OutcomeLeaseLost, finish.Outcome)
	})

	t.Run("AnExhaustedMessageIsNackedWithoutADeadLetterTopicAndDeadLetteredWithOne", func(t *testing.T) {
		t.Parallel()
		down := func(*message.Message) ([]*message.Message, error) { return nil, errors.New("down") }

		obs := &recordingObserver{}
		ib, _ := setup(t, inbox.WithLease(time.Minute), inbox.WithMaxAttempts(1), inbox.WithRejectDelay(10*time.Millisecond), inbox.WithObserver(obs))
		_, err := ib.Middleware(down)(newMsg("evt-1"))
		require.ErrorIs(t, err, inbox.ErrAttemptsExhausted)
		require.Equal(t, []string{"Claimed", "Nacked", "Finished"}, obs.hooks())
		nack, _ := only[inbox.NackEvent](t, obs, "Nacked")
		require.Equal(t, "attempts_exhausted", nack.Reason)
		require.Equal(t, inbox.ModeLease, nack.Mode)
		finish, _ := only[inbox.FinishEvent](t, obs, "Finished")
		require.Equal(t, inbox.OutcomeFailed, finish.Outcome)

		obs = &recordingObserver{}
		ib, _ = setup(t, inbox.WithLease(time.Minute), inbox.WithMaxAttempts(1), inbox.WithObserver(obs), inbox.WithDeadLetter(&inboxtest.RecordingPublisher{}, "dlq"))
		_, err = ib.Middleware(down)(newMsg("evt-1"))
		require.NoError(t, err)
		require.Equal(t, []string{"Claimed", "DeadLettered", "Finished"}, obs.hooks())
		dead, _ := only[inbox.DeadLetterEvent](t, obs, "DeadLettered")
		require.Equal(t, "attempts_exhausted", dead.Reason)
		finish, _ = only[inbox.FinishEvent](t, obs, "Finished")
		require.Equal(t, inbox.OutcomeDeadLettered, finish.Outcome)
	})
}

func TestObserver_CleanupReportsTheRowsOfEachConsumer(t *testing.T) {
	t.Parallel()
	obs := &recordingObserver{}
	_, b := setup(t)
	b.insertAged(t, "billing", "billing", "done", 3, thirtyDays, 1)
	b.insertAged(t, "shipping", "shipping", "done", 5, thirtyDays, 1)
	_, err := inbox.OnSQL(b.db).Cleanup(context.Background(), inbox.CleanupParams{BatchSize: 2}, inbox.WithTable(b.table), inbox.WithObserver(obs))
	require.NoError(t, err)

	perConsumer := map[string]int64{}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	for _, r := range obs.events {
		e := r.event.(inbox.CleanupEvent)
		require.Equal(t, b.table, e.Table)
		require.LessOrEqual(t, e.Rows, int64(2), "one event per batch")
		perConsumer[e.Consumer] += e.Rows
	}
	require.Equal(t, map[string]int64{"billing": 3, "shipping": 5}, perConsumer)
}
