package testkit

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

// The cases of the inbox under Watermill's router: the consumer's name, the ack, the nack of a panic, a dead
// letter's metadata and a publish that fails after the commit.

func NewGoChannel(t testing.TB) *gochannel.GoChannel {
	t.Helper()
	ps := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	t.Cleanup(func() { _ = ps.Close() })
	return ps
}

func RunRouter(t testing.TB, router *message.Router) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- router.Run(context.Background()) }()
	select {
	case <-router.Running():
	case err := <-done:
		t.Fatalf("router stopped before it ran: %v", err)
	}
	t.Cleanup(func() {
		_ = router.Close()
		<-done
	})
}

// newRouter returns a router with the inbox's middleware over the case's table, built with opts and without a
// fixed consumer name unless opts has one, and the in-memory pub/sub its handlers subscribe to.
func (b *bundle) newRouter(t *testing.T, opts ...inbox.Option) (*message.Router, *gochannel.GoChannel) {
	t.Helper()
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	ib, err := b.Conn.Database().New(append([]inbox.Option{inbox.WithTable(b.Table), inbox.WithLogger(b.Logs)}, opts...)...)
	require.NoError(t, err)
	router.AddMiddleware(ib.Middleware)
	return router, NewGoChannel(t)
}

func NoPublish(h message.HandlerFunc) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		_, err := h(msg)
		return err
	}
}

func underTheRouterEachHandlerAppliesAMessageOnceUnderItsOwnName(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	router, pubsub := b.newRouter(t) // no WithConsumer: each handler's name scopes its own history
	var walletCalls, auditCalls atomic.Int64
	router.AddConsumerHandler(consumer, "deposits", pubsub, NoPublish(b.Credit(100, &walletCalls)))
	router.AddConsumerHandler("audit", "deposits", pubsub, NoPublish(b.Credit(1, &auditCalls)))
	RunRouter(t, router)

	for range 2 {
		require.NoError(t, pubsub.Publish("deposits", newMsg("evt-1"))) // returns once both handlers acked it
	}
	require.EqualValues(t, 1, walletCalls.Load())
	require.EqualValues(t, 1, auditCalls.Load())
	require.EqualValues(t, 101, b.Balance(t))
	require.EqualValues(t, 1, b.Rows(t, consumer))
	require.EqualValues(t, 1, b.Rows(t, "audit"))
	skips := b.Logs.Find("skipped duplicate")
	require.Len(t, skips, 2)
	require.ElementsMatch(t, []any{consumer, "audit"}, []any{skips[0].Fields["consumer"], skips[1].Fields["consumer"]})
}

func aFixedConsumerNameOverridesTheHandlersName(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	router, pubsub := b.newRouter(t, inbox.WithConsumer("ledger"))
	var calls atomic.Int64
	router.AddConsumerHandler("wallet-credits-v2", "deposits", pubsub, NoPublish(b.Credit(100, &calls)))
	RunRouter(t, router)

	require.NoError(t, pubsub.Publish("deposits", newMsg("evt-1")))
	require.EqualValues(t, 1, calls.Load())
	require.EqualValues(t, 1, b.Rows(t, "ledger"))
	require.Zero(t, b.Rows(t, "wallet-credits-v2"))
}

func withoutARouterOrAConsumerNameTheInboxRefusesToRun(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	ib, err := conn.Database().New(inbox.WithTable(b.Table), inbox.WithRejectDelay(time.Millisecond), inbox.WithLogger(b.Logs))
	require.NoError(t, err)
	var calls atomic.Int64
	_, err = ib.Middleware(b.Credit(100, &calls))(newMsg("evt-1")) // no router, so no handler's name
	require.ErrorIs(t, err, inbox.ErrNoConsumer)
	require.Zero(t, calls.Load())
	require.Zero(t, b.Balance(t))
	require.Equal(t, 1, b.Logs.Count("cannot apply message"), "the operator learns why")
}

