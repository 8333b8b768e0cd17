package inboxtest

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// NewGoChannel returns Watermill's in-memory pub/sub, set so that Publish returns only once every subscriber has
// acked the message: a test's Publish then waits for the redeliveries that nacks cause too. It is closed when t
// ends.
func NewGoChannel(t testing.TB) *gochannel.GoChannel { return testkit.NewGoChannel(t) }

// RunRouter runs router until t ends, and returns once it is running, its handlers subscribed.
func RunRouter(t testing.TB, router *message.Router) { testkit.RunRouter(t, router) }

// NoPublish adapts a HandlerFunc to the router's handler that publishes nothing.
func NoPublish(h message.HandlerFunc) message.NoPublishHandlerFunc { return testkit.NoPublish(h) }
