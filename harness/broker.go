package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"
)

// kafkaVersion is the protocol version every Sarama client of the harness speaks. It carries the rebalance timeout
// in JoinGroup (version 1 and later), which the zombie measurement depends on. It is the newest Sarama 1.43 and
// kfake agree on: from 2.4, the first version with flexible group requests, Sarama fails to decode kfake's
// group responses ("invalid byteslice length").
var kafkaVersion = sarama.V2_3_0_0

// broker is the Kafka cluster a measurement runs against: kfake inside the harness process, or a real cluster
// given with --brokers. Only consumers are ever killed, so an in-process broker outlives every fault.
type broker struct {
	addrs []string
	fake  *kfake.Cluster // nil for a real cluster
	admin sarama.ClusterAdmin
	cl    sarama.Client
}

// startBroker connects to addrs, or starts kfake when addrs is empty. minSession lowers kfake's floor for group
// session timeouts (Kafka's default is 6 s), so the short timeouts of the fault runs are accepted.
func startBroker(addrs []string, minSession time.Duration) (*broker, error) {
	b := &broker{addrs: addrs}
	if len(addrs) == 0 {
		opts := []kfake.Opt{kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(minSession)}
		c, err := kfake.NewCluster(opts...)
		if err != nil {
			return nil, fmt.Errorf("start kfake: %w", err)
		}
		b.fake, b.addrs = c, c.ListenAddrs()
	}
	cfg := sarama.NewConfig()
	cfg.Version = kafkaVersion
	cfg.ClientID = "harness-admin"
	cl, err := sarama.NewClient(b.addrs, cfg)
	if err != nil {
		b.close()
		return nil, fmt.Errorf("connect to %v: %w", b.addrs, err)
	}
	b.cl = cl
	admin, err := sarama.NewClusterAdminFromClient(cl)
	if err != nil {
		b.close()
		return nil, err
	}
	b.admin = admin
	return b, nil
}

func (b *broker) close() {
	if b.admin != nil {
		_ = b.admin.Close() // closes b.cl too
	} else if b.cl != nil {
		_ = b.cl.Close()
	}
	if b.fake != nil {
		b.fake.Close()
	}
}

// createTopic creates topic with partitions and waits until its metadata shows them all, so that the first
// publish does not race the topic's creation on a real cluster.
func (b *broker) createTopic(topic string, partitions int) error {
	err := b.admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: int32(partitions), ReplicationFactor: 1}, false)
	if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := b.cl.RefreshMetadata(topic); err == nil {
			if ps, err := b.cl.Partitions(topic); err == nil && len(ps) == partitions {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s: partitions did not appear", topic)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// deleteTopic frees the broker's memory of a finished run; a failure only costs memory, so it is not an error.
func (b *broker) deleteTopic(topic string) { _ = b.admin.DeleteTopic(topic) }

// backlog returns how many messages of topic the group has not committed yet: the sum over partitions of the high
// watermark minus the committed offset (or minus zero when the group has never committed there).
func (b *broker) backlog(topic, group string) (int64, error) {
	parts, err := b.cl.Partitions(topic)
	if err != nil {
		return 0, err
	}
	committed, err := b.admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: parts})
	if err != nil {
		return 0, err
	}
	var total int64
	for _, p := range parts {
		hwm, err := b.cl.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return 0, err
		}
		off := int64(0)
		if blk := committed.GetBlock(topic, p); blk != nil && blk.Err == sarama.ErrNoError && blk.Offset > 0 {
			off = blk.Offset
		}
		total += hwm - off
	}
	return total, nil
}

// groupMembers returns the group's current members as member ID -> client ID. A member the coordinator evicted
// is missing from it, whatever the evicted process still believes.
func (b *broker) groupMembers(group string) (map[string]string, error) {
	ds, err := b.admin.DescribeConsumerGroups([]string{group})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, d := range ds {
		if d.Err != sarama.ErrNoError {
			return nil, fmt.Errorf("describe group %s: %w", group, d.Err)
		}
		for id, m := range d.Members {
			out[id] = m.ClientId
		}
	}
	return out, nil
}

// brokerList parses the --brokers flag: comma-separated host:port pairs, empty for kfake.
func brokerList(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