func underTheRouterAMessageIsAckedOnlyAfterItsCommit(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	router, pubsub := b.newRouter(t)
	type seen struct {
		rows int64
		err  error
	}
	atAck := make(chan seen, 1)
	credit := b.Credit(100, new(atomic.Int64))
	router.AddConsumerHandler(consumer, "deposits", pubsub, func(msg *message.Message) error {
		go func() { // watches the ack from outside the handler, as the broker would
			<-msg.Acked()
			var s seen
			ctx := context.Background()
			s.err = b.inTx(ctx, func(tx driver.Tx) error {
				return tx.QueryRow(ctx, `SELECT count(*) FROM `+b.d.View(b.Table)+` WHERE consumer = `+b.p(1), consumer).Scan(&s.rows)
			})
			atAck <- s
		}()
		_, err := credit(msg)
		return err
	})
	RunRouter(t, router)

	require.NoError(t, pubsub.Publish("deposits", newMsg("evt-1")))
	select {
	case s := <-atAck:
		require.NoError(t, s.err)
		require.EqualValues(t, 1, s.rows, "the inbox row is committed when the message is acked")
	case <-time.After(10 * time.Second):
		t.Fatal("the message was never acked")
	}
}

func underTheRouterAPanickingHandlerIsNackedAndItsRedeliveryApplied(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	router, pubsub := b.newRouter(t)
	var calls atomic.Int64
	credit := b.Credit(100, &calls)
	router.AddConsumerHandler(consumer, "deposits", pubsub, func(msg *message.Message) error {
		if _, err := credit(msg); err != nil {
			return err
		}
		if calls.Load() == 1 {
			panic("the first delivery panics")
		}
		return nil
	})
	RunRouter(t, router)

	require.NoError(t, pubsub.Publish("deposits", newMsg("evt-1"))) // returns once the redelivery is acked
	require.EqualValues(t, 2, calls.Load())
	require.EqualValues(t, 100, b.Balance(t), "the panicking run's credit was rolled back")
	require.EqualValues(t, 1, b.rows(t))
}

func underTheRouterADeadLetterCarriesWatermillsPoisonQueueMetadata(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	dlq := &RecordingPublisher{}
	router, pubsub := b.newRouter(t, inbox.WithDeadLetter(dlq, "deposits.dlq"))
	var calls atomic.Int64
	router.AddConsumerHandler(consumer, "deposits", pubsub, NoPublish(b.Credit(100, &calls)))
	RunRouter(t, router)

	require.NoError(t, pubsub.Publish("deposits", withID("")))
	require.Zero(t, calls.Load())
	dead := dlq.Messages("deposits.dlq")
	require.Len(t, dead, 1)
	require.Contains(t, dead[0].Metadata.Get(middleware.ReasonForPoisonedKey), "invalid event ID: empty")
	require.Equal(t, "deposits", dead[0].Metadata.Get(middleware.PoisonedTopicKey))
	require.Equal(t, consumer, dead[0].Metadata.Get(middleware.PoisonedHandlerKey))
	require.Equal(t, "gochannel.GoChannel", dead[0].Metadata.Get(middleware.PoisonedSubscriberKey))
}

func producedMessagesOfAPublishThatFailedAfterTheCommitGoOutWithTheRedelivery(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	router, pubsub := b.newRouter(t)
	out := &RecordingPublisher{FailFirst: 1} // the router's publish after the first, committed, run fails
	payload := []byte{0x00, 0xff, 'o', 'k'}  // not UTF-8: stored produced messages keep any bytes
	var calls atomic.Int64
	credit := b.Credit(100, &calls)
	router.AddHandler(consumer, "deposits", pubsub, "credited", out, func(msg *message.Message) ([]*message.Message, error) {
		if _, err := credit(msg); err != nil {
			return nil, err
		}
		credited := message.NewMessage(watermill.NewUUID(), payload)
		credited.Metadata.Set("account_id", "1")
		return []*message.Message{credited}, nil
	})
	RunRouter(t, router)

	// Returns once the message is acked: after the failed publish, the nack, the redelivery and its publish.
	require.NoError(t, pubsub.Publish("deposits", newMsg("evt-1")))
	require.EqualValues(t, 1, calls.Load(), "the redelivery is a duplicate and does not run the handler")
	require.EqualValues(t, 100, b.Balance(t))
	require.Equal(t, 1, b.Logs.Count("skipped duplicate"))
	sent := out.Messages("credited")
	require.Len(t, sent, 1, "the produced message goes out with the duplicate, once the publish works")
	want := inbox.ProducedMessageUUID(consumer, "evt-1", 0)
	require.Equal(t, want, sent[0].UUID)
	require.Equal(t, payload, []byte(sent[0].Payload))
	require.Equal(t, "1", sent[0].Metadata.Get("account_id"))
	require.Equal(t, want, sent[0].Metadata.Get(inbox.DefaultIDMetadataKey),
		"a produced message carries a stable event ID, so the next consumer's inbox skips the resends")
}
