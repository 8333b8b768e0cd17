package testkit

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/observe"
)

// The fingerprint cases (inbox.WithFingerprint): each message carries its event type in the metadata key "type",
// which the fingerprint names, so that "paid" and "refunded" under one event ID are two events.

// conflicts records the FingerprintConflict events an inbox reports.
type conflicts struct {
	observe.NopObserver
	recorded[observe.ConflictEvent]
}

func (c *conflicts) FingerprintConflict(_ context.Context, e observe.ConflictEvent) { c.add(e) }

// typed returns a message of eventID whose event type is typ.
func typed(eventID, typ string) *message.Message {
	msg := newMsg(eventID)
	msg.Metadata.Set("type", typ)
	return msg
}

// fingerprintModes are the options of a case's inbox with fingerprints over "type", and the modes' options.
var fingerprintModes = map[string][]inbox.Option{
	"transaction": nil,
	"batch":       {inbox.WithBatch(20*time.Millisecond, 8)},
	"lease":       {inbox.WithLease(time.Minute)},
}

// effect is the case's handler in mode: the credit, in the inbox's transaction; in lease mode, which has none, a
// call out that credits the account in a transaction of its own, as a provider would.
func (b *bundle) effect(mode string, calls *atomic.Int64) message.HandlerFunc {
	if mode != "lease" {
		return b.Credit(100, calls)
	}
	return func(msg *message.Message) ([]*message.Message, error) {
		calls.Add(1)
		_, err := b.exec(msg.Context(), `UPDATE `+b.Accounts+` SET balance = balance + 100 WHERE id = 1`)
		return nil, err
	}
}

// fingerprintCase is one mode's part of a fingerprint case: its tables, and its handler under an inbox with
// fingerprints over "type" that reports its conflicts to obs.
type fingerprintCase struct {
	*bundle
	obs   *conflicts
	calls atomic.Int64
	h     message.HandlerFunc
}

// inEveryMode runs run for each mode as a subtest, with an inbox built with f and opts.
func inEveryMode(t *testing.T, conn Conn, f inbox.Fingerprint, opts []inbox.Option, run func(t *testing.T, c *fingerprintCase)) {
	for mode, modeOpts := range fingerprintModes {
		t.Run(mode, func(t *testing.T) {
			c := &fingerprintCase{bundle: newBundle(t, conn, false), obs: &conflicts{}}
			f.MetadataKeys = []string{"type"}
			all := append(append(append([]inbox.Option(nil), opts...), modeOpts...), inbox.WithFingerprint(f), inbox.WithObserver(c.obs))
			c.h = c.inbox(t, all...).Middleware(c.effect(mode, &c.calls))
			run(t, c)
		})
	}
}

// aReusedIDIsReportedAndSkipped: in every mode, a copy of an applied message is skipped silently, and another
// message under the same event ID is skipped and reported with both fingerprints; its handler never runs.
func aReusedIDIsReportedAndSkipped(t *testing.T, conn Conn) {
	inEveryMode(t, conn, inbox.Fingerprint{}, nil, func(t *testing.T, c *fingerprintCase) {
		for _, typ := range []string{"paid", "paid", "refunded", "refunded"} {
			_, err := c.h(typed("evt-1", typ))
			require.NoError(t, err, "a copy and a conflict are both acked")
		}
		require.EqualValues(t, 1, c.calls.Load(), "only the first message runs")
		require.EqualValues(t, 100, c.Balance(t))
		got := c.obs.Events()
		require.Len(t, got, 2, "each copy of the refunded event is a conflict; the copy of the paid one is not")
		for _, e := range got {
			require.Equal(t, "evt-1", e.EventID)
			require.Equal(t, consumer, e.Consumer)
			require.NotEqual(t, e.Stored, e.Received)
			require.Len(t, e.Stored, 16, "eight bytes, in hex")
			require.False(t, e.DeadLettered)
			require.Equal(t, "refunded", e.Message.Metadata.Get("type"))
		}
		require.Equal(t, 2, c.Logs.Count("Inbox found an event ID reused for another message"))
	})
}

