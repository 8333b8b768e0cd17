package inboxtest

import (
	"database/sql"
	"testing"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// InFlightCounts returns the numbers of messages in flight the throughput benchmarks run at: one, a few partitions,
// a prefetch window, and as many as one batch holds.
func InFlightCounts() []int { return testkit.InFlightCounts() }

// InFlight runs handle b.N times from n goroutines at once, as a router with n messages in flight would, and
// reports msgs/s. handle gets the message's number, unique within the benchmark run.
func InFlight(b *testing.B, n int, handle func(i int) error) { testkit.InFlight(b, n, handle) }

// ThroughputTarget is one driver's part in Throughput.
type ThroughputTarget = testkit.ThroughputTarget

// Throughput compares, at each of InFlightCounts, a consumer without an inbox (bare), the inbox per message
// (inbox) and in batch mode (batch), with a zero-work handler whose effect is one UPDATE. Read msgs/s as ratios
// within one run.
func Throughput(b *testing.B, t ThroughputTarget) { testkit.Throughput(b, t) }

// StdSQLThroughput is the ThroughputTarget of a database/sql database: effect is one UPDATE of account ($1, or ?
// for MySQL), run without an inbox in a transaction of its own, and by the handler on the inbox's *sql.Tx.
func StdSQLThroughput(db *sql.DB, accounts int, effect string, newInbox func(opts ...inbox.Option) (*inbox.Inbox, error)) ThroughputTarget {
	return testkit.StdSQLThroughput(db, accounts, effect, newInbox)
}
