package inbox

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
)

// EndDelaysOnClose is a router subscriber decorator that ends the inbox's waits when the router closes or the
// handler stops: the reject delay of a message the inbox cannot apply, the hold-back of a message that arrives
// while the schema cannot be used, and the wait of a copy whose lease another consumer holds. Each such message is
// then nacked at once, so the router's Close does not run into its CloseTimeout:
//
//	router.AddSubscriberDecorators(inbox.EndDelaysOnClose)
//
// Without it the waits end when the message's context ends. Watermill's router cancels the context it subscribes
// with when it closes, and most subscribers (Go channel, Kafka, SQL, AMQP, Redis streams) derive each message's
// context from that one; a subscriber that does not, such as the Go channel with PreserveContext, keeps the waits
// running through the close. The decorator only adds a value to each message's context: it cancels nothing, so a
// handler that is running finishes as it would have, within the router's CloseTimeout.
func EndDelaysOnClose(sub message.Subscriber) (message.Subscriber, error) {
	if sub == nil {
		return nil, fmt.Errorf("%w: EndDelaysOnClose: the subscriber is nil", ErrInvalidOption)
	}
	return closeAwareSubscriber{sub}, nil
}

// closeAwareSubscriber tags each message with the end of the subscription it came from.
type closeAwareSubscriber struct{ message.Subscriber }

func (s closeAwareSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	in, err := s.Subscriber.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	// Unbuffered, like the subscribers themselves: a message is handed on only when the router takes it.
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		for msg := range in {
			if msg != nil {
				msg.SetContext(context.WithValue(msg.Context(), closingKey{}, ctx.Done()))
			}
			out <- msg
		}
	}()
	return out, nil
}
