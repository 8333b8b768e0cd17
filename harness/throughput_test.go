package main

import (
	"context"
	"testing"
	"time"
)

// The throughput measurement, short: one round at 16 in flight over every transport it runs on. Each measurement
// fails unless the ledger holds a credit for every message; the inbox rows' transaction IDs then tell whether the
// transport really had that many messages in flight: with one at a time, batch mode would commit each alone.
func TestThroughput_EveryTransportHasItsMessagesInFlightAtOnce(t *testing.T) {
	e := setup(t)
	logTo(t)
	const inFlight = 16
	c := throughputConfig{Transports: throughputTransports, Variants: []variant{afterDB, inboxVariant, batchVariant, batchPgxVariant},
		InFlight: []int{inFlight}, Sleeps: []time.Duration{2 * time.Millisecond}, Runs: 1, PerSlot: 20, Messages: 1000, Ceiling: true,
		Batch: defaultBatch, Accounts: e.accounts, Timeout: 2 * time.Minute, AMQP: defaultAMQPURL}
	res, err := runThroughput(context.Background(), e, c)
	if err != nil {
		t.Fatal(err)
	}
	if want := len(c.Transports)*len(c.Variants) + 1; len(res) != want {
		t.Fatalf("%d measurements, want %d", len(res), want)
	}
	for _, r := range res {
		if r.MsgPerS <= 0 || r.Messages != inFlight*c.PerSlot {
			t.Errorf("%s/%s: %d messages at %.1f msg/s", r.Transport, r.Name, r.Messages, r.MsgPerS)
		}
		switch v := variant(r.Name); {
		case v == inboxVariant && r.Commits != r.Messages:
			t.Errorf("%s/inbox: %d messages claimed in %d transactions; want one each", r.Transport, r.Messages, r.Commits)
		case v.batched() && (r.Commits == 0 || r.Commits >= r.Messages):
			t.Errorf("%s/%s: %d messages claimed in %d transactions; with %d in flight, batches of more than one must form",
				r.Transport, v, r.Messages, r.Commits, inFlight)
		}
		t.Logf("%s/%s: %.1f msg/s, %d messages in %d claim transactions, %d nacks (%d deadlocks)",
			r.Transport, r.Name, r.MsgPerS, r.Messages, r.Commits, r.Nacks, r.Deadlocks)
	}
}
