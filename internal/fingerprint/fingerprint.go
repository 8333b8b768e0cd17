// Package fingerprint sums up what a message says, so that the inbox can tell a copy of a message from another
// message that reuses its event ID.
package fingerprint

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// Size is the length of a fingerprint in bytes. Eight bytes of SHA-256 make an accidental match of two different
// messages under one event ID a chance of one in 2^64: the fingerprint tells copies apart, it does not
// authenticate them.
const Size = 8

// Of returns the fingerprint of a message's payload and of the values of keys in its metadata, in the order keys
// names them. Each part is preceded by its length, so that no two different messages sum to the same input: a
// byte moved from the payload into a value changes the sum. A key the message lacks counts as an empty value.
func Of(payload []byte, metadata func(key string) string, keys []string) []byte {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	part := func(b []byte) {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
		h.Write(b)
	}
	part(payload)
	for _, k := range keys {
		part([]byte(k))
		part([]byte(metadata(k)))
	}
	return h.Sum(nil)[:Size]
}

// Conflicts reports whether a copy whose fingerprint is theirs conflicts with the stored one: both are known and
// they differ. A row written without a fingerprint (stored is empty) conflicts with nothing.
func Conflicts(stored, theirs []byte) bool {
	return len(stored) > 0 && len(theirs) > 0 && !bytes.Equal(stored, theirs)
}

// String spells a fingerprint for logs and errors: hexadecimal, or "none".
func String(f []byte) string {
	if len(f) == 0 {
		return "none"
	}
	return hex.EncodeToString(f)
}
