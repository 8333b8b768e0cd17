package inbox

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

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

// storedMessage is a produced message as the produced column keeps it. The column is jsonb, so an operator can read
// it with jsonb operators; the encoding still keeps every byte Watermill allows. Payload is base64 in JSON.
// Metadata holds the entries JSON text carries as they are; RawMetadata the others (a NUL, which jsonb refuses, or
// bytes that are not UTF-8, which JSON would replace), with key and value in base64.
type storedMessage struct {
	UUID        string            `json:"uuid"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	RawMetadata map[string]string `json:"metadata_base64,omitempty"`
	Payload     []byte            `json:"payload"`
}

// encodeProduced returns msgs as the produced column keeps them, or nil (SQL NULL) when there are none.
func encodeProduced(consumer, id string, msgs []*message.Message) ([]byte, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	stored := make([]storedMessage, len(msgs))
	for i, m := range msgs {
		if m == nil {
			return nil, fmt.Errorf("inbox: encode produced messages of %s/%s: %w: message %d is nil", consumer, id, ErrProducedUnstorable, i)
		}
		s := storedMessage{UUID: m.UUID, Payload: m.Payload}
		for k, v := range m.Metadata {
			if textSafe(k) && textSafe(v) {
				if s.Metadata == nil {
					s.Metadata = make(map[string]string, len(m.Metadata))
				}
				s.Metadata[k] = v
				continue
			}
			if s.RawMetadata == nil {
				s.RawMetadata = make(map[string]string)
			}
			s.RawMetadata[base64.StdEncoding.EncodeToString([]byte(k))] = base64.StdEncoding.EncodeToString([]byte(v))
		}
		stored[i] = s
	}
	raw, err := json.Marshal(stored)
	if err != nil {
		return nil, fmt.Errorf("inbox: encode produced messages of %s/%s: %w: %w", consumer, id, ErrProducedUnstorable, err)
	}
	return raw, nil
}

// textSafe reports whether s survives JSON text in a jsonb column unchanged.
func textSafe(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// decodeProduced turns the produced column back into messages of the shape they were produced with; nil (SQL NULL,
// no row) means none.
func decodeProduced(consumer, id string, raw []byte) ([]*message.Message, error) {
	if raw == nil {
		return nil, nil
	}
	var stored []storedMessage
	if err := json.Unmarshal(raw, &stored); err != nil {
		return nil, fmt.Errorf("inbox: decode produced messages of %s/%s: %w", consumer, id, err)
	}
	msgs := make([]*message.Message, len(stored))
	for i, s := range stored {
		m := message.NewMessage(s.UUID, s.Payload) // NewMessage gives it the empty metadata a handler's message has
		for k, v := range s.Metadata {
			m.Metadata[k] = v
		}
		for k, v := range s.RawMetadata {
			key, err := base64.StdEncoding.DecodeString(k)
			if err != nil {
				return nil, fmt.Errorf("inbox: decode produced messages of %s/%s: metadata key: %w", consumer, id, err)
			}
			value, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				return nil, fmt.Errorf("inbox: decode produced messages of %s/%s: metadata value: %w", consumer, id, err)
			}
			m.Metadata[string(key)] = string(value)
		}
		msgs[i] = m
	}
	return msgs, nil
}
