package inboxcheck

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
)

// The topics of a run: the messages go to topic, and what the handler produces to produced, which nobody reads.
const (
	topic    = "inboxcheck"
	produced = "inboxcheck.produced"
)

// startRouters runs n routers over pubsub, each with the middlewares outer, then users', then inbox, around h,
// and returns once all of them run, with the function that closes them.
func startRouters(n int, pubsub *gochannel.GoChannel, outer message.HandlerMiddleware, users []message.HandlerMiddleware,
	inbox message.HandlerMiddleware, h message.HandlerFunc) (stop func(), err error) {
	var routers []*message.Router
	stop = func() {
		for _, r := range routers {
			_ = r.Close()
		}
	}
	for range n {
		r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
		if err != nil {
			stop()
			return nil, fmt.Errorf("router: %w", err)
		}
		r.AddMiddleware(outer)
		r.AddMiddleware(users...)
		r.AddMiddleware(inbox)
		r.AddHandler("inboxcheck", topic, pubsub, produced, pubsub, h)
		routers = append(routers, r)
		go func() { _ = r.Run(context.Background()) }()
		<-r.Running()
	}
	return stop, nil
}

// publish hands msg to every router and returns once each acked it: GoChannel, with BlockPublishUntilSubscriberAck,
// delivers a nacked message again until it is acked. A message still not acked after timeout fails the run.
func publish(ctx context.Context, pubsub *gochannel.GoChannel, msg *message.Message, timeout time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- pubsub.Publish(topic, msg) }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return fmt.Errorf("not acked within %s: the handler keeps failing, or never returns", timeout)
	case <-ctx.Done():
		return errors.Join(errors.New("not acked"), ctx.Err())
	}
}
