package testkit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/observe"
)

type EventRecorder struct {
	mu     sync.Mutex
	events []RecordedEvent
}

type RecordedEvent struct {
	Hook  string
	Event any
	// Span is what EventRecorder's Claimed put into the context the hook got ("span of " and the event ID), or nil.
	Span any
}

type spanKey struct{}

func SpanOf(ctx context.Context) any { return ctx.Value(spanKey{}) }

func (o *EventRecorder) add(ctx context.Context, hook string, e any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, RecordedEvent{Hook: hook, Event: e, Span: SpanOf(ctx)})
}

// Claimed records e and returns a context carrying its span, to show which later hooks receive it.
func (o *EventRecorder) Claimed(ctx context.Context, e observe.ClaimEvent) context.Context {
	o.add(ctx, "Claimed", e)
	return context.WithValue(ctx, spanKey{}, "span of "+e.EventID)
}

func (o *EventRecorder) Committed(ctx context.Context, e observe.CommitEvent) {
	o.add(ctx, "Committed", e)
}
func (o *EventRecorder) Finished(ctx context.Context, e observe.FinishEvent) {
	o.add(ctx, "Finished", e)
}
func (o *EventRecorder) DuplicateSkipped(ctx context.Context, e observe.SkipEvent) {
	o.add(ctx, "DuplicateSkipped", e)
}
func (o *EventRecorder) DeadLettered(ctx context.Context, e observe.DeadLetterEvent) {
	o.add(ctx, "DeadLettered", e)
}
func (o *EventRecorder) Nacked(ctx context.Context, e observe.NackEvent) { o.add(ctx, "Nacked", e) }
func (o *EventRecorder) LeaseTakenOver(ctx context.Context, e observe.LeaseEvent) {
	o.add(ctx, "LeaseTakenOver", e)
}
func (o *EventRecorder) LeaseLost(ctx context.Context, e observe.LeaseEvent) {
	o.add(ctx, "LeaseLost", e)
}
func (o *EventRecorder) RowsCleaned(ctx context.Context, e observe.CleanupEvent) {
	o.add(ctx, "RowsCleaned", e)
}
func (o *EventRecorder) FingerprintConflict(ctx context.Context, e observe.ConflictEvent) {
	o.add(ctx, "FingerprintConflict", e)
}

// Hooks returns the names of the hooks called so far, in order.
func (o *EventRecorder) Hooks() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, r := range o.events {
		out = append(out, r.Hook)
	}
	return out
}

// Count returns how many times hook was called so far.
func (o *EventRecorder) Count(hook string) int {
	n := 0
	for _, h := range o.Hooks() {
		if h == hook {
			n++
		}
	}
	return n
}

// Events returns the events so far, in order.
func (o *EventRecorder) Events() []RecordedEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]RecordedEvent(nil), o.events...)
}

func OnlyEvent[E any](t testing.TB, o *EventRecorder, hook string) (E, RecordedEvent) {
	t.Helper()
	var found []RecordedEvent
	for _, r := range o.Events() {
		if r.Hook == hook {
			found = append(found, r)
		}
	}
	require.Len(t, found, 1, "calls of %s", hook)
	return found[0].Event.(E), found[0]
}

func noop(*message.Message) ([]*message.Message, error) { return nil, nil }

