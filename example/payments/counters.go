package main

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/observe"
)

// counters counts what the inbox reports it did, so the example shows the middleware's own decisions rather than
// inferring them from the provider's side.
type counters struct {
	observe.NopObserver
	claimed, skipped, takenOver atomic.Int64
	held                        atomic.Int64 // see countLeaseErrors
	lost                        atomic.Int64 // see LeaseLost
}

// Claimed counts one attempt that the inbox let run.
func (c *counters) Claimed(ctx context.Context, _ observe.ClaimEvent) context.Context {
	c.claimed.Add(1)
	return ctx
}

// DuplicateSkipped counts one copy of a request that was already done.
func (c *counters) DuplicateSkipped(context.Context, observe.SkipEvent) { c.skipped.Add(1) }

// LeaseTakenOver counts one attempt that started because an earlier holder's lease had run out.
func (c *counters) LeaseTakenOver(context.Context, observe.LeaseEvent) { c.takenOver.Add(1) }

// LeaseLost counts one holder whose result was refused because its lease had been taken over.
func (c *counters) LeaseLost(context.Context, observe.LeaseEvent) { c.lost.Add(1) }

// countLeaseErrors returns a router middleware, to install outside the inbox's, that counts the copies the inbox
// sent back because another holder's lease was live (ErrLeaseHeld): a wait, not a fault, so the inbox reports it
// to the router only, and it ends in a nack and a redelivery.
func (c *counters) countLeaseErrors(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		out, err := h(msg)
		if errors.Is(err, inbox.ErrLeaseHeld) {
			c.held.Add(1)
		}
		return out, err
	}
}
