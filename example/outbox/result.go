package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// result is what a run observed.
type result struct {
	Brokers        []string
	InProcess      bool
	DepositsTopic  string
	CreditedTopic  string
	Unique         int             // deposits published once or more
	Resent         int             // of those, published a second time with the same event ID
	Credits        int             // ledger lines: deposits that reached a balance
	WalletSkipped  int64           // duplicate deposits the wallet's inbox skipped
	Waiting        int             // credited events in the outbox when the relay started
	NotifiedEarly  int             // notifications recorded before the relay started
	RelayPublishes int64           // the relay's publishes that reached Kafka, resends included
	RelayResent    int64           // of those, the ones whose ack was lost, so the event went out again
	LeftInOutbox   int             // events still in the outbox after the relay stopped
	Notifications  int             // notification rows
	NotifiedEvents int             // distinct credited events among them
	NotifySkipped  int64           // duplicate credited events the notifications inbox skipped
	Balances       map[int64]int64 // account ID to balance
	Expected       map[int64]int64 // account ID to the sum of its unique deposits
}

// problems describes every way the run fell short of effectively-once, or is empty.
func (r result) problems() []string {
	var p []string
	for _, id := range slices.Sorted(maps.Keys(r.Expected)) {
		if got, want := r.Balances[id], r.Expected[id]; got != want {
			p = append(p, fmt.Sprintf("account %d has %d, want %d", id, got, want))
		}
	}
	if r.Credits != r.Unique {
		p = append(p, fmt.Sprintf("%d credits applied, want one per deposit: %d", r.Credits, r.Unique))
	}
	if r.Waiting != r.Credits {
		p = append(p, fmt.Sprintf("%d events waited in the outbox, want one per credit: %d", r.Waiting, r.Credits))
	}
	if r.LeftInOutbox != 0 {
		p = append(p, fmt.Sprintf("%d events left in the outbox after the relay, want none", r.LeftInOutbox))
	}
	if r.NotifiedEarly != 0 {
		p = append(p, fmt.Sprintf("%d notifications before the relay started, want none", r.NotifiedEarly))
	}
	if r.Notifications != r.Credits || r.NotifiedEvents != r.Credits {
		p = append(p, fmt.Sprintf("%d notifications for %d distinct events, want one per credit: %d",
			r.Notifications, r.NotifiedEvents, r.Credits))
	}
	return p
}

func (r result) print(w io.Writer) {
	where := "KAFKA_BROKERS"
	if r.InProcess {
		where = "in-process kfake"
	}
	fmt.Fprintf(w, "kafka:          %s (%s), topics %s and %s\n", strings.Join(r.Brokers, ","), where, r.DepositsTopic, r.CreditedTopic)
	fmt.Fprintf(w, "deposits:       %d unique, %d published twice\n", r.Unique, r.Resent)
	fmt.Fprintf(w, "wallet:         %d credits applied, %d duplicate deposits skipped; then stopped, before any relay ran\n", r.Credits, r.WalletSkipped)
	fmt.Fprintf(w, "outbox:         %d events waiting when the relay started (%d notifications sent before it)\n", r.Waiting, r.NotifiedEarly)
	fmt.Fprintf(w, "relay:          %d publishes to Kafka, %d of them again after a lost ack; %d events left in the outbox\n",
		r.RelayPublishes, r.RelayResent, r.LeftInOutbox)
	fmt.Fprintf(w, "notifications:  %d applied for %d distinct events, %d duplicates skipped\n\n", r.Notifications, r.NotifiedEvents, r.NotifySkipped)
	fmt.Fprintf(w, "%-8s %8s %8s\n", "account", "balance", "expected")
	for _, id := range slices.Sorted(maps.Keys(r.Expected)) {
		fmt.Fprintf(w, "%-8d %8d %8d\n", id, r.Balances[id], r.Expected[id])
	}
}
