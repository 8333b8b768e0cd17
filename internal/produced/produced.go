// Package produced stores the messages a handler produced in the inbox row's produced column, and reads them back
// byte for byte for the copies that follow.
package produced

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
)

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

// Encode returns msgs as the produced column keeps them, or nil (SQL NULL) when there are none. An error means the
// messages cannot be stored.
func Encode(msgs []*message.Message) ([]byte, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	stored := make([]storedMessage, len(msgs))
	for i, m := range msgs {
		if m == nil {
			return nil, fmt.Errorf("message %d is nil", i)
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
	return json.Marshal(stored)
}

// textSafe reports whether s survives JSON text in a jsonb column unchanged.
func textSafe(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// Decode turns the produced column back into messages of the shape they were produced with; nil (SQL NULL, no row)
// means none.
func Decode(raw []byte) ([]*message.Message, error) {
	if raw == nil {
		return nil, nil
	}
	var stored []storedMessage
	if err := json.Unmarshal(raw, &stored); err != nil {
		return nil, err
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
				return nil, fmt.Errorf("metadata key: %w", err)
			}
			value, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				return nil, fmt.Errorf("metadata value: %w", err)
			}
			m.Metadata[string(key)] = string(value)
		}
		msgs[i] = m
	}
	return msgs, nil
}
