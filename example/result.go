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
	Brokers   []string
	InProcess bool
	Topic     string
	Unique    int             // credit events published once or more
	Resent    int             // of those, published a second time with the same event ID
	Applied   int             // ledger lines: credits that reached a balance
	Skipped   int64           // "skipped duplicate" lines logged by the inbox
	Balances  map[int64]int64 // account ID to balance
	Expected  map[int64]int64 // account ID to the sum of its unique credits
}

// wrongBalances describes every account whose balance is not the sum of its unique credits.
func (r result) wrongBalances() []string {
	var wrong []string
	for _, id := range slices.Sorted(maps.Keys(r.Expected)) {
		if got, want := r.Balances[id], r.Expected[id]; got != want {
			wrong = append(wrong, fmt.Sprintf("account %d has %d, want %d", id, got, want))
		}
	}
	return wrong
}

func (r result) print(w io.Writer) {
	where := "KAFKA_BROKERS"
	if r.InProcess {
		where = "in-process kfake"
	}
	fmt.Fprintf(w, "kafka:    %s (%s), topic %s\n", strings.Join(r.Brokers, ","), where, r.Topic)
	fmt.Fprintf(w, "events:   %d unique, %d published twice, %d copies in all\n", r.Unique, r.Resent, r.Unique+r.Resent)
	fmt.Fprintf(w, "inbox:    %d applied, %d skipped as duplicates\n\n", r.Applied, r.Skipped)
	fmt.Fprintf(w, "%-8s %8s %8s\n", "account", "balance", "expected")
	for _, id := range slices.Sorted(maps.Keys(r.Expected)) {
		fmt.Fprintf(w, "%-8d %8d %8d\n", id, r.Balances[id], r.Expected[id])
	}
}
