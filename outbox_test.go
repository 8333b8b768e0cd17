package inbox_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// Inbox, then outbox: the handler's outgoing event is written on the inbox transaction by watermill-sql's
// publisher, so it commits with the credit or not at all, and Watermill's forwarder relays it later.

// ackLostOnce publishes every message, but reports the first publish as failed, as when the broker's ack is lost:
// the relay then publishes that message again.
type ackLostOnce struct {
	message.Publisher
	lost atomic.Bool
}

func (p *ackLostOnce) Publish(topic string, msgs ...*message.Message) error {
	if err := p.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	if p.lost.CompareAndSwap(false, true) {
		return context.DeadlineExceeded
	}
	return nil
}

func TestInboxThenOutbox_ACrashBeforeTheRelayLosesNothingAndTheRelaysResendIsSkipped(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	outboxTopic := newSQLTopic(t, b.db)
	require.NoError(t, newSQLSubscriber(t, b.db, "relay").SubscribeInitialize(outboxTopic)) // a tx publisher cannot create tables
	deposits, credited := testkit.NewGoChannel(t), testkit.NewGoChannel(t)

	// The wallet consumer: credit, and write the "credited" event to the outbox, in one transaction.
	wallet, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	wallet.AddMiddleware(inbox.Middleware(b.db, inbox.WithTable(b.Table)))
	wallet.AddConsumerHandler("wallet-credits", "deposits", deposits, func(msg *message.Message) error {
		tx, _ := inbox.TxFromContext(msg.Context())
		if _, err := b.Credit(100, nil)(msg); err != nil {
			return err
		}
		outbox, err := wsql.NewPublisher(tx, wsql.PublisherConfig{SchemaAdapter: wsql.DefaultPostgreSQLSchema{}}, nil)
		if err != nil {
			return err
		}
		pub := inbox.EventIDPublisher(forwarder.NewPublisher(outbox, forwarder.PublisherConfig{ForwarderTopic: outboxTopic}), "")
		return pub.Publish("credited", message.NewMessage(watermill.NewUUID(), []byte(`{"account_id":1}`)))
	})
	testkit.RunRouter(t, wallet)

	// The next consumer downstream, with an inbox of its own.
	notifications := &recordingLogger{}
	var sent atomic.Int64
	notifier, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	notifier.AddMiddleware(inbox.Middleware(b.db, inbox.WithTable(b.Table), inbox.WithLogger(notifications)))
	notifier.AddConsumerHandler("notifications", "credited", credited, func(*message.Message) error {
		sent.Add(1)
		return nil
	})
	testkit.RunRouter(t, notifier)

	require.NoError(t, deposits.Publish("deposits", newMsg("evt-1")))
	// The relay is down (crashed, or not started yet): the event waits in the outbox, committed with the credit.
	var waiting int
	require.NoError(t, b.db.QueryRow(`SELECT count(*) FROM "watermill_`+outboxTopic+`"`).Scan(&waiting))
	require.Equal(t, 1, waiting)
	require.Equal(t, 100, b.Balance(t))
	require.Zero(t, sent.Load())

	// The relay comes up; its first publish lands but is reported lost, so it publishes the event again.
	relay, err := forwarder.NewForwarder(newSQLSubscriber(t, b.db, "relay"), &ackLostOnce{Publisher: credited}, watermill.NopLogger{},
		forwarder.Config{ForwarderTopic: outboxTopic})
	require.NoError(t, err)
	go func() { _ = relay.Run(context.Background()) }()
	t.Cleanup(func() { _ = relay.Close() })

	require.Eventually(t, func() bool { return len(notifications.Find("skipped duplicate")) == 1 }, 10*time.Second, 20*time.Millisecond,
		"the relay's second copy reaches the notifier and is skipped")
	require.EqualValues(t, 1, sent.Load(), "the event is delivered: nothing lost, and applied once")
	require.Equal(t, 1, b.Rows(t, "notifications"))
	require.Equal(t, 100, b.Balance(t))
}
