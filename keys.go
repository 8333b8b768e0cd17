package inbox

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// Domain tags of the key derivations. They are part of the keys: changing one changes every key, so a new
// derivation gets a new tag and the old ones stay as they are.
const (
	idempotencyKeyTag = "watermill-inbox idempotency key v1"
	stepKeyTag        = "watermill-inbox step key v1"
)

// IdempotencyKey returns the idempotency key of one event for one consumer, as lease mode hands it to a handler
// (Lease.IdempotencyKey): 64 lower-case hexadecimal characters, within the limits providers put on such keys.
//
// Distinct (consumer, eventID) pairs get distinct keys, whatever characters the names hold: consumer "payments"
// with event "eu:42" and consumer "payments:eu" with event "42" do not share a key. A key is never equal to a
// StepKey. The derivation is fixed: the same consumer and event ID give the same key in every version of this
// package, so keys already sent to a provider stay valid across upgrades.
//
// The key is the SHA-256 digest, in hexadecimal, of three parts written one after another, each as its length in
// bytes (8 bytes, big-endian) followed by its bytes: the tag "watermill-inbox idempotency key v1", the consumer,
// the event ID. An operator can recompute it, for instance in Python:
//
//	parts = [b"watermill-inbox idempotency key v1", consumer.encode(), event_id.encode()]
//	hashlib.sha256(b"".join(len(p).to_bytes(8, "big") + p for p in parts)).hexdigest()
func IdempotencyKey(consumer, eventID string) string {
	return digest(idempotencyKeyTag, consumer, eventID)
}

// StepKey returns the key of one step of a handler that makes several calls for one event, such as "charge" and
// "receipt", as Lease.StepKey does: stable like IdempotencyKey, different per step, and never equal to another
// event's IdempotencyKey or StepKey. It is derived like IdempotencyKey, with four parts: the tag
// "watermill-inbox step key v1", the consumer, the event ID, the step.
func StepKey(consumer, eventID, step string) string {
	return digest(stepKeyTag, consumer, eventID, step)
}

// digest hashes the parts, each prefixed with its length, so that no two lists of parts are written alike.
func digest(parts ...string) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}
