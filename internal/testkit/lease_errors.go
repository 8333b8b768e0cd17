package testkit

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

// What lease mode does with a handler's error: it releases the lease at once and stores the error, which the
// next attempt reads.

func leaseModeReleasesAFailedAttemptAtOnceAndStoresItsError(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	var previous []string
	var calls atomic.Int64
	h := b.inbox(t, inbox.WithLease(time.Hour)).Middleware(func(msg *message.Message) ([]*message.Message, error) {
		previous = append(previous, leaseOf(t, msg).PreviousError())
		switch calls.Add(1) {
		case 1:
			return nil, errors.New("card declined: try again")
		case 2:
			return nil, errors.New("cut \xe2\x82 text\x00") // a provider's message cut mid-character, and a NUL
		}
		return nil, nil
	})
	_, err := h(newMsg("evt-1"))
	require.ErrorContains(t, err, "card declined")
	state, _ := b.row(t, "evt-1")
	require.Equal(t, "released", state)
	require.Equal(t, "card declined: try again", b.lastError(t, "evt-1"))

	_, err = h(newMsg("evt-1")) // claimed at once: no waiting for the hour-long lease
	require.ErrorContains(t, err, "cut")
	require.NotErrorIs(t, err, inbox.ErrInvalidEventID)
	require.Equal(t, "cut \uFFFD text\uFFFD", b.lastError(t, "evt-1"), "what a text column cannot hold is replaced, the rest kept")

	_, err = h(newMsg("evt-1"))
	require.NoError(t, err)
	require.Equal(t, []string{"", "card declined: try again", "cut \uFFFD text\uFFFD"}, previous)
	state, attempts := b.row(t, "evt-1")
	require.Equal(t, "done", state)
	require.EqualValues(t, 3, attempts)
	require.Zero(t, b.Logs.Count("lease write failed"))
}

func leaseModeStoresALongErrorCutAtACharacterBoundary(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	long := strings.Repeat("é", inbox.MaxStoredErrorBytes) // two bytes each
	_, err := b.inbox(t, inbox.WithLease(time.Hour)).Middleware(func(*message.Message) ([]*message.Message, error) {
		return nil, errors.New(long)
	})(newMsg("evt-1"))
	require.ErrorContains(t, err, long, "the caller still gets the whole error")
	stored := b.lastError(t, "evt-1")
	require.LessOrEqual(t, len(stored), inbox.MaxStoredErrorBytes)
	require.Greater(t, len(stored), inbox.MaxStoredErrorBytes-8)
	require.True(t, utf8.ValidString(stored))
	require.True(t, strings.HasSuffix(stored, "…"))
	require.True(t, strings.HasPrefix(long, strings.TrimSuffix(stored, "…")))
}

func leaseModeReleasesThePanickingHandlersLeaseAndReportsAFailedRelease(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	ib := b.inbox(t, inbox.WithLease(time.Hour))
	require.Panics(t, func() {
		_, _ = ib.Middleware(func(*message.Message) ([]*message.Message, error) { panic("nil map") })(newMsg("evt-1"))
	})
	state, _ := b.row(t, "evt-1")
	require.Equal(t, "released", state)
	require.Equal(t, "panic: nil map", b.lastError(t, "evt-1"))

	_, err := ib.Middleware(func(*message.Message) ([]*message.Message, error) {
		// An operator forces the row away while the handler runs, so the release finds nothing to release.
		_, err := conn.Database().Forget(context.Background(), inbox.ForgetParams{Consumer: consumer, ID: "evt-2", Force: true},
			inbox.WithTable(b.Table))
		require.NoError(t, err)
		return nil, errors.New("card declined")
	})(newMsg("evt-2"))
	require.ErrorContains(t, err, "card declined")
	require.ErrorIs(t, err, inbox.ErrLeaseLost, "the failed release is part of the error, not dropped")
	require.Equal(t, 1, b.Logs.Count("lease write failed"))
}

func leaseModeKeepsAnExhaustedMessageWithoutADeadLetterTopicAndNacksItSlowly(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	var calls atomic.Int64
	h := b.inbox(t, inbox.WithLease(time.Hour), inbox.WithMaxAttempts(1), inbox.WithRejectDelay(50*time.Millisecond)).
		Middleware(func(*message.Message) ([]*message.Message, error) { calls.Add(1); return nil, errors.New("down") })
	for range 2 {
		start := time.Now()
		_, err := h(newMsg("evt-1"))
		require.ErrorIs(t, err, inbox.ErrAttemptsExhausted)
		require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	}
	require.EqualValues(t, 1, calls.Load(), "an exhausted message is not run again")
	state, _ := b.row(t, "evt-1")
	require.Equal(t, "released", state, "and not marked failed: nothing dead-lettered it")
}
