package main

import (
	"errors"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
)

// counters counts what the inbox reports it did, so the example shows the middleware's own decisions rather than
// inferring them from the provider's side.
type counters struct {
	inbox.NopObserver
	claimed, skipped, takenOver atomic.Int64
	held, lost                  atomic.Int64 // see countLeaseErrors
}

// Claimed counts one attempt that the inbox let run.
func (c *counters) Claimed(string) { c.claimed.Add(1) }

// DuplicateSkipped counts one copy of a request that was already done.
func (c *counters) DuplicateSkipped(string) { c.skipped.Add(1) }

// LeaseTakenOver counts one attempt that started because an earlier holder's lease had run out.
func (c *counters) LeaseTakenOver(string) { c.takenOver.Add(1) }

// countLeaseErrors returns a router middleware, to install outside the inbox's, that counts the lease errors the
// inbox returns: a copy sent back because another holder's lease was live (ErrLeaseHeld), and a holder whose
// result was refused because its lease had been taken over (ErrLeaseLost). Both end in a nack and a redelivery.
func (c *counters) countLeaseErrors(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		out, err := h(msg)
		switch {
		case errors.Is(err, inbox.ErrLeaseHeld):
			c.held.Add(1)
		case errors.Is(err, inbox.ErrLeaseLost):
			c.lost.Add(1)
		}
		return out, err
	}
}