// aReusedIDIsDeadLetteredWhenAsked: with Fingerprint.DeadLetter, the conflicting copy goes to the dead-letter
// topic with its reason, in every mode, and the applied message's effect stays as it was.
func aReusedIDIsDeadLetteredWhenAsked(t *testing.T, conn Conn) {
	dlq := &RecordingPublisher{} // each mode's case has a consumer table of its own, and reads its own dead letter
	var seen int
	inEveryMode(t, conn, inbox.Fingerprint{DeadLetter: true}, []inbox.Option{inbox.WithDeadLetter(dlq, "dead")}, func(t *testing.T, c *fingerprintCase) {
		for _, typ := range []string{"paid", "paid"} {
			_, err := c.h(typed("evt-1", typ))
			require.NoError(t, err)
		}
		require.Len(t, dlq.Messages("dead"), seen, "a copy is no conflict")
		_, err := c.h(typed("evt-1", "refunded"))
		require.NoError(t, err, "the conflict is acked once it is dead-lettered")
		dead := dlq.Messages("dead")
		require.Len(t, dead, seen+1)
		seen++
		require.Equal(t, "refunded", dead[seen-1].Metadata.Get("type"))
		require.Contains(t, dead[seen-1].Metadata.Get(middleware.ReasonForPoisonedKey), inbox.ErrFingerprintConflict.Error())
		require.Len(t, c.obs.Events(), 1)
		require.True(t, c.obs.Events()[0].DeadLettered)
		require.EqualValues(t, 1, c.calls.Load())
		require.EqualValues(t, 100, c.Balance(t))
	})
}

// rowsWithoutAFingerprintNeverConflict: rows written before the option was turned on have no fingerprint, and a
// copy of them is a plain duplicate, whatever it says, in every mode. The first message of the inbox with the
// option adds the column (WithAutoMigrate's default); a message applied after that is fingerprinted.
func rowsWithoutAFingerprintNeverConflict(t *testing.T, conn Conn) {
	for mode, opts := range fingerprintModes {
		t.Run(mode, func(t *testing.T) {
			b := newBundle(t, conn, true)
			var calls atomic.Int64
			_, err := b.inbox(t, opts...).Middleware(b.effect(mode, &calls))(typed("evt-1", "paid"))
			require.NoError(t, err)

			obs := &conflicts{}
			h := b.inbox(t, append(opts, inbox.WithFingerprint(inbox.Fingerprint{MetadataKeys: []string{"type"}}),
				inbox.WithObserver(obs))...).Middleware(b.effect(mode, &calls))
			_, err = h(typed("evt-1", "refunded"))
			require.NoError(t, err)
			require.Empty(t, obs.Events(), "the row has no fingerprint: the copy is a duplicate")
			require.Equal(t, 1, b.Logs.Count("skipped duplicate"))

			_, err = h(typed("evt-2", "paid"))
			require.NoError(t, err)
			_, err = h(typed("evt-2", "refunded"))
			require.NoError(t, err)
			require.Len(t, obs.Events(), 1, "a row written with the option has a fingerprint")
			require.EqualValues(t, 2, calls.Load())
			require.EqualValues(t, 200, b.Balance(t))
		})
	}

	var calls atomic.Int64
	// An inbox that may not migrate, over a table that lacks the column, holds its messages back naming it.
	fresh := newBundle(t, conn, true)
	ib := fresh.inbox(t, inbox.WithFingerprint(inbox.Fingerprint{}), inbox.WithAutoMigrate(false),
		inbox.WithRejectDelay(time.Millisecond))
	_, err := ib.Middleware(fresh.Credit(1, &calls))(typed("evt-1", "paid"))
	require.ErrorIs(t, err, inbox.ErrSchemaDrift)
	require.ErrorContains(t, err, "column fingerprint")
	for range 2 {
		require.NoError(t, conn.Database().Migrate(context.Background(), inbox.WithTable(fresh.Table),
			inbox.WithFingerprint(inbox.Fingerprint{})), "Migrate adds the column, and finds it there the second time")
	}
}

// racingReusesApplyOnce: copies of one event ID with different payloads, racing from many goroutines, apply one of
// them once; each of the others is reported as a conflict.
func racingReusesApplyOnce(t *testing.T, conn Conn) {
	inEveryMode(t, conn, inbox.Fingerprint{}, nil, func(t *testing.T, c *fingerprintCase) {
		const racers = 6
		start := make(chan struct{})
		errs := make(chan error, racers)
		for n := range racers {
			go func() {
				<-start
				var err error
				for range 1000 { // a lease held by a racer is a nack: deliver again, as the broker would
					if _, err = c.h(typed("evt-1", string(rune('a'+n)))); !errors.Is(err, inbox.ErrLeaseHeld) {
						break
					}
				}
				errs <- err
			}()
		}
		close(start)
		for range racers {
			require.NoError(t, <-errs)
		}
		require.EqualValues(t, 1, c.calls.Load(), "one of the racers applies")
		require.EqualValues(t, 100, c.Balance(t))
		require.Len(t, c.obs.Events(), racers-1, "every other racer is a conflict")
	})
}
