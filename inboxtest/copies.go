package inboxtest

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// DeliverCopies hands copies of each event to h at once, from as many goroutines, as a broker redelivering them
// to several consumers would. A copy that fails is delivered again, as after a nack, until h accepts it. It
// returns the errors other than ErrLeaseHeld, which is the nack lease mode is built on.
func DeliverCopies(t testing.TB, h message.HandlerFunc, ids []string, copies int) []error {
	return testkit.DeliverCopies(t, h, ids, copies)
}

// DeliverTogether hands one copy of each of ids to h at once, each from a goroutine of its own, and returns, by ID,
// what each call returned once all have.
func DeliverTogether(h message.HandlerFunc, ids []string) (map[string][]*message.Message, map[string]error) {
	return testkit.DeliverTogether(h, ids)
}

// EventIDs returns n event IDs with prefix.
func EventIDs(prefix string, n int) []string { return testkit.EventIDs(prefix, n) }

// CallCounter counts an external call per event.
type CallCounter = testkit.CallCounter

// BeginCounter is a pool that counts the transactions begun on it.
type BeginCounter = testkit.BeginCounter

// Gate returns a channel that a held handler waits on, and a function that closes it, once however often it is
// called. The function is also a cleanup of t: a failed assertion before the test lets the handler go must not
// leave it waiting for good, with what it holds (a transaction, a row lock, a pool connection), since the test's
// own cleanups (DROP TABLE, closing a pgx pool) would wait for that, and an open transaction holds back the
// database's oldest snapshot for every other test.
func Gate(t testing.TB) (gate <-chan struct{}, release func()) { return testkit.Gate(t) }

// RedeliverWhile delivers copies of id to h from n goroutines, each one again as soon as the last returned, as a
// broker redelivers a nacked message, until the returned stop is called. stop waits for the copies in flight and
// reports how many h accepted and the last error it returned.
func RedeliverWhile(h message.HandlerFunc, id string, n int) (stop func() (accepted int64, lastErr error)) {
	return testkit.RedeliverWhile(h, id, n)
}
