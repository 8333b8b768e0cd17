package main

import (
	"fmt"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kfake"
)

// kafkaVersion is the protocol level Sarama speaks. Watermill's default, 1.0, is older than Kafka 4 brokers accept
// (KIP-896 dropped the request versions before 2.1). From 2.4 on, Sarama reads OffsetFetch replies in the flexible
// format and fails on the null commit metadata kfake returns for a partition with no committed offset ("invalid
// byteslice length"), where Kafka itself returns an empty string. 2.3 is the newest level that works with both.
var kafkaVersion = sarama.V2_3_0_0

// startBrokers returns the brokers to use and a function that stops them. With no brokers given it starts kfake, an
// in-process broker that speaks the Kafka protocol, so the example needs nothing but PostgreSQL.
func startBrokers(brokers []string) (addrs []string, stop func(), err error) {
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

// newPublisher returns a Kafka publisher with Sarama's idempotent producer switched on. Idempotence only stops the
// producer's own network retries from writing a record twice within one session; it cannot recognise an event that
// the application publishes again, which is the inbox's job.
func newPublisher(brokers []string, logger watermill.LoggerAdapter) (message.Publisher, error) {
	cfg := kafka.DefaultSaramaSyncPublisherConfig()
	cfg.Version = kafkaVersion
	// Sarama refuses Idempotent unless acks come from all in-sync replicas, retries are allowed, only one request
	// is in flight per broker and Version is 0.11 or later.
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Retry.Max = 5
	cfg.Net.MaxOpenRequests = 1

	return kafka.NewPublisher(kafka.PublisherConfig{
		Brokers: brokers,
		// The default marshaler sends Watermill metadata as Kafka headers, which is where event_id travels. It sets
		// no key, so Sarama spreads messages over partitions at random: credits commute, and a resent copy that
		// lands on another partition than its original is exactly the duplicate no offset can recognise.
		Marshaler:             kafka.DefaultMarshaler{},
		OverwriteSaramaConfig: cfg,
	}, logger)
}

// newSubscriber returns a consumer-group subscriber that starts from the oldest offset, so events published before
// the group first joins are still delivered.
func newSubscriber(brokers []string, group string, partitions int32, logger watermill.LoggerAdapter) (*kafka.Subscriber, error) {
	cfg := kafka.DefaultSaramaSubscriberConfig()
	cfg.Version = kafkaVersion
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
