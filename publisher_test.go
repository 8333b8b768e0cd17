package inbox_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

func TestEventIDPublisher(t *testing.T) {
	t.Parallel()

	t.Run("StampsTheUUIDWhenTheProducerSetNoID", func(t *testing.T) {
		t.Parallel()
		rec := &testkit.RecordingPublisher{}
		msg := message.NewMessage(watermill.NewUUID(), nil)
		require.NoError(t, inbox.EventIDPublisher(rec, "").Publish("deposits", msg))
		require.Equal(t, msg.UUID, rec.Messages("deposits")[0].Metadata.Get(inbox.DefaultIDMetadataKey))
	})

	t.Run("KeepsAnIDTheProducerSet", func(t *testing.T) {
		t.Parallel()
		rec := &testkit.RecordingPublisher{}
		msg := message.NewMessage(watermill.NewUUID(), nil)
		msg.Metadata.Set("idempotency_key", "order-42-paid")
		require.NoError(t, inbox.EventIDPublisher(rec, "idempotency_key").Publish("deposits", msg))
		require.Equal(t, "order-42-paid", rec.Messages("deposits")[0].Metadata.Get("idempotency_key"))
	})

	t.Run("StampsATimeOrderedUUIDv7WhenAsked", func(t *testing.T) {
		t.Parallel()
		rec := &testkit.RecordingPublisher{}
		pub := inbox.EventIDPublisher(rec, "", inbox.StampUUIDv7())
		first, set := message.NewMessage(watermill.NewUUID(), nil), message.NewMessage(watermill.NewUUID(), nil)
		set.Metadata.Set(inbox.DefaultIDMetadataKey, "order-42-paid")
		require.NoError(t, pub.Publish("deposits", first, set))
		time.Sleep(2 * time.Millisecond) // the next millisecond: v7 orders by it
		second := message.NewMessage(watermill.NewUUID(), nil)
		require.NoError(t, pub.Publish("deposits", second))
		require.NoError(t, pub.Publish("deposits", first), "a retried publish of the same message")

		sent := rec.Messages("deposits")
		require.Len(t, sent, 4)
		ids := []string{sent[0].Metadata.Get(inbox.DefaultIDMetadataKey), sent[2].Metadata.Get(inbox.DefaultIDMetadataKey)}
		for _, id := range ids {
			u, err := uuid.Parse(id)
			require.NoError(t, err)
			require.EqualValues(t, 7, u.Version(), id)
			require.NotEqual(t, first.UUID, id, "not the message's UUID")
		}
		require.Less(t, ids[0], ids[1], "time-ordered: a later message sorts after an earlier one")
		require.Equal(t, "order-42-paid", sent[1].Metadata.Get(inbox.DefaultIDMetadataKey), "an ID the producer set is kept")
		require.Equal(t, ids[0], sent[3].Metadata.Get(inbox.DefaultIDMetadataKey), "the retry carries the same ID")
	})

	t.Run("ARetriedPublishCarriesTheSameIDAndIsAppliedOnce", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		pubsub := testkit.NewGoChannel(t)
		router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
		require.NoError(t, err)
		router.AddMiddleware(inbox.Middleware(b.db, inbox.WithTable(b.Table)))
		var calls atomic.Int64
		router.AddConsumerHandler("wallet-credits", "deposits", pubsub, testkit.NoPublish(b.Credit(100, &calls)))
		testkit.RunRouter(t, router)

		pub := inbox.EventIDPublisher(pubsub, "")
		msg := message.NewMessage(watermill.NewUUID(), []byte(`{"amount":100}`))
		require.NoError(t, pub.Publish("deposits", msg))
		// The producer did not learn that the first publish landed (a timeout, say) and sends the message again.
		// A broker copy gets a new UUID on the way in, as a relay's resend would: only the stamped ID links them.
		again := message.NewMessage(watermill.NewUUID(), msg.Payload)
		again.Metadata.Set(inbox.DefaultIDMetadataKey, msg.Metadata.Get(inbox.DefaultIDMetadataKey))
		require.NoError(t, pub.Publish("deposits", again))

		require.EqualValues(t, 1, calls.Load())
		require.Equal(t, 100, b.Balance(t))
	})
}
