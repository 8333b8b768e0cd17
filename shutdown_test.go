package inbox_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

func TestEndDelaysOnClose(t *testing.T) {
	t.Parallel()

	// closeWhileHeld runs a router whose messages' contexts do not derive from the router's (the Go channel with
	// PreserveContext, as an AMQP or Redis subscriber might deliver them), publishes msg, waits until the inbox
	// logged logLine (it is then inside its delay), and returns what the router's Close returned. The delay is far
	// longer than the test, and the router's CloseTimeout far shorter than the delay: a Close that waits for the
	// delay returns a timeout error.
	closeWhileHeld := func(t *testing.T, mw message.HandlerMiddleware, logs *recordingLogger, logLine string, msg *message.Message) (calls int64, closeErr error) {
		t.Helper()
		pubsub := gochannel.NewGoChannel(gochannel.Config{PreserveContext: true}, watermill.NopLogger{})
		t.Cleanup(func() { _ = pubsub.Close() })
		router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
		require.NoError(t, err)
		router.AddSubscriberDecorators(inbox.EndDelaysOnClose)
		router.AddMiddleware(mw)
		var n atomic.Int64
		router.AddConsumerHandler("wallet-credits", "deposits", pubsub, func(*message.Message) error {
			n.Add(1)
			return nil
		})
		done := make(chan error, 1)
		go func() { done <- router.Run(context.Background()) }()
		<-router.Running()

		require.NoError(t, pubsub.Publish("deposits", msg))
		require.Eventually(t, func() bool { return len(logs.Find(logLine)) > 0 }, 10*time.Second, 5*time.Millisecond)
		closeErr = router.Close()
		require.NoError(t, <-done)
		return n.Load(), closeErr
	}

	t.Run("ARouterCloseEndsTheRejectDelayOfAMessageWithoutAnEventID", func(t *testing.T) {
		t.Parallel()
		ib, b := setup(t, inbox.WithRejectDelay(10*time.Minute))
		msg := message.NewMessage(watermill.NewUUID(), []byte(`{"account_id":1,"amount":100}`))
		calls, err := closeWhileHeld(t, ib.Middleware, b.Logs, "Inbox cannot apply message;", msg)
		require.NoError(t, err, "Close returned within its timeout")
		require.Zero(t, calls)
	})

	t.Run("ARouterCloseEndsTheHoldBackOfAMessageThatArrivedWithoutASchema", func(t *testing.T) {
		t.Parallel()
		logs := &recordingLogger{}
		mw := inbox.Middleware(openDB(t), inbox.WithTable(testkit.UniqueName("inbox_absent")), inbox.WithAutoMigrate(false),
			inbox.WithRejectDelay(10*time.Minute), inbox.WithLogger(logs))
		calls, err := closeWhileHeld(t, mw, logs, "Inbox cannot apply messages;", newMsg("evt-1"))
		require.NoError(t, err, "Close returned within its timeout")
		require.Zero(t, calls)
	})

	t.Run("RefusesANilSubscriber", func(t *testing.T) {
		t.Parallel()
		_, err := inbox.EndDelaysOnClose(nil)
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
	})
}
