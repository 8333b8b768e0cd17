package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// result is what a run observed.
type result struct {
	Brokers    []string
	InProcess  bool
	Topic      string
	Requests   int            // unique payment requests
	Resent     int            // of those, published a second time
	PaymentIDs []string       // every request's payment ID
	Lease      time.Duration  // the inbox lease
	Held       string         // the payment whose first answer the provider held past the lease
	HeldCalls  []call         // the calls made for it, in the order they returned
	Calls      int64          // requests the provider received
	Charges    int64          // charges it made
	Replays    int64          // requests it answered from an earlier charge with the same key
	PerPayment map[string]int // charges made per payment ID
	Claimed    int64          // attempts the inbox let run
	Skipped    int64          // copies the inbox skipped as done
	TakenOver  int64          // attempts that took over an expired lease
	BusyNacks  int64          // copies sent back because their request's lease was live
	LostLeases int64          // holders whose result was refused because their lease had been taken over
}

// problems describes every request that was not charged exactly once, or is empty.
func (r result) problems() []string {
	var p []string
	for _, id := range r.PaymentIDs {
		if n := r.PerPayment[id]; n != 1 {
			p = append(p, fmt.Sprintf("%s charged %d times, want once", id, n))
		}
	}
	if r.Charges != int64(r.Requests) {
		p = append(p, fmt.Sprintf("%d charges for %d requests", r.Charges, r.Requests))
	}
	return p
}

func (r result) print(w io.Writer) {
	where := "KAFKA_BROKERS"
	if r.InProcess {
		where = "in-process kfake"
	}
	fmt.Fprintf(w, "kafka:     %s (%s), topic %s\n", strings.Join(r.Brokers, ","), where, r.Topic)
	fmt.Fprintf(w, "requests:  %d unique, %d published twice (the copy on another partition)\n", r.Requests, r.Resent)
	fmt.Fprintf(w, "inbox:     %s run (%s), %s refused (lease lost)\n", count(r.Claimed, "attempt", "attempts"),
		count(r.TakenOver, "takeover of an expired lease", "takeovers of an expired lease"),
		count(r.LostLeases, "late result", "late results"))
	fmt.Fprintf(w, "           %s skipped as done, %s back while a lease on its request was live\n",
		count(r.Skipped, "copy", "copies"), count(r.BusyNacks, "copy sent", "copies sent"))
	fmt.Fprintf(w, "provider:  %s, %s made, %s\n", count(r.Calls, "call", "calls"), count(r.Charges, "charge", "charges"),
		count(r.Replays, "replay of an earlier charge", "replays of an earlier charge"))

	fmt.Fprintf(w, "\n%s: the provider made the charge, then held its answer past the %s lease\n", r.Held, r.Lease)
	for _, c := range slices.SortedFunc(slices.Values(r.HeldCalls), func(a, b call) int { return cmp.Compare(a.Attempt, b.Attempt) }) {
		fmt.Fprintf(w, "  attempt %d  key %s  ", c.Attempt, c.Key)
		switch {
		case c.Err != "":
			fmt.Fprintf(w, "failed: %s\n", c.Err)
		case c.Replayed:
			fmt.Fprintf(w, "after %q: the provider replayed %s\n", c.PreviousError, c.ChargeID)
		default:
			fmt.Fprintf(w, "charged %s\n", c.ChargeID)
		}
	}
}

// count says "1 copy" or "3 copies".
func count(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
