package inbox

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
)

// EventIDPublisher returns a publisher that stamps each message's UUID into metadata key (DefaultIDMetadataKey when
// key is "") unless the producer already set an event ID there, then publishes through pub. A publish that is
// retried with the same *message.Message, or a relay that resends a stored message, therefore carries the same
// event ID every time, and the consumer's inbox recognises the copy. With StampUUIDv7 it stamps a new UUIDv7
// instead of the message's UUID.
func EventIDPublisher(pub message.Publisher, key string, opts ...PublisherOption) message.Publisher {
	if key == "" {
		key = DefaultIDMetadataKey
	}
	p := &eventIDPublisher{Publisher: pub, key: key}
	for _, opt := range opts {
		if opt != nil {
			opt(p)
		}
	}
	return p
}

// PublisherOption configures EventIDPublisher.
type PublisherOption func(*eventIDPublisher)

// StampUUIDv7 makes EventIDPublisher stamp a new UUIDv7 (RFC 9562: a millisecond timestamp, then random bits) as
// the event ID of a message that has none, instead of the message's UUID, which Watermill makes a random v4. The
// ID is written into the message's metadata at its first publish, so a retried publish or a relay's resend of the
// same message carries the same ID. Time-ordered IDs keep an inbox's uuid primary key compact (new keys go to its
// right edge) and let a table partitioned by ID drop whole partitions as they expire.
func StampUUIDv7() PublisherOption { return func(p *eventIDPublisher) { p.v7 = true } }

type eventIDPublisher struct {
	message.Publisher
	key string
	v7  bool
}

// Publish stamps event IDs, then publishes.
func (p *eventIDPublisher) Publish(topic string, msgs ...*message.Message) error {
	if p.v7 {
		for _, m := range msgs {
			if m.Metadata.Get(p.key) != "" {
				continue
			}
			id, err := uuid.NewV7()
			if err != nil {
				return fmt.Errorf("inbox: stamp a UUIDv7 event ID: %w", err)
			}
			if m.Metadata == nil {
				m.Metadata = make(message.Metadata)
			}
			m.Metadata.Set(p.key, id.String())
		}
	}
	stampEventIDs(msgs, p.key)
	return p.Publisher.Publish(topic, msgs...)
}

// stampEventIDs sets metadata key to the message UUID on every message that has no value there yet.
func stampEventIDs(msgs []*message.Message, key string) {
	if key == "" {
		return
	}
	for _, m := range msgs {
		if m.Metadata == nil {
			m.Metadata = make(message.Metadata)
		}
		if m.Metadata.Get(key) == "" {
			m.Metadata.Set(key, m.UUID)
		}
	}
}
