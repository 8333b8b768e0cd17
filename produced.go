package inbox

import (
	"encoding/binary"

	"github.com/google/uuid"

	"github.com/ThreeDotsLabs/watermill/message"
)

// producedNamespace is the name-space UUID of the produced messages' name-based (version 5) UUIDs. It is part of
// the identities downstream consumers store, so it never changes.
var producedNamespace = uuid.MustParse("86fc1d95-ba6a-4a53-91d3-3c0816205fe5")

// ProducedMessageUUID returns the UUID the inbox gives the message at position (from 0) of those a handler returned
// for consumer and event ID: a name-based UUID (version 5, SHA-1) in a name space of the library's own, over the
// consumer, the event ID and the position, each length-prefixed so that no two triples share a name. The same
// triple always yields the same UUID, in every mode and every version of the library, so a produced message sent
// again (after a lost commit, a crash, a failed publish, a replay of the stored messages) carries the identity it
// had the first time, and the next consumer's inbox recognises it.
func ProducedMessageUUID(consumer, eventID string, position int) string {
	name := make([]byte, 0, 3*binary.MaxVarintLen64+len(consumer)+len(eventID))
	name = binary.AppendUvarint(name, uint64(len(consumer)))
	name = append(name, consumer...)
	name = binary.AppendUvarint(name, uint64(len(eventID)))
	name = append(name, eventID...)
	name = binary.AppendUvarint(name, uint64(position))
	return uuid.NewSHA1(producedNamespace, name).String()
}

// stampProduced gives each produced message its deterministic UUID and, under idKey, an event ID: the UUID, unless
// the handler set one itself (it must then derive it from its input, or copies will carry different IDs).
func stampProduced(msgs []*message.Message, consumer, id, idKey string) {
	for pos, m := range msgs {
		if m == nil {
			continue
		}
		m.UUID = ProducedMessageUUID(consumer, id, pos)
		if idKey == "" {
			continue
		}
		if m.Metadata == nil {
			m.Metadata = make(message.Metadata)
		}
		if m.Metadata.Get(idKey) == "" {
			m.Metadata.Set(idKey, m.UUID)
		}
	}
}
