package inbox

import "github.com/ThreeDotsLabs/watermill/message"

// EventIDPublisher returns a publisher that stamps each message's UUID into metadata key (DefaultIDMetadataKey when
// key is "") unless the producer already set an event ID there, then publishes through pub. A publish that is
// retried with the same *message.Message, or a relay that resends a stored message, therefore carries the same
// event ID every time, and the consumer's inbox recognises the copy.
func EventIDPublisher(pub message.Publisher, key string) message.Publisher {
	if key == "" {
		key = DefaultIDMetadataKey
	}
	return &eventIDPublisher{Publisher: pub, key: key}
}

type eventIDPublisher struct {
	message.Publisher
	key string
}

// Publish stamps event IDs, then publishes.
func (p *eventIDPublisher) Publish(topic string, msgs ...*message.Message) error {
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
