package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	inbox "github.com/effectively-once/watermill-inbox"
)

// credit is the payload of a credit event.
type credit struct {
	Seq     int   `json:"seq"`
	Account int   `json:"account"`
	Amount  int64 `json:"amount"`
}

// accountKey is the metadata key the partitioning marshaler keys messages by: all credits of an account land on
// one partition, in order, as they would in a real ledger.
const accountKey = "account"

// newEvents makes n credit messages over accounts accounts. Amounts vary so that a credit applied twice cannot
// hide behind another one missing in a balance check.
func newEvents(n, accounts int, rnd *rand.Rand) ([]*message.Message, []event) {
	msgs := make([]*message.Message, n)
	evs := make([]event, n)
	for i := range n {
		c := credit{Seq: i, Account: 1 + rnd.IntN(accounts), Amount: 1 + rnd.Int64N(1000)}
		payload, _ := json.Marshal(c) // a struct of ints always marshals
		m := message.NewMessage(watermill.NewUUID(), payload)
		m.Metadata.Set(accountKey, strconv.Itoa(c.Account))
		msgs[i] = m
		evs[i] = event{Seq: c.Seq, Account: c.Account, Amount: c.Amount}
	}
	return msgs, evs
}

// batchPublisher sends a whole slice of messages in one Sarama SendMessages call. watermill-kafka's publisher
// sends one message per round trip, which would make publishing 100,000 events a measurement of its own.
type batchPublisher struct {
	producer  sarama.SyncProducer
	marshaler kafka.Marshaler
}

// newBatchPublisher returns a publisher that keys messages by account: all credits of an account land on one
// partition, in order.
func newBatchPublisher(addrs []string) (*batchPublisher, error) {
	return newKafkaPublisher(addrs, true)
}

// newSpreadPublisher returns a publisher that deals messages to the partitions in turn, so that each partition
// holds as many as the next. The throughput measurement needs that: a consumer with one message in flight per
// partition has as many in flight as partitions only while every partition has work, and 100 account keys
// hashed onto 64 partitions leave a dozen of them empty.
func newSpreadPublisher(addrs []string) (*batchPublisher, error) {
	return newKafkaPublisher(addrs, false)
}

func newKafkaPublisher(addrs []string, byAccount bool) (*batchPublisher, error) {
	cfg := kafka.DefaultSaramaSyncPublisherConfig()
	cfg.Version = kafkaVersion
	cfg.ClientID = "harness-publisher"
	// Sends a batch per partition when 500 messages are waiting or 10 ms have passed, whichever comes first;
	// Sarama holds a batch below Messages forever unless Frequency is set too.
	cfg.Producer.Flush.Messages = 500
	cfg.Producer.Flush.Frequency = 10 * time.Millisecond
	var m kafka.Marshaler = kafka.DefaultMarshaler{}
	if byAccount {
		m = kafka.NewWithPartitioningMarshaler(func(_ string, msg *message.Message) (string, error) {
			return msg.Metadata.Get(accountKey), nil
		})
	} else {
		cfg.Producer.Partitioner = sarama.NewRoundRobinPartitioner
	}
	p, err := sarama.NewSyncProducer(addrs, cfg)
	if err != nil {
		return nil, fmt.Errorf("publisher: %w", err)
	}
	return &batchPublisher{producer: p, marshaler: m}, nil
}

func (p *batchPublisher) Publish(topic string, msgs ...*message.Message) error {
	const chunk = 1000
	for len(msgs) > 0 {
		n := min(chunk, len(msgs))
		batch := make([]*sarama.ProducerMessage, n)
		for i, m := range msgs[:n] {
			pm, err := p.marshaler.Marshal(topic, m)
			if err != nil {
				return err
			}
			batch[i] = pm
		}
		if err := p.producer.SendMessages(batch); err != nil {
			return fmt.Errorf("publish to %s: %w", topic, err)
		}
		msgs = msgs[n:]
	}
	return nil
}

func (p *batchPublisher) Close() error { return p.producer.Close() }

// publishRun publishes n credit events through the library's EventIDPublisher, which gives each its event ID
// (with opts, the variant's publisherOptions), then records them and the run's accounts in the database. Consumers are started only after it returns.
func publishRun(ctx context.Context, db *sql.DB, addrs []string, run, topic string, n, accounts int, rnd *rand.Rand,
	opts ...inbox.PublisherOption) error {
	msgs, evs := newEvents(n, accounts, rnd)
	pub, err := newBatchPublisher(addrs)
	if err != nil {
		return err
	}
	defer pub.Close()
	if err := inbox.EventIDPublisher(pub, "", opts...).Publish(topic, msgs...); err != nil {
		return err
	}
	for i, m := range msgs {
		// EventIDPublisher stamps the messages themselves, so the IDs it gave are readable here.
		if evs[i].ID = m.Metadata.Get(inbox.DefaultIDMetadataKey); evs[i].ID == "" {
			return fmt.Errorf("EventIDPublisher left message %d without an event ID", i)
		}
	}
	if err := seedRun(ctx, db, run, accounts, evs); err != nil {
		return fmt.Errorf("seed run %s: %w", run, err)
	}
	return nil
}
