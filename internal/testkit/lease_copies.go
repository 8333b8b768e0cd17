package testkit

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/observe"
)

// skipCounter counts the claims and the skipped copies an inbox reports.
type skipCounter struct {
	observe.NopObserver
	claims, duplicates atomic.Int64
}

func (o *skipCounter) Claimed(ctx context.Context, _ observe.ClaimEvent) context.Context {
	o.claims.Add(1)
	return ctx
}

func (o *skipCounter) DuplicateSkipped(context.Context, observe.SkipEvent) { o.duplicates.Add(1) }

func leaseModeSkipsACopyOfADoneMessageAndAcksIt(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	obs := &skipCounter{}
	var calls atomic.Int64
	h := b.inbox(t, inbox.WithLease(time.Minute), inbox.WithObserver(obs)).
		Middleware(func(*message.Message) ([]*message.Message, error) { calls.Add(1); return nil, nil })
	for range 3 {
		_, err := h(newMsg("evt-1"))
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, calls.Load())
	require.EqualValues(t, 1, obs.claims.Load())
	require.EqualValues(t, 2, obs.duplicates.Load())
	require.Equal(t, 2, b.Logs.Count("skipped duplicate"))
}

func leaseModeNacksACopyWhileTheLeaseIsLiveAfterABoundedDelay(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	holding := make(chan struct{})
	gate, release := Gate(t)
	var calls atomic.Int64
	h := b.inbox(t, inbox.WithLease(time.Minute)).Middleware(func(*message.Message) ([]*message.Message, error) {
		if calls.Add(1) == 1 {
			close(holding)
			<-gate
		}
		return nil, nil
	})
	first := make(chan error, 1)
	go func() { _, err := h(newMsg("evt-1")); first <- err }()
	<-holding

	start := time.Now()
	_, err := h(newMsg("evt-1"))
	waited := time.Since(start)
	require.ErrorIs(t, err, inbox.ErrLeaseHeld, "neither run nor acked: the holder may still succeed")
	require.EqualValues(t, 1, calls.Load())
	require.GreaterOrEqual(t, waited, 100*time.Millisecond, "the nack waits: no hot loop")
	release()
	require.NoError(t, <-first)
	state, _ := b.row(t, "evt-1")
	require.Equal(t, "done", state)
}

func leaseModesIdempotencyKeyIsStableAcrossAttemptsAndCopies(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	var keys, charges, receipts []string
	var calls atomic.Int64
	h := b.inbox(t, inbox.WithLease(time.Minute)).Middleware(func(msg *message.Message) ([]*message.Message, error) {
		l := leaseOf(t, msg)
		keys = append(keys, l.IdempotencyKey())
		charges = append(charges, l.StepKey("charge"))
		receipts = append(receipts, l.StepKey("receipt"))
		if calls.Add(1) == 1 {
			return nil, errors.New("provider timed out")
		}
		return nil, nil
	})
	_, err := h(newMsg("evt-1"))
	require.Error(t, err)
	_, err = h(newMsg("evt-1")) // another copy, another UUID
	require.NoError(t, err)

	key := inbox.IdempotencyKey(consumer, "evt-1")
	require.Equal(t, []string{key, key}, keys)
	require.Equal(t, charges[0], charges[1])
	require.Equal(t, receipts[0], receipts[1])
	require.NotEqual(t, charges[0], receipts[0], "each step has its own key")

	_, err = b.inbox(t, inbox.WithConsumer("audit"), inbox.WithLease(time.Minute)).Middleware(func(msg *message.Message) ([]*message.Message, error) {
		require.Equal(t, inbox.IdempotencyKey("audit", "evt-1"), leaseOf(t, msg).IdempotencyKey(), "another consumer of the event has its own key")
		require.NotEqual(t, key, leaseOf(t, msg).IdempotencyKey())
		return nil, nil
	})(newMsg("evt-1"))
	require.NoError(t, err)
}
