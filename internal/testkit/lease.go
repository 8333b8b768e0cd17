package testkit

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

func leaseOf(t *testing.T, msg *message.Message) *inbox.Lease {
	t.Helper()
	l, ok := inbox.LeaseFromContext(msg.Context())
	require.True(t, ok, "a lease-mode handler has a lease in its context")
	return l
}

func leaseReleasesAndRetries(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	type seen struct {
		attempt        int
		key, state     string
		storedAttempts int
	}
	var runs []seen
	h := b.inbox(t, inbox.WithLease(time.Minute)).Middleware(func(msg *message.Message) ([]*message.Message, error) {
		l := leaseOf(t, msg)
		state, attempts := b.row(t, "evt-1") // read on another connection: the claim committed before the call out
		runs = append(runs, seen{l.Attempt(), l.IdempotencyKey(), state, attempts})
		if len(runs) == 1 {
			return nil, errors.New("provider unavailable")
		}
		return nil, nil
	})

	_, err := h(newMsg("evt-1"))
	require.ErrorContains(t, err, "provider unavailable")
	state, attempts := b.row(t, "evt-1")
	require.Equal(t, "released", state, "a failed attempt hands the lease back at once")
	require.EqualValues(t, 1, attempts)

	_, err = h(newMsg("evt-1"))
	require.NoError(t, err)
	require.Len(t, runs, 2)
	key := inbox.IdempotencyKey(consumer, "evt-1")
	require.Equal(t, seen{1, key, "processing", 1}, runs[0])
	require.Equal(t, seen{2, key, "processing", 2}, runs[1])
	state, attempts = b.row(t, "evt-1")
	require.Equal(t, "done", state)
	require.EqualValues(t, 2, attempts)

	_, err = h(newMsg("evt-1"))
	require.NoError(t, err)
	require.Len(t, runs, 2, "a done message is not run again")
}

func leaseExhausted(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	dlq := &RecordingPublisher{}
	var calls atomic.Int64
	h := b.inbox(t, inbox.WithLease(time.Hour), inbox.WithMaxAttempts(2), inbox.WithDeadLetter(dlq, "payments.dlq")).
		Middleware(func(*message.Message) ([]*message.Message, error) {
			calls.Add(1)
			return nil, errors.New("insufficient funds")
		})

	_, err := h(newMsg("evt-1"))
	require.Error(t, err, "the first failure is nacked for another attempt")
	require.Empty(t, dlq.Messages("payments.dlq"))
	_, err = h(newMsg("evt-1"))
	require.NoError(t, err, "the last failure is dead-lettered and acked")
	dead := dlq.Messages("payments.dlq")
	require.Len(t, dead, 1)
	require.Equal(t, "2", dead[0].Metadata.Get(inbox.AttemptsKey))
	require.Contains(t, dead[0].Metadata.Get(middleware.ReasonForPoisonedKey), "attempts exhausted: 2 of 2, last error: insufficient funds")
	state, attempts := b.row(t, "evt-1")
	require.Equal(t, "failed", state)
	require.EqualValues(t, 2, attempts)

	_, err = h(newMsg("evt-1"))
	require.NoError(t, err, "a later copy is acked")
	require.EqualValues(t, 2, calls.Load(), "without running")
	require.Len(t, dlq.Messages("payments.dlq"), 1, "and without a second dead letter")
}

func leaseTakeover(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	holding := make(chan struct{})
	gate, release := Gate(t)
	var calls atomic.Int64
	attempts := make([]int, 2)
	h := b.inbox(t, inbox.WithLease(time.Hour)).Middleware(func(msg *message.Message) ([]*message.Message, error) {
		n := calls.Add(1)
		if n <= 2 {
			attempts[n-1] = leaseOf(t, msg).Attempt()
		}
		if n == 1 { // the first holder hangs past its lease
			close(holding)
			<-gate
		}
		return nil, nil
	})
	first := make(chan error, 1)
	go func() { _, err := h(newMsg("evt-1")); first <- err }()
	<-holding

	_, err := h(newMsg("evt-1"))
	require.ErrorIs(t, err, inbox.ErrLeaseHeld, "a live lease is waited for")
	require.EqualValues(t, 1, calls.Load())

	// The hour passes for this row: its lease runs out by the database clock.
	n := b.mustExec(t, `UPDATE `+b.Table+` SET locked_until = `+b.d.Ago(time.Second)+` WHERE `+b.d.Row(b.Table), consumer, "evt-1")
	require.EqualValues(t, 1, n)
	_, err = h(newMsg("evt-1"))
	require.NoError(t, err, "the next copy takes the expired lease over")
	require.EqualValues(t, 2, calls.Load())
	state, stored := b.row(t, "evt-1")
	require.Equal(t, "done", state)
	require.EqualValues(t, 2, stored)

	release()
	require.ErrorIs(t, <-first, inbox.ErrLeaseLost, "the late holder's completion is fenced off")
	require.Equal(t, []int{1, 2}, attempts)
	state, stored = b.row(t, "evt-1")
	require.Equal(t, "done", state, "the new holder's result stands")
	require.EqualValues(t, 2, stored)
}

func modeSwitch(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	_, err := b.inbox(t, inbox.WithLease(time.Minute)).Middleware(func(*message.Message) ([]*message.Message, error) {
		return nil, errors.New("provider unavailable")
	})(newMsg("evt-1"))
	require.Error(t, err)
	state, _ := b.row(t, "evt-1")
	require.Equal(t, "released", state)

	// The consumer is switched to transaction mode; the redelivery must be applied, not held forever.
	var calls atomic.Int64
	h := b.inbox(t, inbox.WithRejectDelay(time.Hour)).Middleware(b.Credit(100, &calls))
	for range 2 {
		_, err = h(newMsg("evt-1"))
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, calls.Load())
	require.EqualValues(t, 100, b.Balance(t))
	require.EqualValues(t, 1, b.rows(t))
	state, _ = b.row(t, "evt-1")
	require.Equal(t, "done", state)
}
