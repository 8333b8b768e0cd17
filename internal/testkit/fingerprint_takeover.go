package testkit

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

// aTakeoverChecksTheFingerprint: a copy with another fingerprint that would take over a row whose lease was
// released, whose lease ran out, or which lease mode left to an inbox switched to transaction mode, is a reused
// event ID as a copy of a finished row is: reported, skipped, and its handler never runs (so it never calls out
// with the first message's idempotency key). The row stays for the first message, whose copy is applied.
func aTakeoverChecksTheFingerprint(t *testing.T, conn Conn) {
	fp := inbox.WithFingerprint(inbox.Fingerprint{MetadataKeys: []string{"type"}})
	type run struct{ typ, key string }
	leaseInbox := func(b *bundle, obs *conflicts, runs *[]run, fail func(n int) error, lease time.Duration) message.HandlerFunc {
		var calls atomic.Int64
		return b.inbox(t, inbox.WithLease(lease), fp, inbox.WithObserver(obs)).Middleware(func(msg *message.Message) ([]*message.Message, error) {
			n := int(calls.Add(1))
			*runs = append(*runs, run{msg.Metadata.Get("type"), leaseOf(t, msg).IdempotencyKey()})
			return nil, fail(n)
		})
	}
	requireReported := func(t *testing.T, obs *conflicts) {
		t.Helper()
		got := obs.Events()
		require.Len(t, got, 1, "the copy with another fingerprint is reported")
		require.Equal(t, "refunded", got[0].Message.Metadata.Get("type"))
		require.NotEqual(t, got[0].Stored, got[0].Received)
	}

	t.Run("Released", func(t *testing.T) {
		b, obs := newBundle(t, conn, true), &conflicts{}
		var runs []run
		h := leaseInbox(b, obs, &runs, func(n int) error {
			if n == 1 {
				return errors.New("provider unavailable")
			}
			return nil
		}, time.Minute)
		_, err := h(typed("evt-1", "paid"))
		require.ErrorContains(t, err, "provider unavailable")
		_, err = h(typed("evt-1", "refunded"))
		require.NoError(t, err, "the conflicting copy is skipped")
		requireReported(t, obs)
		_, err = h(typed("evt-1", "paid"))
		require.NoError(t, err)
		require.Equal(t, []string{"paid", "paid"}, []string{runs[0].typ, runs[len(runs)-1].typ})
		require.Len(t, runs, 2, "the refunded message never ran: %v", runs)
		state, _ := b.row(t, "evt-1")
		require.Equal(t, "done", state)
	})

	t.Run("RanOut", func(t *testing.T) {
		b, obs := newBundle(t, conn, true), &conflicts{}
		var runs []run
		holding, gate := make(chan struct{}), make(chan struct{})
		h := leaseInbox(b, obs, &runs, func(n int) error {
			if n == 1 { // the first holder hangs past its lease
				close(holding)
				<-gate
			}
			return nil
		}, time.Hour)
		first := make(chan error, 1)
		go func() { _, err := h(typed("evt-1", "paid")); first <- err }()
		<-holding
		// The hour passes for this row: its lease runs out by the database clock.
		require.EqualValues(t, 1, b.mustExec(t, `UPDATE `+b.Table+` SET locked_until = `+b.d.Ago(time.Second)+` WHERE `+b.d.Row(b.Table), consumer, "evt-1"))
		_, err := h(typed("evt-1", "refunded"))
		require.NoError(t, err, "the conflicting copy is skipped")
		requireReported(t, obs)
		close(gate)
		require.NoError(t, <-first, "the first holder's lease was not taken: it completes")
		require.Len(t, runs, 1, "the refunded message never ran")
		state, _ := b.row(t, "evt-1")
		require.Equal(t, "done", state)
	})

	t.Run("LeftByLeaseModeToTransactionMode", func(t *testing.T) {
		b, obs := newBundle(t, conn, true), &conflicts{}
		var runs []run
		h := leaseInbox(b, obs, &runs, func(int) error { return errors.New("provider unavailable") }, time.Minute)
		_, err := h(typed("evt-1", "paid"))
		require.Error(t, err)
		// The consumer is switched to transaction mode.
		var calls atomic.Int64
		h = b.inbox(t, fp, inbox.WithObserver(obs)).Middleware(b.Credit(100, &calls))
		_, err = h(typed("evt-1", "refunded"))
		require.NoError(t, err, "the conflicting copy is skipped")
		requireReported(t, obs)
		require.Zero(t, calls.Load(), "the refunded message never ran")
		_, err = h(typed("evt-1", "paid"))
		require.NoError(t, err)
		require.EqualValues(t, 1, calls.Load())
		require.EqualValues(t, 100, b.Balance(t))
	})
}
