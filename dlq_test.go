package inbox_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
)

// unusableMessages are messages the inbox must never apply, each with the error it is refused with.
func unusableMessages() map[string]struct {
	msg  *message.Message
	want error
	text string
} {
	withID := func(id string) *message.Message { return newMsg(id) }
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

func TestMiddleware_UnusableIDs(t *testing.T) {
	t.Parallel()

	t.Run("AreDeadLetteredWithTheReasonAndAcked", func(t *testing.T) {
		t.Parallel()
		for name, tc := range unusableMessages() {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				dlq := &recordingPublisher{}
				ib, b := setup(t, inbox.WithDeadLetter(dlq, "deposits.dlq"))
				var calls atomic.Int64
				_, err := ib.Middleware(b.credit(100, &calls))(tc.msg)
				require.NoError(t, err, "a dead-lettered message is acked")
				require.Zero(t, calls.Load(), "never applied without deduplication")
				require.Equal(t, 0, b.rows(t, "wallet-credits"))

				dead := dlq.messages("deposits.dlq")
				require.Len(t, dead, 1)
				require.Equal(t, tc.msg.UUID, dead[0].UUID)
				require.Equal(t, tc.msg.Payload, dead[0].Payload)
				require.Contains(t, dead[0].Metadata.Get(middleware.ReasonForPoisonedKey), tc.text)
				require.Len(t, b.logs.find("dead-lettered"), 1)
			})
		}
	})

	t.Run("WithoutADeadLetterTopicAreNackedAfterTheRejectDelay", func(t *testing.T) {
		t.Parallel()
		for name, tc := range unusableMessages() {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				const delay = 100 * time.Millisecond
				ib, b := setup(t, inbox.WithRejectDelay(delay))
				var calls atomic.Int64
				start := time.Now()
				_, err := ib.Middleware(b.credit(100, &calls))(tc.msg)
				require.ErrorIs(t, err, tc.want, "an error makes the router nack: the message is kept")
				require.ErrorContains(t, err, tc.text)
				require.GreaterOrEqual(t, time.Since(start), delay, "the nack waits, so redelivery is no hot loop")
				require.Zero(t, calls.Load())
				require.Len(t, b.logs.find("cannot apply message"), 1)
			})
		}
	})

	t.Run("TheRejectDelayEndsWithTheMessageContext", func(t *testing.T) {
		t.Parallel()
		ib, b := setup(t, inbox.WithRejectDelay(time.Hour))
		msg := newMsg("")
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		msg.SetContext(ctx)
		_, err := ib.Middleware(b.credit(100, nil))(msg)
		require.ErrorIs(t, err, inbox.ErrInvalidEventID)
	})

	t.Run("AFailedDeadLetterPublishIsNackedAfterTheDelay", func(t *testing.T) {
		t.Parallel()
		dlq := &recordingPublisher{failFirst: 1}
		ib, b := setup(t, inbox.WithDeadLetter(dlq, "deposits.dlq"), inbox.WithRejectDelay(10*time.Millisecond))
		h := ib.Middleware(b.credit(100, nil))
		_, err := h(newMsg(""))
		require.ErrorIs(t, err, inbox.ErrInvalidEventID)
		require.ErrorContains(t, err, "broker unavailable")
		_, err = h(newMsg("")) // the redelivery
		require.NoError(t, err)
		require.Len(t, dlq.messages("deposits.dlq"), 1)
	})

	t.Run("UnderTheRouterCarryWatermillsPoisonQueueMetadata", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		pubsub := newGoChannel(t)
		dlq := &recordingPublisher{}
		router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
		require.NoError(t, err)
		router.AddMiddleware(inbox.Middleware(b.db, inbox.WithTable(b.table), inbox.WithDeadLetter(dlq, "deposits.dlq")))
		router.AddConsumerHandler("wallet-credits", "deposits", pubsub, noPublish(b.credit(100, nil)))
		runRouter(t, router)
		require.NoError(t, pubsub.Publish("deposits", newMsg("")))

		dead := dlq.messages("deposits.dlq")
		require.Len(t, dead, 1)
		require.Equal(t, middleware.ReasonForPoisonedKey, middleware.ReasonForPoisonedKey)
		require.Contains(t, dead[0].Metadata.Get(middleware.ReasonForPoisonedKey), "invalid event ID: empty")
		require.Equal(t, "deposits", dead[0].Metadata.Get(middleware.PoisonedTopicKey))
		require.Equal(t, "wallet-credits", dead[0].Metadata.Get(middleware.PoisonedHandlerKey))
		require.Equal(t, "gochannel.GoChannel", dead[0].Metadata.Get(middleware.PoisonedSubscriberKey))
	})
}
