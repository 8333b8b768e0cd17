// Package prommetrics exports what the inbox does as Prometheus metrics: an observe.Observer backed by counters, and
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
// The metrics (durations in seconds):
//
//	watermill_inbox_claims_total{consumer,mode}                    messages claimed, before the handler ran
//	watermill_inbox_claim_duration_seconds{consumer,mode}          how long claims took, duplicates' included
//	watermill_inbox_duplicates_skipped_total{consumer,mode}        copies of applied messages, skipped
//	watermill_inbox_commit_duration_seconds{consumer,mode}         how long commits took, failed ones included
//	watermill_inbox_commit_failures_total{consumer,mode}           commits that failed
//	watermill_inbox_finished_total{consumer,mode,outcome}          claimed messages by how they ended
//	watermill_inbox_dead_letters_total{consumer,reason}            messages dead-lettered, by reason
//	watermill_inbox_nacks_total{consumer,reason}                   messages held back for the reject delay, by reason
//	watermill_inbox_lease_takeovers_total{consumer}                expired leases taken over (lease mode)
//	watermill_inbox_leases_lost_total{consumer}                    holders whose lease was taken over (lease mode)
//	watermill_inbox_rows_cleaned_total{consumer}                   rows deleted by the cleanup
//	watermill_inbox_fingerprint_conflicts_total{consumer,mode,action}  event IDs reused for another message (WithFingerprint)
//	watermill_inbox_oldest_row_age_seconds{consumer}               how far back the inbox remembers (RegisterOldestRowAge)
//	watermill_inbox_oldest_row_age_errors_total                    scrapes whose oldest-row query failed
//	watermill_inbox_redelivery_window_seconds                      the window the inbox must remember (RegisterRedeliveryWindow)
//
// rules/alerts.yml holds alerting rules over these metrics, tested with promtool (rules/alerts_test.yml): a
// retention shorter than the redelivery window, dead letters, leases that expire, slow claims, a schema that is not
// ready. Load it from prometheus.yml's rule_files.
//
// Alert on watermill_inbox_nacks_total, watermill_inbox_leases_lost_total and
// watermill_inbox_commit_failures_total: each counts something that repeats until someone acts, or that made a
// handler's work count for nothing.
package prommetrics

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/observe"
)

// DefaultQueryTimeout bounds the oldest-row query of one scrape unless RegisterOldestRowAge is given another
// timeout: well under Prometheus's default scrape timeout of 10 seconds, so a slow database costs one metric, not
// the whole scrape.
const DefaultQueryTimeout = 5 * time.Second

// Observer is an observe.Observer that exports what the inbox does as Prometheus counters and histograms. Build it
// with NewObserver and pass it to inbox.WithObserver. It is safe for concurrent use; one Observer may serve several
// Inboxes and Cleaners of one table.
type Observer struct {
	claims         *prometheus.CounterVec
	claimDuration  *prometheus.HistogramVec
	duplicates     *prometheus.CounterVec
	commitDuration *prometheus.HistogramVec
	commitFailures *prometheus.CounterVec
	finished       *prometheus.CounterVec
	deadLetters    *prometheus.CounterVec
	nacks          *prometheus.CounterVec
	takeovers      *prometheus.CounterVec
	leasesLost     *prometheus.CounterVec
	cleaned        *prometheus.CounterVec
	conflicts      *prometheus.CounterVec
}

var (
	_ observe.Observer      = (*Observer)(nil)
	_ observe.LeaseObserver = (*Observer)(nil)
)

// DurationBuckets returns the upper bounds, in seconds, of the claim and commit duration histograms: from half a
// millisecond, a claim on a local database, to ten seconds, a database that is struggling.
func DurationBuckets() []float64 { return slices.Clone(durationBuckets) }

var durationBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// NewObserver creates the inbox's metrics and registers them on reg. It fails if reg already has them, as when
// NewObserver is called twice with one registry: share the first Observer instead.
func NewObserver(reg prometheus.Registerer) (*Observer, error) {
	if reg == nil {
		return nil, fmt.Errorf("prommetrics: NewObserver: the registerer is nil")
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	histogram := func(name, help string, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: DurationBuckets()}, labels)
	}
	o := &Observer{
		claims: counter("watermill_inbox_claims_total",
			"Messages the inbox claimed for a consumer, counted before the handler ran.", "consumer", "mode"),
		claimDuration: histogram("watermill_inbox_claim_duration_seconds",
			"How long the inbox took to claim a message, or to find it applied before, in seconds.", "consumer", "mode"),
		duplicates: counter("watermill_inbox_duplicates_skipped_total",
			"Copies of messages a consumer had applied before, skipped without running the handler.", "consumer", "mode"),
		commitDuration: histogram("watermill_inbox_commit_duration_seconds",
			"How long the commit of a claimed message took, failed commits included, in seconds.", "consumer", "mode"),
		commitFailures: counter("watermill_inbox_commit_failures_total",
			"Commits of claimed messages that failed: the effect was not recorded, and the message is nacked.", "consumer", "mode"),
		finished: counter("watermill_inbox_finished_total",
			"Claimed messages by how they ended (committed, failed, dead_lettered, lease_lost, duplicate).", "consumer", "mode", "outcome"),
		deadLetters: counter("watermill_inbox_dead_letters_total",
			"Messages published to the dead-letter topic, by reason (missing_id, invalid_id, attempts_exhausted, ...).", "consumer", "reason"),
		nacks: counter("watermill_inbox_nacks_total",
			"Messages the inbox held back for the reject delay, by reason: unusable ones without a dead-letter topic "+
				"(missing_id, attempts_exhausted, ...), dead_letter_failed, schema, config, consumer_ids, client_encoding, database.", "consumer", "reason"),
		takeovers: counter("watermill_inbox_lease_takeovers_total",
			"Lease-mode messages taken over from a holder whose lease had expired: it died or hung mid-handler.", "consumer"),
		leasesLost: counter("watermill_inbox_leases_lost_total",
			"Lease-mode holders whose write was refused because their lease had been taken over: their result is lost.", "consumer"),
		cleaned: counter("watermill_inbox_rows_cleaned_total",
			"Inbox rows deleted by the cleanup after their retention ran out.", "consumer"),
		conflicts: counter("watermill_inbox_fingerprint_conflicts_total",
			"Copies whose event ID was applied before for another message (WithFingerprint), by what became of them "+
				"(skipped, dead_lettered): the producer reuses IDs.", "consumer", "mode", "action"),
	}
	for _, c := range []prometheus.Collector{o.claims, o.claimDuration, o.duplicates, o.commitDuration, o.commitFailures,
		o.finished, o.deadLetters, o.nacks, o.takeovers, o.leasesLost, o.cleaned, o.conflicts} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("prommetrics: register the inbox's metrics: %w", err)
		}
	}
	return o, nil
}

// Claimed counts a claim and observes how long it took.
func (o *Observer) Claimed(ctx context.Context, e observe.ClaimEvent) context.Context {
	o.claims.WithLabelValues(e.Consumer, string(e.Mode)).Inc()
	o.claimDuration.WithLabelValues(e.Consumer, string(e.Mode)).Observe(e.Duration.Seconds())
	return ctx
}

// DuplicateSkipped counts a skipped duplicate and observes how long its claim took.
func (o *Observer) DuplicateSkipped(_ context.Context, e observe.SkipEvent) {
	o.duplicates.WithLabelValues(e.Consumer, string(e.Mode)).Inc()
	o.claimDuration.WithLabelValues(e.Consumer, string(e.Mode)).Observe(e.Duration.Seconds())
}

// Committed observes how long a commit took, and counts it if it failed.
func (o *Observer) Committed(_ context.Context, e observe.CommitEvent) {
	o.commitDuration.WithLabelValues(e.Consumer, string(e.Mode)).Observe(e.Duration.Seconds())
	if e.Err != nil {
		o.commitFailures.WithLabelValues(e.Consumer, string(e.Mode)).Inc()
	}
}

// Finished counts a claimed message by its outcome.
func (o *Observer) Finished(_ context.Context, e observe.FinishEvent) {
	o.finished.WithLabelValues(e.Consumer, string(e.Mode), string(e.Outcome)).Inc()
}

// DeadLettered counts a dead letter by its reason.
func (o *Observer) DeadLettered(_ context.Context, e observe.DeadLetterEvent) {
	o.deadLetters.WithLabelValues(e.Consumer, e.Reason).Inc()
}

// Nacked counts a message held back by its reason.
func (o *Observer) Nacked(_ context.Context, e observe.NackEvent) {
	o.nacks.WithLabelValues(e.Consumer, e.Reason).Inc()
}

// LeaseTakenOver counts a takeover of an expired lease.
func (o *Observer) LeaseTakenOver(_ context.Context, e observe.LeaseEvent) {
	o.takeovers.WithLabelValues(e.Consumer).Inc()
}

