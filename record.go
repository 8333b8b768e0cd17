package inbox

import (
	"context"
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/effectively-once/watermill-inbox/observe"
)

// observed follows one message through the observer, so that its hooks carry the same consumer, ID and mode, and
// its end events the context Claimed returned.
type observed struct {
	obs          observe.Observer
	msg          *message.Message
	consumer, id string
	mode         observe.Mode
	claimStart   time.Time       // when the claim's first statement began
	claimedAt    time.Time       // when Claimed was called; zero until then
	ctx          context.Context // what Claimed returned
	committed    bool            // a commit worked
	duplicate    bool            // skipped as a copy
	finished     bool
}

func (i *core) observe(msg *message.Message, consumer, id string, mode observe.Mode) *observed {
	return &observed{obs: i.cfg.observer, msg: msg, consumer: consumer, id: id, mode: mode}
}

// claiming notes that the claim's first statement begins now.
func (o *observed) claiming() { o.claimStart = time.Now() }

// claimed calls Claimed and returns the context the message goes on with. A message claimed at commit calls it
// before its handler's first run, and once only: a second run, the usual way, goes on with the same context.
func (o *observed) claimed(attempt int) context.Context {
	if !o.claimedAt.IsZero() {
		return o.ctx
	}
	o.claimedAt = time.Now()
	ctx := o.msg.Context()
	o.ctx = o.obs.Claimed(ctx, observe.ClaimEvent{Consumer: o.consumer, EventID: o.id, Mode: o.mode, Message: o.msg,
		Attempt: attempt, Duration: o.claimedAt.Sub(o.claimStart)})
	if o.ctx == nil {
		o.ctx = ctx
	}
	return o.ctx
}

func (o *observed) skipped() {
	o.duplicate = true
	o.obs.DuplicateSkipped(o.msg.Context(), observe.SkipEvent{Consumer: o.consumer, EventID: o.id, Mode: o.mode, Message: o.msg,
		Duration: time.Since(o.claimStart)})
}

// commitDone reports a commit that began at start and ended with err.
func (o *observed) commitDone(start time.Time, err error) {
	o.committed = err == nil
	o.obs.Committed(o.context(), observe.CommitEvent{Consumer: o.consumer, EventID: o.id, Mode: o.mode, Message: o.msg,
		Duration: time.Since(start), Err: err})
}

// finish calls Finished with the outcome that err, the error returned to the router, stands for. It does nothing
// for a message that was not claimed, or the second time.
func (o *observed) finish(err error) {
	if o.claimedAt.IsZero() || o.finished {
		return
	}
	o.finished = true
	outcome := observe.OutcomeFailed
	switch {
	case errors.Is(err, ErrLeaseLost):
		outcome = observe.OutcomeLeaseLost
	case err == nil && o.committed:
		outcome = observe.OutcomeCommitted
	case err == nil && o.duplicate:
		outcome = observe.OutcomeDuplicate
	case err == nil:
		outcome = observe.OutcomeDeadLettered // acked without a commit of the effect: only a dead letter does that
	}
	o.obs.Finished(o.context(), observe.FinishEvent{Consumer: o.consumer, EventID: o.id, Mode: o.mode, Message: o.msg,
		Outcome: outcome, Err: err, Duration: time.Since(o.claimedAt)})
}

// run runs h, and finishes the message as failed should h panic, so that a span begun at the claim still ends.
func (o *observed) run(h message.HandlerFunc, msg *message.Message) ([]*message.Message, error) {
	panicked := true
	defer func() {
		if panicked {
			o.finish(errHandlerPanicked)
		}
	}()
	out, err := h(msg)
	panicked = false
	return out, err
}

var errHandlerPanicked = errors.New("inbox: the handler panicked")

func (o *observed) context() context.Context {
	if o.ctx != nil {
		return o.ctx
	}
	return o.msg.Context()
}

// modeOf returns how the inbox applies msg.
func (i *core) modeOf(msg *message.Message) observe.Mode {
	if i.cfg.lease > 0 {
		return observe.ModeLease
	}
	if _, ok := i.db.joined(msg.Context()); ok && i.cfg.subscriberTx {
		return observe.ModeJoined
	}
	return observe.ModeTransaction
}

// nacked reports a message held back for the reject delay.
func (i *core) nacked(msg *message.Message, consumer, reason string, err error) {
	i.cfg.observer.Nacked(msg.Context(), observe.NackEvent{Consumer: consumer, Mode: i.modeOf(msg), Message: msg,
		Reason: reason, Delay: i.cfg.rejectDelay, Err: err})
}

// deadLettered reports a message published to the dead-letter topic.
func (i *core) deadLettered(msg *message.Message, consumer string, cause error) {
	i.cfg.observer.DeadLettered(msg.Context(), observe.DeadLetterEvent{Consumer: consumer, Mode: i.modeOf(msg), Message: msg,
		Reason: reasonLabel(cause)})
}

// holdBackReason names why the inbox holds every message back, for a metric label.
func holdBackReason(err error) string {
	switch {
	case errors.Is(err, ErrInvalidOption):
		return "config"
	case errors.Is(err, ErrSchemaMissing), errors.Is(err, ErrSchemaDrift):
		return "schema"
	case errors.Is(err, ErrConsumerIDsExhausted):
		return "consumer_ids"
	case errors.Is(err, ErrClientEncoding):
		return "client_encoding"
	}
	return "database"
}

// reasonLabel names the sentinel behind a dead letter, for a metric label: a bounded set, unlike error texts.
func reasonLabel(err error) string {
	switch {
	case errors.Is(err, ErrMissingEventID):
		return "missing_id"
	case errors.Is(err, ErrInvalidEventID):
		return "invalid_id"
	case errors.Is(err, ErrAttemptsExhausted):
		return "attempts_exhausted"
	case errors.Is(err, ErrNoConsumer):
		return "no_consumer"
	case errors.Is(err, ErrProducedUnstorable):
		return "unstorable_produced"
	case errors.Is(err, ErrFingerprintConflict):
		return "fingerprint_conflict"
	}
	return "other"
}
