package inbox

import (
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/effectively-once/watermill-inbox/internal/store"
)

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
