package main

import (
	"testing"
	"time"
)

// Every field a parent sets must reach the consumer process: one that args leaves out would silently take the
// flag's default, and the run would measure another consumer than the one it names.
func TestConsumerConfig_ArgsParseBackToTheSameConfig(t *testing.T) {
	want := consumerConfig{
		Transport: amqpTransport, Addr: "amqp://127.0.0.1:5672/", Variant: batchPgxVariant, Run: "run-1", Topic: "topic-1",
		Name: "consumer-1", DSN: "postgres://127.0.0.1/db", Sleep: 7 * time.Millisecond, Pool: 12,
		Session: 3 * time.Second, Heartbeat: 300 * time.Millisecond, Rebalance: 4 * time.Second,
		CrashAfterCommit: 5, StallEvery: 9, StallFor: 6 * time.Second, Expect: 100, Messages: "/tmp/messages",
		InFlight: 8, Batch: batchConfig{Wait: time.Millisecond, Size: 16, Concurrency: 3},
	}
	args := want.args()
	if args[0] != "consume" {
		t.Fatalf("args start with %q, want the consume command", args[0])
	}
	got, err := parseConsumerConfig(args[1:])
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("parsed back\n%+v\nwant\n%+v", got, want)
	}
}

func TestParseConsumerConfig_RefusesAfterDBSyncOutsideKafka(t *testing.T) {
	_, err := parseConsumerConfig([]string{"--transport", string(redisTransport), "--addr", "127.0.0.1:6379",
		"--variant", string(afterDBSync), "--run", "r"})
	if err == nil {
		t.Fatal("after-db-sync over redis-streams was accepted; it commits Kafka offsets and means nothing elsewhere")
	}
}
