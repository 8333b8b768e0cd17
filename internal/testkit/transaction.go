package testkit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/observe"
)

func appliesOnceAndSkipsTheDuplicate(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	var calls atomic.Int64
	h := b.inbox(t).Middleware(b.Credit(100, &calls))
	for range 3 {
		_, err := h(newMsg("evt-1"))
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, calls.Load(), "the duplicates must not run the handler")
	require.EqualValues(t, 100, b.Balance(t))
	require.EqualValues(t, 1, b.rows(t))
	state, _ := b.row(t, "evt-1")
	require.Equal(t, "done", state)
	skips := b.Logs.Find("skipped duplicate")
	require.Len(t, skips, 2)
	require.Equal(t, "info", skips[0].Level, "a duplicate is no error: the inbox works as it should")
	require.Equal(t, consumer, skips[0].Fields["consumer"])
	require.Equal(t, "evt-1", skips[0].Fields["event_id"])
}

func aHandlerErrorRollsBack(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	ib := b.inbox(t)
	var calls atomic.Int64
	credit := b.Credit(100, &calls)
	_, err := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if _, err := credit(msg); err != nil {
			return nil, err
		}
		return nil, errors.New("fails after its write")
	})(newMsg("evt-1"))
	require.ErrorContains(t, err, "fails after its write")
	require.EqualValues(t, 1, calls.Load())
	require.Zero(t, b.Balance(t), "the effect is rolled back")
	require.Zero(t, b.rows(t), "and the claim with it")

	_, err = ib.Middleware(credit)(newMsg("evt-1"))
	require.NoError(t, err)
	require.EqualValues(t, 2, calls.Load(), "the redelivery runs the handler")
	require.EqualValues(t, 100, b.Balance(t))
	require.EqualValues(t, 1, b.rows(t))
}

func aHandlerPanicRollsBack(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	ib := b.inbox(t)
	var calls atomic.Int64
	credit := b.Credit(100, &calls)
	require.PanicsWithValue(t, "handler bug", func() {
		_, _ = ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			if _, err := credit(msg); err != nil {
				return nil, err
			}
			panic("handler bug")
		})(newMsg("evt-1"))
	})
	require.EqualValues(t, 1, calls.Load())
	require.Zero(t, b.Balance(t), "the effect is rolled back")
	require.Zero(t, b.rows(t), "and the claim with it")

	_, err := ib.Middleware(credit)(newMsg("evt-1"))
	require.NoError(t, err)
	require.EqualValues(t, 2, calls.Load())
	require.EqualValues(t, 100, b.Balance(t))
	require.EqualValues(t, 1, b.rows(t))
}

func racingCopiesApplyOnce(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	var calls atomic.Int64
	credit := b.Credit(100, &calls)
	h := b.inbox(t).Middleware(func(msg *message.Message) ([]*message.Message, error) {
		time.Sleep(50 * time.Millisecond) // holds the claim while the other copies arrive and wait on it
		return credit(msg)
	})
	const copies = 8
	start := make(chan struct{})
	errs := make(chan error, copies)
	var wg sync.WaitGroup
	for range copies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := h(newMsg("evt-race"))
			errs <- err
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, calls.Load())
	require.EqualValues(t, 100, b.Balance(t))
	require.EqualValues(t, 1, b.rows(t))
	require.Equal(t, copies-1, b.Logs.Count("skipped duplicate"))
}

// producing returns a handler that runs effect, then returns two messages with fresh random UUIDs, the first with
// metadata that JSON text cannot carry as it is: a NUL byte and bytes that are not UTF-8, in keys and values.
func producing(calls *atomic.Int64, effect message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		calls.Add(1)
		if effect != nil {
			if _, err := effect(msg); err != nil {
				return nil, err
			}
		}
		first := message.NewMessage(watermill.NewUUID(), []byte{0x00, 0xff, 0xfe, 'x'})
		first.Metadata.Set("nul", "a\x00b")
		first.Metadata.Set("cut", "caf\xc3")
		first.Metadata.Set("key\x00\xff", "plain")
		first.Metadata.Set("unicode", "ünïcödé ✓")
		second := message.NewMessage(watermill.NewUUID(), []byte("receipt"))
		return []*message.Message{first, second}, nil
	}
}

// requireReplayed checks that a duplicate returned the messages the first run produced, with the identities the
// inbox derives and every byte kept.
func requireReplayed(t *testing.T, first, again []*message.Message) {
	t.Helper()
	require.Len(t, first, 2)
	require.Len(t, again, 2)
	for i := range first {
		want := inbox.ProducedMessageUUID(consumer, "evt-1", i)
		require.Equal(t, want, first[i].UUID)
		require.Equal(t, want, again[i].UUID)
		require.Equal(t, want, again[i].Metadata.Get(inbox.DefaultIDMetadataKey))
		require.Equal(t, first[i].Payload, again[i].Payload)
		require.Equal(t, first[i].Metadata, again[i].Metadata)
	}
	require.Equal(t, "a\x00b", again[0].Metadata.Get("nul"))
	require.Equal(t, "caf\xc3", again[0].Metadata.Get("cut"))
	require.Equal(t, "plain", again[0].Metadata.Get("key\x00\xff"))
	require.Equal(t, []byte{0x00, 0xff, 0xfe, 'x'}, []byte(again[0].Payload))
}

