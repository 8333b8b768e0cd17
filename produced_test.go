package inbox_test

import (
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/inboxtest"
)

func TestMiddleware_ProducedMessagesSurviveAPublishThatFailsAfterTheCommit(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	pubsub := newGoChannel(t)
	out := &inboxtest.RecordingPublisher{FailFirst: 1} // the router's publish after the first, committed, run fails
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddMiddleware(inbox.Middleware(b.db, inbox.WithTable(b.table), inbox.WithLogger(b.logs)))

	payload := []byte{0x00, 0xff, 'o', 'k'} // not UTF-8: stored produced messages must keep any bytes
	var calls atomic.Int64
	router.AddHandler("wallet-credits", "deposits", pubsub, "credited", out, func(msg *message.Message) ([]*message.Message, error) {
		if _, err := b.credit(100, &calls)(msg); err != nil {
			return nil, err
		}
		credited := message.NewMessage(watermill.NewUUID(), payload)
		credited.Metadata.Set("account_id", "1")
		return []*message.Message{credited}, nil
	})
	runRouter(t, router)

	// Returns once the message is acked: after the failed publish, the nack, the redelivery and its publish.
	require.NoError(t, pubsub.Publish("deposits", newMsg("evt-1")))

	require.EqualValues(t, 1, calls.Load(), "the redelivery is a duplicate and must not run the handler")
	require.Equal(t, 100, b.balance(t))
	require.Len(t, b.logs.find("skipped duplicate"), 1)
	sent := out.Messages("credited")
	require.Len(t, sent, 1, "the produced message is sent again with the duplicate, once the publish works")
	producedUUID := inbox.ProducedMessageUUID("wallet-credits", "evt-1", 0)
	require.Equal(t, producedUUID, sent[0].UUID)
	require.Equal(t, payload, []byte(sent[0].Payload))
	require.Equal(t, "1", sent[0].Metadata.Get("account_id"))
	require.Equal(t, producedUUID, sent[0].Metadata.Get(inbox.DefaultIDMetadataKey),
		"a produced message carries a stable event ID, so the next consumer's inbox can skip the resends")
}