func aClaimIsBracketedByClaimedAndFinished(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	obs := &EventRecorder{}
	var inHandler any
	msg := newMsg("evt-1")
	_, err := b.inbox(t, inbox.WithObserver(obs)).Middleware(func(m *message.Message) ([]*message.Message, error) {
		inHandler = SpanOf(m.Context())
		return b.Credit(100, new(atomic.Int64))(m)
	})(msg)
	require.NoError(t, err)

	require.Equal(t, []string{"Claimed", "Committed", "Finished"}, obs.Hooks())
	claim, _ := OnlyEvent[observe.ClaimEvent](t, obs, "Claimed")
	require.Equal(t, consumer, claim.Consumer)
	require.Equal(t, "evt-1", claim.EventID)
	require.Equal(t, observe.ModeTransaction, claim.Mode)
	require.Same(t, msg, claim.Message)
	require.Equal(t, 1, claim.Attempt)
	require.Positive(t, claim.Duration)
	require.Equal(t, "span of evt-1", inHandler, "the handler runs with the context Claimed returned")
	commit, rec := OnlyEvent[observe.CommitEvent](t, obs, "Committed")
	require.NoError(t, commit.Err)
	require.Positive(t, commit.Duration)
	require.Equal(t, "span of evt-1", rec.Span)
	finish, rec := OnlyEvent[observe.FinishEvent](t, obs, "Finished")
	require.Equal(t, observe.OutcomeCommitted, finish.Outcome)
	require.NoError(t, finish.Err)
	require.GreaterOrEqual(t, finish.Duration, commit.Duration)
	require.Equal(t, "span of evt-1", rec.Span, "the end event gets the context Claimed returned")

	// A copy is reported as a duplicate, without a claim.
	copies := &EventRecorder{}
	_, err = b.inbox(t, inbox.WithObserver(copies)).Middleware(b.Credit(100, new(atomic.Int64)))(newMsg("evt-1"))
	require.NoError(t, err)
	require.Equal(t, []string{"DuplicateSkipped"}, copies.Hooks())
	skip, _ := OnlyEvent[observe.SkipEvent](t, copies, "DuplicateSkipped")
	require.Equal(t, "evt-1", skip.EventID)
	require.Equal(t, observe.ModeTransaction, skip.Mode)
	require.Positive(t, skip.Duration)
}

func aFailingOrPanickingHandlerFinishesAsFailedWithoutACommit(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	obs := &EventRecorder{}
	ib := b.inbox(t, inbox.WithObserver(obs))
	down := errors.New("down")
	_, err := ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, down })(newMsg("evt-1"))
	require.ErrorIs(t, err, down)
	require.Panics(t, func() {
		_, _ = ib.Middleware(func(*message.Message) ([]*message.Message, error) { panic("boom") })(newMsg("evt-2"))
	})
	require.Equal(t, []string{"Claimed", "Finished", "Claimed", "Finished"}, obs.Hooks())
	events := obs.Events()
	for _, r := range []RecordedEvent{events[1], events[3]} {
		e := r.Event.(observe.FinishEvent)
		require.Equal(t, observe.OutcomeFailed, e.Outcome)
		require.Error(t, e.Err)
		require.NotNil(t, r.Span)
	}
}

func rejectsAreReportedAsNackedOrDeadLettered(t *testing.T, conn Conn) {
	noID := func() *message.Message { return message.NewMessage(watermill.NewUUID(), nil) }
	t.Run("NackedWithoutADeadLetterTopic", func(t *testing.T) {
		b := newBundle(t, conn, true)
		obs := &EventRecorder{}
		_, err := b.inbox(t, inbox.WithObserver(obs), inbox.WithRejectDelay(10*time.Millisecond)).Middleware(noop)(noID())
		require.ErrorIs(t, err, inbox.ErrMissingEventID)
		require.Equal(t, []string{"Nacked"}, obs.Hooks())
		nack, _ := OnlyEvent[observe.NackEvent](t, obs, "Nacked")
		require.Equal(t, "missing_id", nack.Reason)
		require.Equal(t, consumer, nack.Consumer)
		require.Equal(t, observe.ModeTransaction, nack.Mode)
		require.Equal(t, 10*time.Millisecond, nack.Delay)
		require.ErrorIs(t, nack.Err, inbox.ErrMissingEventID)
	})
	t.Run("DeadLetteredWithOne", func(t *testing.T) {
		b := newBundle(t, conn, true)
		obs := &EventRecorder{}
		_, err := b.inbox(t, inbox.WithObserver(obs), inbox.WithDeadLetter(&RecordingPublisher{}, "dlq")).Middleware(noop)(noID())
		require.NoError(t, err)
		require.Equal(t, []string{"DeadLettered"}, obs.Hooks())
		dead, _ := OnlyEvent[observe.DeadLetterEvent](t, obs, "DeadLettered")
		require.Equal(t, "missing_id", dead.Reason)
		require.Equal(t, consumer, dead.Consumer)
	})
	t.Run("NackedWhenTheDeadLetterPublishFails", func(t *testing.T) {
		b := newBundle(t, conn, true)
		obs := &EventRecorder{}
		_, err := b.inbox(t, inbox.WithObserver(obs), inbox.WithRejectDelay(10*time.Millisecond),
			inbox.WithDeadLetter(&RecordingPublisher{FailFirst: 1}, "dlq")).Middleware(noop)(noID())
		require.Error(t, err)
		nack, _ := OnlyEvent[observe.NackEvent](t, obs, "Nacked")
		require.Equal(t, "dead_letter_failed", nack.Reason)
	})
	t.Run("NackedForTheSchemaWhenTheTableIsMissing", func(t *testing.T) {
		b := newBundle(t, conn, false)
		obs := &EventRecorder{}
		_, err := b.inbox(t, inbox.WithAutoMigrate(false), inbox.WithRejectDelay(10*time.Millisecond), inbox.WithObserver(obs)).
			Middleware(noop)(newMsg("evt-1"))
		require.ErrorIs(t, err, inbox.ErrSchemaMissing)
		nack, _ := OnlyEvent[observe.NackEvent](t, obs, "Nacked")
		require.Equal(t, "schema", nack.Reason)
		require.Equal(t, consumer, nack.Consumer)
	})
}

