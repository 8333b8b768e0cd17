package inbox_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/inboxtest"
)

// What becomes of a message whose event ID is unusable, on every driver, is in the driver suite (inboxtest's
// UnusableEventIDs cases); under a router, the dead letter carries the router's names too.
func TestMiddleware_UnusableIDsUnderTheRouterCarryWatermillsPoisonQueueMetadata(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	pubsub := newGoChannel(t)
	dlq := &inboxtest.RecordingPublisher{}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddMiddleware(inbox.Middleware(b.db, inbox.WithTable(b.table), inbox.WithDeadLetter(dlq, "deposits.dlq")))
	router.AddConsumerHandler("wallet-credits", "deposits", pubsub, noPublish(b.credit(100, nil)))
	runRouter(t, router)
	require.NoError(t, pubsub.Publish("deposits", newMsg("")))

	dead := dlq.Messages("deposits.dlq")
	require.Len(t, dead, 1)
	require.Contains(t, dead[0].Metadata.Get(middleware.ReasonForPoisonedKey), "invalid event ID: empty")
	require.Equal(t, "deposits", dead[0].Metadata.Get(middleware.PoisonedTopicKey))
	require.Equal(t, "wallet-credits", dead[0].Metadata.Get(middleware.PoisonedHandlerKey))
	require.Equal(t, "gochannel.GoChannel", dead[0].Metadata.Get(middleware.PoisonedSubscriberKey))
}