func producedInTransactionMode(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	var calls, credits atomic.Int64
	h := b.inbox(t).Middleware(producing(&calls, b.Credit(100, &credits)))
	first, err := h(newMsg("evt-1"))
	require.NoError(t, err)
	again, err := h(newMsg("evt-1"))
	require.NoError(t, err)
	require.EqualValues(t, 1, calls.Load(), "the duplicate is replayed, not run")
	require.EqualValues(t, 100, b.Balance(t))
	require.EqualValues(t, 1, b.rows(t))
	requireReplayed(t, first, again)
}

func producedInLeaseMode(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	var calls atomic.Int64
	h := b.inbox(t, inbox.WithLease(time.Minute)).Middleware(producing(&calls, nil))
	first, err := h(newMsg("evt-1"))
	require.NoError(t, err)
	again, err := h(newMsg("evt-1"))
	require.NoError(t, err)
	require.EqualValues(t, 1, calls.Load(), "the duplicate is replayed, not run")
	state, _ := b.row(t, "evt-1")
	require.Equal(t, "done", state)
	requireReplayed(t, first, again)
}

func theEffectAndTheRowCommitWhenTheMiddlewareReturns(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	var calls atomic.Int64
	credit := b.Credit(100, &calls)
	var balanceInside, rowsInside int
	_, err := b.inbox(t).Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if _, err := credit(msg); err != nil {
			return nil, err
		}
		// Not visible to another connection before the commit: the effect is inside the claim's transaction.
		balanceInside, rowsInside = b.Balance(t), b.rows(t)
		return nil, nil
	})(newMsg("evt-1"))
	require.NoError(t, err)
	require.Zero(t, balanceInside)
	require.Zero(t, rowsInside)
	// Visible as soon as the middleware returned, which is when the router acks.
	require.EqualValues(t, 100, b.Balance(t))
	require.EqualValues(t, 1, b.rows(t))
}

func aCancelledMessageContextRollsBackAndNacks(t *testing.T, conn Conn) {
	for name, cancelInside := range map[string]bool{"MidHandler": true, "AfterTheHandlerReturnedNil": false} {
		t.Run(name, func(t *testing.T) {
			b := newBundle(t, conn, true)
			var calls atomic.Int64
			credit := b.Credit(100, &calls)
			ctx, cancel := context.WithCancel(context.Background())
			msg := newMsg("evt-1")
			msg.SetContext(ctx)
			_, err := b.inbox(t).Middleware(func(msg *message.Message) ([]*message.Message, error) {
				_, err := credit(msg)
				cancel()
				if cancelInside && err == nil {
					<-msg.Context().Done()
					err = msg.Context().Err()
				}
				return nil, err
			})(msg)
			require.Error(t, err, "the router nacks")
			require.Zero(t, b.Balance(t), "nothing commits")
			require.Zero(t, b.rows(t))
		})
	}
}

func aFailedCommitIsNackedAppliesNothingAndIsReported(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	if b.d.DeferredCheck == nil {
		t.Skipf("%s checks every constraint at its statement: no commit fails on demand", b.d.Name)
	}
	limits := b.Table + "_limits"
	create, violate := b.d.DeferredCheck(limits)
	b.mustExec(t, create)
	t.Cleanup(func() { _, _ = b.exec(context.Background(), `DROP TABLE IF EXISTS `+limits) })

	obs := &EventRecorder{}
	var calls atomic.Int64
	credit := b.Credit(100, &calls)
	// The handler and the claim succeed; the constraint is checked at the commit, which fails.
	_, err := b.inbox(t, inbox.WithObserver(obs)).Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if _, err := credit(msg); err != nil {
			return nil, err
		}
		return nil, conn.ExecInHandler(msg.Context(), violate)
	})(newMsg("evt-1"))
	require.ErrorContains(t, err, "inbox: commit "+consumer+"/evt-1", "an error: the router nacks")
	require.EqualValues(t, 1, calls.Load())
	require.Zero(t, b.Balance(t), "the effect went with the failed commit")
	require.Zero(t, b.rows(t), "and the claim with it")

	require.Equal(t, []string{"Claimed", "Committed", "Finished"}, obs.Hooks())
	commit, _ := OnlyEvent[observe.CommitEvent](t, obs, "Committed")
	require.Error(t, commit.Err)
	require.Positive(t, commit.Duration)
	finish, _ := OnlyEvent[observe.FinishEvent](t, obs, "Finished")
	require.Equal(t, observe.OutcomeFailed, finish.Outcome)
	require.ErrorIs(t, finish.Err, commit.Err)

	_, err = b.inbox(t).Middleware(credit)(newMsg("evt-1"))
	require.NoError(t, err)
	require.EqualValues(t, 100, b.Balance(t), "the redelivery is applied")
}