func leaseModeReportsAnExhaustedMessageAsNackedOrDeadLettered(t *testing.T, conn Conn) {
	down := func(*message.Message) ([]*message.Message, error) { return nil, errors.New("down") }
	b := newBundle(t, conn, true)
	obs := &EventRecorder{}
	_, err := b.inbox(t, inbox.WithLease(time.Minute), inbox.WithMaxAttempts(1), inbox.WithRejectDelay(10*time.Millisecond),
		inbox.WithObserver(obs)).Middleware(down)(newMsg("evt-1"))
	require.ErrorIs(t, err, inbox.ErrAttemptsExhausted)
	require.Equal(t, []string{"Claimed", "Nacked", "Finished"}, obs.Hooks())
	nack, _ := OnlyEvent[observe.NackEvent](t, obs, "Nacked")
	require.Equal(t, "attempts_exhausted", nack.Reason)
	require.Equal(t, observe.ModeLease, nack.Mode)
	finish, _ := OnlyEvent[observe.FinishEvent](t, obs, "Finished")
	require.Equal(t, observe.OutcomeFailed, finish.Outcome)

	dead := &EventRecorder{}
	_, err = b.inbox(t, inbox.WithLease(time.Minute), inbox.WithMaxAttempts(1), inbox.WithObserver(dead),
		inbox.WithDeadLetter(&RecordingPublisher{}, "dlq")).Middleware(down)(newMsg("evt-2"))
	require.NoError(t, err)
	require.Equal(t, []string{"Claimed", "DeadLettered", "Finished"}, dead.Hooks())
	letter, _ := OnlyEvent[observe.DeadLetterEvent](t, dead, "DeadLettered")
	require.Equal(t, "attempts_exhausted", letter.Reason)
	finish, _ = OnlyEvent[observe.FinishEvent](t, dead, "Finished")
	require.Equal(t, observe.OutcomeDeadLettered, finish.Outcome)
}

func theObserverSeesEachCleanupBatchWithItsConsumersRows(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	var calls atomic.Int64
	rows := map[string][]string{"billing": EventIDs("bill", 3), "shipping": EventIDs("ship", 5)}
	for name, ids := range rows {
		b.apply(t, b.inbox(t, inbox.WithConsumer(name)), &calls, ids...)
		b.age(t, name, thirtyDays, ids...)
	}
	obs := &EventRecorder{}
	_, err := conn.Database().Cleanup(context.Background(), inbox.CleanupParams{BatchSize: 2}, inbox.WithTable(b.Table), inbox.WithObserver(obs))
	require.NoError(t, err)

	perConsumer := map[string]int64{}
	for _, r := range obs.Events() {
		require.Equal(t, "RowsCleaned", r.Hook)
		e := r.Event.(observe.CleanupEvent)
		require.Equal(t, b.Table, e.Table)
		require.LessOrEqual(t, e.Rows, int64(2), "one event per batch")
		perConsumer[e.Consumer] += e.Rows
	}
	require.Equal(t, map[string]int64{"billing": 3, "shipping": 5}, perConsumer)
}
