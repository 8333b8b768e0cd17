package testkit

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

// The cases of a message's event ID: where the inbox reads it, and what it does with one it cannot use.

func theEventIDIsReadWhereTheOptionsSay(t *testing.T, conn Conn) {
	t.Run("FromTheEventIDMetadataByDefault", func(t *testing.T) {
		b := newBundle(t, conn, true)
		var calls atomic.Int64
		h := b.inbox(t).Middleware(b.Credit(100, &calls))
		for range 3 {
			_, err := h(newMsg("evt-1")) // three UUIDs, one event ID
			require.NoError(t, err)
		}
		require.EqualValues(t, 1, calls.Load())
		require.EqualValues(t, 100, b.Balance(t))
	})
	t.Run("FromAConfiguredMetadataKey", func(t *testing.T) {
		b := newBundle(t, conn, true)
		var calls atomic.Int64
		h := b.inbox(t, inbox.WithIDMetadataKey("idempotency_key")).Middleware(b.Credit(100, &calls))
		for _, eventID := range []string{"a", "b", "a"} {
			msg := newMsg("ignored-because-another-key-is-configured")
			msg.Metadata.Set("idempotency_key", eventID)
			_, err := h(msg)
			require.NoError(t, err)
		}
		require.EqualValues(t, 200, b.Balance(t))
		require.EqualValues(t, 2, b.rows(t))
	})
	t.Run("FromTheMessageUUIDOnlyWhenAskedTo", func(t *testing.T) {
		b := newBundle(t, conn, true)
		var calls atomic.Int64
		h := b.inbox(t, inbox.WithMessageUUIDAsID()).Middleware(b.Credit(100, &calls))
		first := newMsg("evt-1")
		_, err := h(first)
		require.NoError(t, err)
		again := message.NewMessage(first.UUID, first.Payload) // same UUID, no event_id metadata
		again.SetContext(context.Background())
		_, err = h(again)
		require.NoError(t, err)
		_, err = h(newMsg("evt-1")) // same event_id, another UUID: another message in this mode
		require.NoError(t, err)
		require.EqualValues(t, 200, b.Balance(t))
	})
	t.Run("AndHandedToTheHandler", func(t *testing.T) {
		b := newBundle(t, conn, true)
		var seen string
		_, err := b.inbox(t).Middleware(func(msg *message.Message) ([]*message.Message, error) {
			seen, _ = inbox.EventIDFromContext(msg.Context())
			return nil, nil
		})(newMsg("evt-7"))
		require.NoError(t, err)
		require.Equal(t, "evt-7", seen)
	})
}

// withID returns a message whose event ID metadata is id, even an empty one.
func withID(id string) *message.Message {
	msg := newMsg("set below")
	msg.Metadata.Set(inbox.DefaultIDMetadataKey, id)
	return msg
}

// unusableMessages are messages the inbox must never apply, each with the error it is refused with and a part of
// its text.
func unusableMessages() map[string]struct {
	msg  *message.Message
	want error
	text string
} {
	noID := message.NewMessage(watermill.NewUUID(), []byte("{}"))
	noID.SetContext(context.Background())
	return map[string]struct {
		msg  *message.Message
		want error
		text string
	}{
		"NoID":        {noID, inbox.ErrMissingEventID, `metadata key "event_id" is not set`},
		"EmptyID":     {withID(""), inbox.ErrInvalidEventID, "empty"},
		"IDOverLimit": {withID(strings.Repeat("a", inbox.DefaultMaxIDLength+1)), inbox.ErrInvalidEventID, "over the limit of 255"},
		"NULByte":     {withID("evt\x00-1"), inbox.ErrInvalidEventID, "NUL byte"},
		"InvalidUTF8": {withID("evt-\xff\xfe"), inbox.ErrInvalidEventID, "not valid UTF-8"},
	}
}

