// Package kafkademo sets up Kafka for the examples: the brokers (an in-process kfake cluster, or the cluster
// KAFKA_BROKERS names), and Watermill publishers and subscribers configured to work with both.
package kafkademo

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Version is the protocol level Sarama speaks. Watermill's default, 1.0, is older than Kafka 4 brokers accept
// (KIP-896 dropped the request versions before 2.1). From 2.4 on, Sarama reads OffsetFetch replies in the flexible
// format and fails on the null commit metadata kfake returns for a partition with no committed offset ("invalid
// byteslice length"), where Kafka itself returns an empty string. 2.3 is the newest level that works with both.
var Version = sarama.V2_3_0_0

// PartitionKey is the metadata key that NewPartitionPublisher reads a message's partition from.
const PartitionKey = "kafkademo_partition"

// BrokersFromEnv returns the brokers listed, comma-separated, in KAFKA_BROKERS, or nil when it is unset, which
// StartBrokers takes as "start an in-process cluster".
func BrokersFromEnv() []string {
	if s := os.Getenv("KAFKA_BROKERS"); s != "" {
		return strings.Split(s, ",")
	}
	return nil
}

// StartBrokers returns the brokers to use and a function that stops them. With no brokers given it starts kfake, an
// in-process broker that speaks the Kafka protocol, so an example needs nothing but PostgreSQL.
func StartBrokers(brokers []string) (addrs []string, stop func(), err error) {
	if len(brokers) > 0 {
		return brokers, func() {}, nil
	}
	// Three brokers rather than one, so partition leaders are spread and the producer talks to several of them,
	// as it would in production.
	cluster, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		return nil, nil, fmt.Errorf("start in-process Kafka: %w", err)
	}
	return cluster.ListenAddrs(), cluster.Close, nil
}

// NewPublisher returns a Kafka publisher with Sarama's idempotent producer switched on. Idempotence only stops the
// producer's own network retries from writing a record twice within one session; it cannot recognise an event that
// the application publishes again, which is the inbox's job.
//
// The default marshaler sends Watermill metadata as Kafka headers, which is where event_id travels. It sets no
// key, so Sarama spreads messages over partitions at random: a resent copy that lands on another partition than
// its original is exactly the duplicate no offset can recognise.
func NewPublisher(brokers []string, logger watermill.LoggerAdapter) (message.Publisher, error) {
	return newPublisher(brokers, kafka.DefaultMarshaler{}, nil, logger)
}

// NewPartitionPublisher is NewPublisher for a demo that must decide where each message goes, such as two copies of
// one event on two partitions, which a consumer then handles at the same time. Each message must carry its
// partition number in metadata PartitionKey.
func NewPartitionPublisher(brokers []string, logger watermill.LoggerAdapter) (message.Publisher, error) {
	return newPublisher(brokers, partitionMarshaler{}, sarama.NewManualPartitioner, logger)
}

func newPublisher(brokers []string, m kafka.Marshaler, p sarama.PartitionerConstructor, logger watermill.LoggerAdapter) (message.Publisher, error) {
	cfg := kafka.DefaultSaramaSyncPublisherConfig()
	cfg.Version = Version
	// Sarama refuses Idempotent unless acks come from all in-sync replicas, retries are allowed, only one request
	// is in flight per broker and Version is 0.11 or later.
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Retry.Max = 5
	cfg.Net.MaxOpenRequests = 1
	if p != nil {
		cfg.Producer.Partitioner = p
	}
	return kafka.NewPublisher(kafka.PublisherConfig{
		Brokers:               brokers,
		Marshaler:             m,
		OverwriteSaramaConfig: cfg,
	}, logger)
}

// partitionMarshaler is the default marshaler plus a partition taken from metadata, for the manual partitioner.
type partitionMarshaler struct{ kafka.DefaultMarshaler }

func (m partitionMarshaler) Marshal(topic string, msg *message.Message) (*sarama.ProducerMessage, error) {
	p, err := strconv.ParseInt(msg.Metadata.Get(PartitionKey), 10, 32)
	if err != nil {
		return nil, fmt.Errorf("kafkademo: message %s: metadata %s: %w", msg.UUID, PartitionKey, err)
	}
	pm, err := m.DefaultMarshaler.Marshal(topic, msg)
	if err != nil {
		return nil, err
	}
	pm.Partition = int32(p)
	return pm, nil
}

// NewSubscriber returns a consumer-group subscriber that starts from the oldest offset, so events published before
// the group first joins are still delivered. SubscribeInitialize creates a topic with the given partitions.
func NewSubscriber(brokers []string, group string, partitions int32, logger watermill.LoggerAdapter) (*kafka.Subscriber, error) {
	cfg := kafka.DefaultSaramaSubscriberConfig()
	cfg.Version = Version
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest

	return kafka.NewSubscriber(kafka.SubscriberConfig{
		Brokers:               brokers,
		Unmarshaler:           kafka.DefaultMarshaler{},
		OverwriteSaramaConfig: cfg,
		ConsumerGroup:         group,
		// One replica is plenty for a demo topic; a real one takes the replication factor the cluster asks for.
		InitializeTopicDetails: &sarama.TopicDetail{
			NumPartitions:     partitions,
			ReplicationFactor: 1,
		},
	}, logger)
}
