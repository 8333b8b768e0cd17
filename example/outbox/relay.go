package main

import (
	"database/sql"
	"errors"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
)

// errAckLost is what the relay's publisher reports when it plays a lost broker ack.
var errAckLost = errors.New("relay: the broker's ack was lost (staged by the example)")

// relay is Watermill's forwarder from the outbox to Kafka, through a publisher that loses some acks.
type relay struct {
	fwd *forwarder.Forwarder
	out *lossyAcks
}

// newRelay returns a relay that takes events from the outbox and publishes them to Kafka through pub,
// reporting every loseAckEvery-th publish as failed.
func newRelay(db *sql.DB, pub message.Publisher, loseAckEvery int, logger watermill.LoggerAdapter) (relay, error) {
	sub, err := newOutboxSubscriber(db, logger)
	if err != nil {
		return relay{}, err
	}
	out := &lossyAcks{Publisher: pub, every: int64(loseAckEvery)}
	f, err := forwarder.NewForwarder(sub, out, logger, forwarder.Config{ForwarderTopic: outboxTopic, CloseTimeout: 5 * time.Second})
	if err != nil {
		return relay{}, errors.Join(err, sub.Close())
	}
	return relay{fwd: f, out: out}, nil
}

// lossyAcks publishes every message, then reports every n-th publish as failed, as when the broker's ack is lost on
// its way back: the record is in Kafka, but the relay believes it is not. The forwarder nacks, watermill-sql's
// subscriber hands the same outbox row over again, and the relay publishes a second copy with the same event ID.
// That is the duplicate no relay can avoid, and the one the consumer's inbox exists for.
type lossyAcks struct {
	message.Publisher
	every     int64
	publishes atomic.Int64 // calls that reached the broker
	lost      atomic.Int64 // of those, reported as failed
}

// Publish publishes msgs, and loses the ack of every n-th call.
func (p *lossyAcks) Publish(topic string, msgs ...*message.Message) error {
	if err := p.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	if p.publishes.Add(1)%p.every == 0 {
		p.lost.Add(1)
		return errAckLost
	}
	return nil
}