func unusableIDsAreDeadLetteredWithTheReasonAndAcked(t *testing.T, conn Conn) {
	for name, tc := range unusableMessages() {
		t.Run(name, func(t *testing.T) {
			b := newBundle(t, conn, true)
			dlq := &RecordingPublisher{}
			var calls atomic.Int64
			_, err := b.inbox(t, inbox.WithDeadLetter(dlq, "deposits.dlq")).Middleware(b.Credit(100, &calls))(tc.msg)
			require.NoError(t, err, "a dead-lettered message is acked")
			require.Zero(t, calls.Load(), "never applied without deduplication")
			require.Zero(t, b.rows(t))
			dead := dlq.Messages("deposits.dlq")
			require.Len(t, dead, 1)
			require.Equal(t, tc.msg.UUID, dead[0].UUID)
			require.Equal(t, tc.msg.Payload, dead[0].Payload)
			require.Contains(t, dead[0].Metadata.Get(middleware.ReasonForPoisonedKey), tc.text)
			require.Equal(t, 1, b.Logs.Count("dead-lettered"))
		})
	}
}

func unusableIDsWithoutADeadLetterTopicAreNackedAfterTheRejectDelay(t *testing.T, conn Conn) {
	for name, tc := range unusableMessages() {
		t.Run(name, func(t *testing.T) {
			b := newBundle(t, conn, true)
			const delay = 100 * time.Millisecond
			var calls atomic.Int64
			start := time.Now()
			_, err := b.inbox(t, inbox.WithRejectDelay(delay)).Middleware(b.Credit(100, &calls))(tc.msg)
			require.ErrorIs(t, err, tc.want, "an error makes the router nack: the message is kept")
			require.ErrorContains(t, err, tc.text)
			require.GreaterOrEqual(t, time.Since(start), delay, "the nack waits, so redelivery is no hot loop")
			require.Zero(t, calls.Load())
			require.Equal(t, 1, b.Logs.Count("cannot apply message"))
		})
	}
	t.Run("TheDelayEndsWithTheMessageContext", func(t *testing.T) {
		b := newBundle(t, conn, true)
		h := b.inbox(t, inbox.WithRejectDelay(time.Hour)).Middleware(b.Credit(100, new(atomic.Int64)))
		_, err := h(newMsg("evt-1")) // checks the schema first, so the short context below is the delay's alone
		require.NoError(t, err)
		msg := withID("")
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		msg.SetContext(ctx)
		_, err = h(msg)
		require.ErrorIs(t, err, inbox.ErrInvalidEventID)
	})
	t.Run("AFailedDeadLetterPublishIsNackedAfterTheDelayAndTheRedeliveryDeadLettered", func(t *testing.T) {
		b := newBundle(t, conn, true)
		dlq := &RecordingPublisher{FailFirst: 1}
		h := b.inbox(t, inbox.WithDeadLetter(dlq, "deposits.dlq"), inbox.WithRejectDelay(10*time.Millisecond)).
			Middleware(b.Credit(100, new(atomic.Int64)))
		_, err := h(withID(""))
		require.ErrorIs(t, err, inbox.ErrInvalidEventID)
		require.ErrorContains(t, err, "broker unavailable")
		_, err = h(withID("")) // the redelivery
		require.NoError(t, err)
		require.Len(t, dlq.Messages("deposits.dlq"), 1)
	})
}

func everyDuplicateReturnsTheStoredProducedMessages(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	h := b.inbox(t).Middleware(func(msg *message.Message) ([]*message.Message, error) {
		return []*message.Message{message.NewMessage("out-1", []byte("a")), message.NewMessage("out-2", []byte("b"))}, nil
	})
	first, err := h(newMsg("evt-1"))
	require.NoError(t, err)
	for range 2 {
		again, err := h(newMsg("evt-1"))
		require.NoError(t, err)
		require.Len(t, again, 2)
		for i := range first {
			require.Equal(t, first[i].UUID, again[i].UUID)
			require.Equal(t, first[i].Payload, again[i].Payload)
			require.Equal(t, first[i].Metadata, again[i].Metadata)
		}
	}
}
