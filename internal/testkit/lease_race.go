package testkit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

// Lease mode between consumers: two Inboxes of one consumer never hold a lease together, a transaction-mode copy
// waits for a lease-mode holder, and the keys of different messages never collide.

func twoInboxesOfAConsumerNeverHoldALeaseTogether(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	var holders, maxHolders, calls atomic.Int64
	handler := func(*message.Message) ([]*message.Message, error) {
		calls.Add(1)
		n := holders.Add(1)
		for {
			m := maxHolders.Load()
			if n <= m || maxHolders.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond) // a call out, during which the other copies try
		holders.Add(-1)
		return nil, nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 2 { // two consumer processes, each with its own Inbox
		h := b.inbox(t, inbox.WithLease(time.Minute)).Middleware(handler)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					_, err := h(newMsg("evt-1"))
					if !errors.Is(err, inbox.ErrLeaseHeld) {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, maxHolders.Load(), "at no moment did two consumers hold the lease")
	require.EqualValues(t, 1, calls.Load())
	state, _ := b.row(t, "evt-1")
	require.Equal(t, "done", state)
}

func aTransactionModeCopyWaitsForALeaseModeHolder(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	leased, transactional := b.inbox(t, inbox.WithLease(time.Minute)), b.inbox(t) // one table and consumer
	holding := make(chan struct{})
	gate, release := Gate(t)
	first := make(chan error, 1)
	go func() {
		_, err := leased.Middleware(func(*message.Message) ([]*message.Message, error) {
			close(holding)
			<-gate
			return nil, nil
		})(newMsg("evt-1"))
		first <- err
	}()
	<-holding

	var calls atomic.Int64
	h := transactional.Middleware(b.Credit(100, &calls))
	_, err := h(newMsg("evt-1"))
	require.ErrorIs(t, err, inbox.ErrLeaseHeld, "an unfinished lease-mode row is not a duplicate")
	release()
	require.NoError(t, <-first)
	_, err = h(newMsg("evt-1"))
	require.NoError(t, err)
	require.Zero(t, calls.Load(), "once done, it is")
}

func theLeaseKeysOfDifferentMessagesNeverCollide(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	keyOf := func(consumerName, id, step string) string {
		var key string
		_, err := b.inbox(t, inbox.WithConsumer(consumerName), inbox.WithLease(time.Minute)).Middleware(func(msg *message.Message) ([]*message.Message, error) {
			if key = leaseOf(t, msg).IdempotencyKey(); step != "" {
				key = leaseOf(t, msg).StepKey(step)
			}
			return nil, nil
		})(newMsg(id))
		require.NoError(t, err)
		return key
	}
	require.NotEqual(t, keyOf("payments", "eu:42", ""), keyOf("payments:eu", "42", ""),
		"a separator inside a consumer name or an event ID cannot make two messages share a key")
	require.NotEqual(t, keyOf("payments", "eu:43:charge", ""), keyOf("payments", "eu:43", "charge"),
		"nor one event's step key equal another event's key")
}

func forgetKeepsALiveLeaseUnlessForced(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	holding := make(chan struct{})
	gate, release := Gate(t)
	held := make(chan error, 1)
	go func() {
		_, err := b.inbox(t, inbox.WithLease(time.Hour)).Middleware(func(*message.Message) ([]*message.Message, error) {
			close(holding)
			<-gate
			return nil, nil
		})(newMsg("evt-1"))
		held <- err
	}()
	<-holding
	ctx := context.Background()
	_, err := conn.Database().Forget(ctx, inbox.ForgetParams{Consumer: consumer, ID: "evt-1"}, inbox.WithTable(b.Table))
	require.ErrorIs(t, err, inbox.ErrLeaseHeld)
	require.EqualValues(t, 1, b.rows(t))

	row, err := conn.Database().Forget(ctx, inbox.ForgetParams{Consumer: consumer, ID: "evt-1", Force: true}, inbox.WithTable(b.Table))
	require.NoError(t, err)
	require.Equal(t, "processing", row.State)
	require.Equal(t, 1, row.Attempts)
	require.Zero(t, b.rows(t))
	release()
	require.ErrorIs(t, <-held, inbox.ErrLeaseLost, "the holder whose row was forced away learns it on its next write")
}
