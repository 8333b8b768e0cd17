// Package prommetrics exports what the inbox does as Prometheus metrics: an inbox.Observer backed by counters, and
// a collector of how far back each consumer's inbox remembers. Everything is registered on the
// prometheus.Registerer you pass, never on the global one, so nothing happens on import and tests can use a fresh
// registry. To export two inbox tables from one process, wrap the registerer of each of them (the first one too:
// Prometheus wants every series of a metric to have the same label names) with a label of its own:
//
//	reg := prometheus.WrapRegistererWith(prometheus.Labels{"table": "billing_inbox"}, prometheus.DefaultRegisterer)
//	obs, err := prommetrics.NewObserver(reg)
//	...
//	ib, err := inbox.New(db, inbox.WithTable("billing_inbox"), inbox.WithObserver(obs))
//
// The metrics:
//
//	watermill_inbox_claims_total{consumer}                 messages claimed, before the handler ran
//	watermill_inbox_duplicates_skipped_total{consumer}     copies of applied messages, skipped
//	watermill_inbox_dead_letters_total{consumer,reason}    messages dead-lettered, by reason
//	watermill_inbox_lease_takeovers_total{consumer}        expired leases taken over (lease mode)
//	watermill_inbox_rows_cleaned_total                     rows deleted by the cleanup
//	watermill_inbox_oldest_row_age_seconds{consumer}       how far back the inbox remembers (RegisterOldestRowAge)
//	watermill_inbox_oldest_row_age_errors_total            scrapes whose oldest-row query failed
package prommetrics

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	inbox "github.com/effectively-once/watermill-inbox"
)

// DefaultQueryTimeout bounds the oldest-row query of one scrape unless RegisterOldestRowAge is given another
// timeout: well under Prometheus's default scrape timeout of 10 seconds, so a slow database costs one metric, not
// the whole scrape.
const DefaultQueryTimeout = 5 * time.Second

// Observer is an inbox.Observer that counts what the inbox does in Prometheus counters. Build it with NewObserver
// and pass it to inbox.WithObserver. It is safe for concurrent use; one Observer may serve several Inboxes and
// Cleaners of one table.
type Observer struct {
	claims      *prometheus.CounterVec
	duplicates  *prometheus.CounterVec
	deadLetters *prometheus.CounterVec
	takeovers   *prometheus.CounterVec
	cleaned     prometheus.Counter
}

var _ inbox.Observer = (*Observer)(nil)

// NewObserver creates the inbox's counters and registers them on reg. It fails if reg already has them, as when
// NewObserver is called twice with one registry: share the first Observer instead.
func NewObserver(reg prometheus.Registerer) (*Observer, error) {
	if reg == nil {
		return nil, fmt.Errorf("prommetrics: NewObserver: the registerer is nil")
	}
	o := &Observer{
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "watermill_inbox_claims_total",
			Help: "Messages the inbox claimed for a consumer, counted before the handler ran.",
		}, []string{"consumer"}),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "watermill_inbox_duplicates_skipped_total",
			Help: "Copies of messages a consumer had applied before, skipped without running the handler.",
		}, []string{"consumer"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "watermill_inbox_dead_letters_total",
			Help: "Messages published to the dead-letter topic, by reason (missing_id, invalid_id, attempts_exhausted, ...).",
		}, []string{"consumer", "reason"}),
		takeovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "watermill_inbox_lease_takeovers_total",
			Help: "Lease-mode messages taken over from a holder whose lease had expired: it died or hung mid-handler.",
		}, []string{"consumer"}),
		cleaned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "watermill_inbox_rows_cleaned_total",
			Help: "Inbox rows deleted by the cleanup after their retention ran out.",
		}),
	}
	for _, c := range []prometheus.Collector{o.claims, o.duplicates, o.deadLetters, o.takeovers, o.cleaned} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("prommetrics: register the inbox's counters: %w", err)
		}
	}
	return o, nil
}

// Claimed counts a claim of consumer.
func (o *Observer) Claimed(consumer string) { o.claims.WithLabelValues(consumer).Inc() }

// DuplicateSkipped counts a skipped duplicate of consumer.
func (o *Observer) DuplicateSkipped(consumer string) { o.duplicates.WithLabelValues(consumer).Inc() }

// DeadLettered counts a dead letter of consumer for reason.
func (o *Observer) DeadLettered(consumer, reason string) {
	o.deadLetters.WithLabelValues(consumer, reason).Inc()
}

// LeaseTakenOver counts a takeover of an expired lease of consumer.
func (o *Observer) LeaseTakenOver(consumer string) { o.takeovers.WithLabelValues(consumer).Inc() }

// RowsCleaned adds n to the rows deleted by the cleanup.
func (o *Observer) RowsCleaned(n int64) { o.cleaned.Add(float64(n)) }

// RegisterOldestRowAge registers on reg a collector that, at every scrape, asks the database how far back the
// inbox remembers (inbox.Remembers) and exports it per consumer as watermill_inbox_oldest_row_age_seconds. The
// query is one index probe per consumer, bounded by timeout (DefaultQueryTimeout when zero). When it fails, the
// gauge is left out of that scrape and watermill_inbox_oldest_row_age_errors_total goes up, so an unreachable
// database does not fail the scrape of everything else the process exports. opts name the table as for
// inbox.New; they are checked now.
//
// Alert on it with the window your sources need, for consumers older than that window (docs/retention.md):
//
//	watermill_inbox_oldest_row_age_seconds < 31 * 86400
//	  and max_over_time(watermill_inbox_oldest_row_age_seconds[30d]) >= 31 * 86400
func RegisterOldestRowAge(reg prometheus.Registerer, db *sql.DB, timeout time.Duration, opts ...inbox.Option) error {
	if reg == nil {
		return fmt.Errorf("prommetrics: RegisterOldestRowAge: the registerer is nil")
	}
	if timeout < 0 {
		return fmt.Errorf("prommetrics: RegisterOldestRowAge: timeout %s: want zero (the default) or positive", timeout)
	}
	if timeout == 0 {
		timeout = DefaultQueryTimeout
	}
	if _, err := inbox.New(db, opts...); err != nil { // checks the options without touching the database
		return fmt.Errorf("prommetrics: RegisterOldestRowAge: %w", err)
	}
	c := &oldestRowAge{
		db:      db,
		opts:    opts,
		timeout: timeout,
		age: prometheus.NewDesc("watermill_inbox_oldest_row_age_seconds",
			"How far back the inbox remembers a consumer's messages: the age of its oldest row that the cleanup may delete, "+
				"by the database clock. A copy redelivered from further back is applied again.",
			[]string{"consumer"}, nil),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "watermill_inbox_oldest_row_age_errors_total",
			Help: "Scrapes whose query for watermill_inbox_oldest_row_age_seconds failed or timed out.",
		}),
	}
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("prommetrics: register watermill_inbox_oldest_row_age_seconds: %w", err)
	}
	return nil
}

// oldestRowAge queries at scrape time rather than caching what a Cleaner saw: the value is then as fresh as the
// scrape, and it exists in every process that registers it, whether or not that process runs the cleanup.
type oldestRowAge struct {
	db      *sql.DB
	opts    []inbox.Option
	timeout time.Duration
	age     *prometheus.Desc
	errors  prometheus.Counter
}

func (c *oldestRowAge) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.age
	c.errors.Describe(ch)
}

func (c *oldestRowAge) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	ms, err := inbox.Remembers(ctx, c.db, c.opts...)
	if err != nil {
		c.errors.Inc()
	}
	for _, m := range ms {
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, m.Age.Seconds(), m.Consumer)
	}
	c.errors.Collect(ch)
}
