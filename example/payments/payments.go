package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/example/internal/kafkademo"
)

// request is one payment request on the requests topic, identified by the ID its producer gave it.
type request struct {
	ID string // the message UUID, which EventIDPublisher makes the event ID
	charge
}

// planRequests returns n payment requests with distinct payment IDs and amounts.
func planRequests(n int) []request {
	rs := make([]request, n)
	for i := range rs {
		rs[i] = request{ID: watermill.NewUUID(), charge: charge{PaymentID: fmt.Sprintf("pay-%03d", i+1), Amount: int64(500 + 25*i)}}
	}
	return rs
}

// publishRequests publishes every request to partition i mod partitions, then resends of them again to the next
// partition. A copy on another partition is handled at the same time as its original, by another goroutine of the
// consumer, which is what makes a lease necessary: an offset orders the records of one partition only.
func publishRequests(pub message.Publisher, topic string, rs []request, resends int, partitions int32) error {
	publish := func(r request, partition int) error {
		payload, err := json.Marshal(r.charge)
		if err != nil {
			return err
		}
		msg := message.NewMessage(r.ID, payload)
		msg.Metadata.Set(kafkademo.PartitionKey, strconv.Itoa(partition%int(partitions)))
		if err := pub.Publish(topic, msg); err != nil {
			return fmt.Errorf("publish request %s: %w", r.PaymentID, err)
		}
		return nil
	}
	for i, r := range rs {
		if err := publish(r, i); err != nil {
			return err
		}
	}
	for i := range resends {
		j := i * len(rs) / resends // 0 first: the request whose call hangs always has a copy
		if err := publish(rs[j], j+1); err != nil {
			return err
		}
	}
	return nil
}

// call is one call the handler made to the provider, as the handler saw it.
type call struct {
	PaymentID     string
	Attempt       int
	Key           string
	PreviousError string
	ChargeID      string
	Replayed      bool
	Err           string
}

// calls records the handler's calls, for the report.
type calls struct {
	mu   sync.Mutex
	list []call
}

func (c *calls) add(x call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.list = append(c.list, x)
}

// of returns the calls made for one payment, in the order they returned.
func (c *calls) of(paymentID string) []call {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []call
	for _, x := range c.list {
		if x.PaymentID == paymentID {
			out = append(out, x)
		}
	}
	return out
}

// payments is the payments service's handler, with its way to the provider and its record of calls.
type payments struct {
	provider providerClient
	calls    *calls
}

// charge charges one payment request, in lease mode. No transaction is held across the call: the inbox has
// recorded the request as 'processing' under a lease, and marks it 'done' after this returns, if the lease is
// still this handler's. The idempotency key is what makes a second attempt safe: it is the same on every attempt
// and every copy, so whichever holder calls, the provider charges once. An attempt after the first needs no
// special path here, because calling again with the key is how this provider reports what the first call did.
func (p payments) charge(msg *message.Message) error {
	ctx := msg.Context()
	lease, ok := inbox.LeaseFromContext(ctx)
	if !ok {
		return errors.New("payments: no lease; is inbox.Middleware installed with WithLease?")
	}
	var ch charge
	if err := json.Unmarshal(msg.Payload, &ch); err != nil {
		return fmt.Errorf("payments: decode request %s: %w", msg.UUID, err)
	}

	reply, err := p.provider.charge(ctx, lease.IdempotencyKey(), ch)
	c := call{PaymentID: ch.PaymentID, Attempt: lease.Attempt(), Key: lease.IdempotencyKey(),
		PreviousError: lease.PreviousError(), ChargeID: reply.ID, Replayed: reply.Replayed}
	if err != nil {
		c.Err = err.Error()
	}
	p.calls.add(c)
	if err != nil {
		return fmt.Errorf("payments: charge %s: %w", ch.PaymentID, err)
	}
	return nil
}