// LeaseLost counts a holder that lost its lease.
func (o *Observer) LeaseLost(_ context.Context, e observe.LeaseEvent) {
	o.leasesLost.WithLabelValues(e.Consumer).Inc()
}

// RowsCleaned adds the rows a cleanup batch deleted.
func (o *Observer) RowsCleaned(_ context.Context, e observe.CleanupEvent) {
	o.cleaned.WithLabelValues(e.Consumer).Add(float64(e.Rows))
}

// RegisterOldestRowAge registers on reg a collector that, at every scrape, asks the database how far back the
// inbox remembers (inbox.Database.Remembers) and exports it per consumer as watermill_inbox_oldest_row_age_seconds. The
// query reads one row per consumer, bounded by timeout (DefaultQueryTimeout when zero). When it fails, the
// gauge is left out of that scrape and watermill_inbox_oldest_row_age_errors_total goes up, so an unreachable
// database does not fail the scrape of everything else the process exports. db is the inbox's database on any
// dialect (inbox.OnSQL, pgxinbox.Database, mysqlinbox.Database); opts name the table as for the middleware, and
// are checked now.
//
// Alert on it with the window your sources need (RegisterRedeliveryWindow and rules/alerts.yml), for consumers
// older than that window (docs/guides/retention.md).
func RegisterOldestRowAge(reg prometheus.Registerer, db *inbox.Database, timeout time.Duration, opts ...inbox.MaintenanceOption) error {
	if reg == nil {
		return fmt.Errorf("prommetrics: RegisterOldestRowAge: the registerer is nil")
	}
	if timeout < 0 {
		return fmt.Errorf("prommetrics: RegisterOldestRowAge: timeout %s: want zero (the default) or positive", timeout)
	}
	if timeout == 0 {
		timeout = DefaultQueryTimeout
	}
	if _, err := db.Migrations(opts...); err != nil { // checks the database and the options without touching it
		return fmt.Errorf("prommetrics: RegisterOldestRowAge: %w", err)
	}
	c := &oldestRowAge{
		db:      db,
		opts:    opts,
		timeout: timeout,
		age: prometheus.NewDesc("watermill_inbox_oldest_row_age_seconds",
			"How far back the inbox remembers a consumer's messages (Database.Remembers), by the database clock. A copy "+
				"redelivered from further back is applied again.",
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

// RegisterRedeliveryWindow registers on reg the gauge watermill_inbox_redelivery_window_seconds, whose value is
// window: the longest a source may take to redeliver a message, which the inbox must remember at least as far back.
// The retention alert of rules/alerts.yml compares watermill_inbox_oldest_row_age_seconds with it. Register it on
// the same registerer as RegisterOldestRowAge, so that the two carry the same labels.
func RegisterRedeliveryWindow(reg prometheus.Registerer, window time.Duration) error {
	if reg == nil {
		return fmt.Errorf("prommetrics: RegisterRedeliveryWindow: the registerer is nil")
	}
	if window <= 0 {
		return fmt.Errorf("prommetrics: RegisterRedeliveryWindow: window %s: want a positive duration", window)
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "watermill_inbox_redelivery_window_seconds",
		Help: "The longest a source may take to redeliver a message: the inbox must remember at least this far back.",
	})
	g.Set(window.Seconds())
	if err := reg.Register(g); err != nil {
		return fmt.Errorf("prommetrics: register watermill_inbox_redelivery_window_seconds: %w", err)
	}
	return nil
}

// oldestRowAge queries at scrape time rather than caching what a Cleaner saw: the value is then as fresh as the
// scrape, and it exists in every process that registers it, whether or not that process runs the cleanup.
type oldestRowAge struct {
	db      *inbox.Database
	opts    []inbox.MaintenanceOption
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
	ms, err := c.db.Remembers(ctx, c.opts...)
	if err != nil {
		c.errors.Inc()
	}
	for _, m := range ms {
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, m.Age.Seconds(), m.Consumer)
	}
	c.errors.Collect(ch)
}

// FingerprintConflict counts a copy whose event ID was reused for another message, by what became of it.
func (o *Observer) FingerprintConflict(_ context.Context, e observe.ConflictEvent) {
	action := "skipped"
	if e.DeadLettered {
		action = "dead_lettered"
	}
	o.conflicts.WithLabelValues(e.Consumer, string(e.Mode), action).Inc()
}
