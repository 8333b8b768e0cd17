package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/store"
	"github.com/effectively-once/watermill-inbox/observe"
)

// How a message ends when it is not simply committed: dead-lettered, held back and nacked after a delay, or its
// failure settled; and the observer's record of one message's way, whatever its end.

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

// reject disposes of a message the inbox cannot apply, so that it is neither applied without deduplication nor
// dropped. With a dead-letter publisher the message is published there with the reason and then acked (nil);
// without one, or when that publish fails, the message is nacked (the returned error) after the reject delay, so a
// poison message is kept but cannot spin in a hot redelivery loop.
func (i *core) reject(msg *message.Message, consumer string, cause error) error {
	ctx := msg.Context()
	fields := watermill.LogFields{"message_uuid": msg.UUID, "consumer": consumer, "reason": cause.Error()}
	if i.cfg.dlqPublisher == nil {
		i.warnNoDeadLetter(cause, fields)
		i.cfg.logger.Error("Inbox cannot apply message; nacking it after the reject delay (set WithDeadLetter to park such messages)", cause, fields)
		i.nacked(msg, consumer, reasonLabel(cause), cause)
		return sleepThen(ctx, i.cfg.rejectDelay, cause)
	}

	if err := i.deadLetter(msg, cause, nil); err != nil {
		i.cfg.logger.Error("Inbox cannot dead-letter message; nacking it after the reject delay", err, fields)
		i.nacked(msg, consumer, "dead_letter_failed", err)
		return sleepThen(ctx, i.cfg.rejectDelay, err)
	}
	i.cfg.logger.Error("Inbox dead-lettered message", cause, fields.Add(watermill.LogFields{"dead_letter_topic": i.cfg.dlqTopic}))
	i.deadLettered(msg, consumer, cause)
	return nil
}

// warnNoDeadLetter says, once per Inbox, what a consumer without a dead-letter topic does with a message it cannot
// apply, at the first such message: the line logged for each message gives its reason, but not that the messages
// behind it wait too. It is logged then rather than at construction, where most consumers never need a dead-letter
// topic and the warning would be noise.
func (i *core) warnNoDeadLetter(cause error, fields watermill.LogFields) {
	if i.warnedNoDLQ.Swap(true) {
		return
	}
	i.cfg.logger.Error("Inbox has no dead-letter topic, so a message it cannot apply is held back: nacked after the "+
		"reject delay and redelivered, again and again, and on an ordered transport (a Kafka partition, a FIFO "+
		"queue) every message behind it waits; set WithDeadLetter(pub, topic) to park such messages and go on",
		cause, fields.Add(watermill.LogFields{"reject_delay": i.cfg.rejectDelay.String()}))
}

// deadLetter publishes a copy of msg to the dead-letter topic with cause and extra in its metadata.
func (i *core) deadLetter(msg *message.Message, cause error, extra map[string]string) error {
	ctx := msg.Context()
	dead := msg.Copy()
	dead.Metadata.Set(middleware.ReasonForPoisonedKey, cause.Error())
	dead.Metadata.Set(middleware.PoisonedTopicKey, message.SubscribeTopicFromCtx(ctx))
	dead.Metadata.Set(middleware.PoisonedHandlerKey, message.HandlerNameFromCtx(ctx))
	dead.Metadata.Set(middleware.PoisonedSubscriberKey, message.SubscriberNameFromCtx(ctx))
	for k, v := range extra {
		dead.Metadata.Set(k, v)
	}
	if err := i.cfg.dlqPublisher.Publish(i.cfg.dlqTopic, dead); err != nil {
		return fmt.Errorf("inbox: dead-letter message %s to %s: %w (reason: %w)", msg.UUID, i.cfg.dlqTopic, err, cause)
	}
	return nil
}

// settle returns err for the router, once apply's transaction or savepoint is rolled back: an unusable message is
// rejected (dead-lettered, or nacked after the reject delay), a missing table or a consumer name the table has no
// id left for holds the message back for the reject delay; anything else goes on as it is.
func (i *core) settle(msg *message.Message, consumer string, err error) error {
	var u unusable
	switch {
	case errors.As(err, &u):
		return i.reject(msg, consumer, u.error)
	// Faults of the table or of the wiring, not of the message's, held back so that the redelivery does not spin: a
	// missing table, a consumer name the table has no id left for, a handler helper of the other client library, a
	// connection whose session encoding would change the ID, and a claim whose retry with the id the name has now
	// found that one stale too (the consumers table is being made anew again).
	case errors.Is(err, ErrSchemaMissing), errors.Is(err, ErrConsumerIDsExhausted), errors.Is(err, ErrNoTx),
		errors.Is(err, store.ErrStaleConsumer), errors.Is(err, ErrClientEncoding):
		return i.holdBack(msg, err)
	}
	return err
}

// rollbackFailed logs a rollback that failed. Once the message's context has ended (a router closing, a deadline)
// database/sql and the driver end the transaction themselves and report the cancellation, often as a bad
// connection: that is no fault, so it is logged at debug level, not as an error.
func (i *core) rollbackFailed(msg *message.Message, consumer, id, what string, err error) {
	switch {
	case err == nil:
	case msg.Context().Err() != nil:
		i.cfg.logger.Debug("Inbox "+what+" ended with the message's context", logFields(msg, consumer, id).Add(watermill.LogFields{"error": err.Error()}))
	default:
		i.cfg.logger.Error("Inbox "+what+" failed", err, logFields(msg, consumer, id))
	}
}

func logFields(msg *message.Message, consumer, id string) watermill.LogFields {
	return watermill.LogFields{"message_uuid": msg.UUID, "consumer": consumer, "event_id": id}
}

// closingKey keys the channel that closes when the subscription that delivered a message ends.
type closingKey struct{}

// closing returns the channel that closes when the subscription that delivered the message of ctx ends, or nil
// (which never closes) when EndDelaysOnClose is not installed.
func closing(ctx context.Context) <-chan struct{} {
	c, _ := ctx.Value(closingKey{}).(<-chan struct{})
	return c
}

// sleepThen waits d, or less if ctx ends first or the subscription that delivered its message ends (see
// EndDelaysOnClose), and returns err: the delay belongs to the nack that err causes. Every wait of the middleware
// goes through here, so that a closing router can end them all.
func sleepThen(ctx context.Context, d time.Duration, err error) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-closing(ctx):
	}
	return err
}

// joined returns the subscriber transaction in ctx that the inbox should join, if any.
func (d *Database) joined(ctx context.Context) (driver.Tx, bool) {
	for _, j := range d.joiners {
		if tx, ok := j.Joined(ctx); ok {
			return tx, true
		}
	}
	return nil, false
}

// holdBack logs why the inbox cannot apply any message now and returns err after the reject delay, so that the
// message is nacked without spinning: for a schema or configuration fault, which no dead-letter topic should get.
func (i *core) holdBack(msg *message.Message, err error) error {
	ctx := msg.Context()
	if ctx.Err() != nil {
		return err
	}
	i.cfg.logger.Error("Inbox cannot apply messages; nacking after the reject delay", err,
		watermill.LogFields{"message_uuid": msg.UUID, "table": i.cfg.table, "handler": message.HandlerNameFromCtx(ctx)})
	consumer := i.cfg.consumer
	if consumer == "" {
		consumer = message.HandlerNameFromCtx(ctx)
	}
	i.nacked(msg, consumer, holdBackReason(err), err)
	return sleepThen(ctx, i.cfg.rejectDelay, err)
}
