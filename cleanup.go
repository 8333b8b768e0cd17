package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/effectively-once/watermill-inbox/internal/maintain"
	"github.com/effectively-once/watermill-inbox/internal/store"
	"github.com/effectively-once/watermill-inbox/observe"
)

const (
	// DefaultRetention is how long Cleanup and the Cleaner keep a row after its last state change unless
	// CleanupParams.Retention says otherwise: a week of redelivery (a default Kafka topic, Pub/Sub's unacked
	// messages, GitHub's redeliveries) plus a week of margin. docs/guides/retention.md has the sources' windows; a
	// Stripe resend from the Dashboard (15 days) or the CLI (30), or a Pub/Sub seek (31), needs more.
	DefaultRetention = 14 * 24 * time.Hour

	// DefaultCleanupBatch is how many rows one cleanup DELETE removes at most unless CleanupParams.BatchSize
	// says otherwise: big enough that a batch's round trip is noise, small enough that its row locks and WAL
	// burst last milliseconds.
	DefaultCleanupBatch = 10_000

	// DefaultCleanupInterval is how long the Cleaner waits between rounds unless CleanerConfig.Interval says
	// otherwise. Rows live at most Retention plus this long.
	DefaultCleanupInterval = time.Hour

	// MaxCleanupBatch is the largest CleanupParams.BatchSize accepted: past it a batch is a bulk delete again.
	MaxCleanupBatch = 1_000_000

	// DefaultCleanupRest is how many times as long as a batch took the cleanup rests after it when
	// CleanupParams.Pause is zero: the round then keeps a database backend busy a twenty-first of the time at most.
	// At 10^8 retained rows a rest of five times raised the claims' p99 1.62 times during the cleanup, and twenty
	// times 1.32 (docs/results/scale).
	DefaultCleanupRest = 20
)

// CleanupParams says which rows Cleanup deletes and how fast.
type CleanupParams struct {
	// Retention is how long a row is kept after its last state change (processed_at, by the database clock):
	// for transaction-mode rows the commit of their claim, for lease-mode rows the time they became 'done',
	// 'failed' or 'released'. Defaults to DefaultRetention (14 days); must be positive. Choose it from the longest
	// redelivery among your sources, plus a margin: a copy redelivered after its row is deleted is applied again.
	Retention time.Duration

	// BatchSize is the most rows one DELETE removes. Defaults to DefaultCleanupBatch (10,000); 1 to
	// MaxCleanupBatch.
	BatchSize int

	// Pause is how long to wait after each batch that deleted rows, to let replicas and autovacuum keep up on a
	// first cleanup of a large backlog. When zero, the default, the round rests after each such batch twenty
	// times as long as the batch took (DefaultCleanupRest): a batch's deletes are WAL that every claim's commit beside
	// it waits to flush, and the rests spread them out (docs/results/cleanup-latency.md measures both). Give a pause of
	// your own to be gentler, or 1ns to run flat out. Must not be negative.
	Pause time.Duration

	// Progress, when set, is called after each batch that deleted rows, on the calling goroutine.
	Progress func(CleanupProgress)
}

// CleanupProgress reports one batch of a cleanup, for progress output.
type CleanupProgress struct {
	// Consumer is the consumer whose rows the batch deleted.
	Consumer string
	// Batch counts the DELETE statements this cleanup has run, this one included, as CleanupResult.Batches does.
	Batch int
	// Deleted is how many rows this batch deleted.
	Deleted int64
	// Total is how many rows this cleanup has deleted so far, this batch included.
	Total int64
}

// CleanupResult is what one Cleanup round did.
type CleanupResult struct {
	// Skipped is true when another instance held the cleanup lock of this table: this round deleted nothing, and
	// the other instance's round does the work.
	Skipped bool
	// Cutoff is the database time before which a row's last state change had to lie for it to be deleted.
	Cutoff time.Time
	// Deleted is how many rows were deleted.
	Deleted int64
	// Batches is how many short transactions the round ran, the final empty ones included.
	Batches int
	// PartitionsCreated and PartitionsDropped count the partitions the round created and dropped, with
	// WithPartitions. The rows of a dropped partition are not counted in Deleted.
	PartitionsCreated, PartitionsDropped int
	// Abandoned counts 'processing' rows whose lease ran out before Cutoff. They are left in place: see Cleanup.
	Abandoned int64
	// Took is how long the round took.
	Took time.Duration
}

// Cleanup deletes the inbox rows whose last state change is older than p.Retention, in batches of p.BatchSize
// repeated until a batch finds nothing to delete, and reports each batch to the observer (RowsCleaned). Run it from
// cron (the watermill-inbox CLI's cleanup command does), or let a Cleaner run it.
//
// Each batch is its own short transaction, so row locks and WAL bursts stay small and message claims, which insert
// new keys, are never blocked. On PostgreSQL the round finds, through the BRIN index of migration 007 (dialect/postgres/migrations), the pages
// that hold expired rows of any consumer and deletes them window by window in page order, reading each page once,
// then summarizes those pages' ranges afresh; on MySQL and MariaDB each batch walks one consumer's expired rows
// oldest first through an index. With WithPartitions the round first creates and drops partitions (see
// WithPartitions) and then deletes rows of the default partition only. Many instances may call Cleanup at once: a lock row in the table's "_locks" table (migration 006) lets
// one of them work, and the others return at once with Skipped set. The lock is held for a time by the database
// clock and extended with each batch, so a cleaner that dies holds it for a few minutes at most; unlike a session
// lock it works through a transaction-pooling proxy such as pgbouncer.
//
// Rows in 'processing' (lease mode) are never deleted. While their lease is live a holder is running the handler.
// Once it has run out, the holder died and the next copy of the message takes the row over; until one does, the
// row is the only trace of a message whose side effect may have happened. Deleting it would let a late copy run
// the handler from the first attempt without a word, so Cleanup counts such rows whose lease ran out before the
// cutoff (CleanupResult.Abandoned), logs them as an error, and leaves them to an operator (the CLI's stats and
// forget commands).
//
// Cleanup reads WithTable, WithLogger, WithObserver and WithPartitions. A cancelled ctx stops it between or during
// batches; the batches already committed stay deleted.
func (d *Database) Cleanup(ctx context.Context, p CleanupParams, opts ...MaintenanceOption) (CleanupResult, error) {
	if err := d.check("Cleanup: "); err != nil {
		return CleanupResult{}, err
	}
	c, err := newMaintenanceConfig(opts)
	if err != nil {
		return CleanupResult{}, err
	}
	p.setDefaults()
	if err := p.validate(); err != nil {
		return CleanupResult{}, err
	}
	return cleanup(ctx, d.ops(c.table), c, p)
}

func (p *CleanupParams) setDefaults() {
	if p.Retention == 0 {
		p.Retention = DefaultRetention
	}
	if p.BatchSize == 0 {
		p.BatchSize = DefaultCleanupBatch
	}
}

func (p CleanupParams) validate() error {
	switch {
	case p.Retention < 0:
		return fmt.Errorf("%w: CleanupParams.Retention %s: want a positive duration", ErrInvalidOption, p.Retention)
	case p.BatchSize < 1 || p.BatchSize > MaxCleanupBatch:
		return fmt.Errorf("%w: CleanupParams.BatchSize %d: want 1 to %d", ErrInvalidOption, p.BatchSize, MaxCleanupBatch)
	case p.Pause < 0:
		return fmt.Errorf("%w: CleanupParams.Pause %s: want zero or a positive duration", ErrInvalidOption, p.Pause)
	}
	return nil
}

func cleanup(ctx context.Context, o store.Ops, c config, p CleanupParams) (CleanupResult, error) {
	r, err := maintain.Cleanup(ctx, maintainEnv(o, c), maintain.CleanupParams{
		Retention: p.Retention, BatchSize: p.BatchSize, Pause: p.Pause, Rest: DefaultCleanupRest,
		PartitionPeriod: c.partitionPeriod,
		Deleted: func(ctx context.Context, consumer string, n int64, batches int, total int64) {
			c.observer.RowsCleaned(ctx, observe.CleanupEvent{Table: o.Table, Consumer: consumer, Rows: n})
			if p.Progress != nil {
				p.Progress(CleanupProgress{Consumer: consumer, Batch: batches, Deleted: n, Total: total})
			}
		},
	})
	return CleanupResult{Skipped: r.Skipped, Cutoff: r.Cutoff, Deleted: r.Deleted, Batches: r.Batches, Abandoned: r.Abandoned,
		PartitionsCreated: r.PartitionsCreated, PartitionsDropped: r.PartitionsDropped, Took: r.Took}, err
}

// CleanerConfig configures a Cleaner.
type CleanerConfig struct {
	// CleanupParams are each round's parameters, with Cleanup's defaults. Progress, when set, is called from the
	// goroutine that runs the Cleaner.
	CleanupParams

	// Interval is how long the Cleaner waits after a round before the next. Defaults to DefaultCleanupInterval
	// (1 hour); at least one second.
	Interval time.Duration

	// Window is the longest redelivery among the consumers' sources (docs/guides/retention.md has a table): how far back
	// the inbox must remember. When set, the Cleaner checks after each round it ran how far back each consumer
	// remembers (Remembers), and logs ErrShortMemory for a consumer it saw covering the window before and no
	// longer does. Defaults to zero, which turns the check off. It must be shorter than Retention: rounds run at
	// intervals, and on MySQL and MariaDB a consumer's oldest row right after a round can be younger than Retention
	// by the gap in its traffic at that point; without a margin the alarm would fire on every quiet moment.
	Window time.Duration
}

// Cleaner deletes expired inbox rows in the background, one Cleanup round every Interval, and raises the
// retention alarm. It holds no goroutine of its own: Run blocks until its context ends. Run one in every instance
// of a service if that is simpler than choosing one; the cleanup lock lets one clean per round while the others
// skip.
type Cleaner struct {
	ops   store.Ops
	cfg   CleanerConfig
	c     config
	watch *maintain.Watch
}

// NewCleaner checks cfg and the options (it reads WithTable, WithLogger, WithObserver and WithPartitions) and
// returns a Cleaner over d. It does not touch the database.
func (d *Database) NewCleaner(cfg CleanerConfig, opts ...MaintenanceOption) (*Cleaner, error) {
	if err := d.check("NewCleaner: "); err != nil {
		return nil, err
	}
	c, err := newMaintenanceConfig(opts)
	if err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if cfg.Interval == 0 {
		cfg.Interval = DefaultCleanupInterval
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	switch {
	case cfg.Interval < time.Second:
		return nil, fmt.Errorf("%w: CleanerConfig.Interval %s: want at least 1s", ErrInvalidOption, cfg.Interval)
	case cfg.Window < 0:
		return nil, fmt.Errorf("%w: CleanerConfig.Window %s: want zero (no alarm) or a positive duration", ErrInvalidOption, cfg.Window)
	case cfg.Window >= cfg.Retention:
		return nil, fmt.Errorf("%w: CleanerConfig.Window %s is not shorter than Retention %s: the inbox would forget "+
			"messages that can still be redelivered; keep them longer than the window, with a margin", ErrInvalidOption, cfg.Window, cfg.Retention)
	}
	cl := &Cleaner{ops: d.ops(c.table), cfg: cfg, c: c}
	if cfg.Window > 0 {
		cl.watch = maintain.NewWatch(cfg.Window, ErrShortMemory)
	}
	return cl, nil
}

// Run runs a round at once and then one every Interval, until ctx ends, and then returns nil. A failed round is
// logged and the next one runs on schedule: a database that is down for a while only delays the cleanup. Start it
// with `go cleaner.Run(ctx)` and stop it by cancelling ctx; a round in flight stops too, its committed batches
// staying deleted.
func (cl *Cleaner) Run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := cl.Round(ctx); err != nil && ctx.Err() == nil {
			cl.c.logger.Error("Inbox cleanup failed; retrying next round", err,
				watermill.LogFields{"table": cl.ops.Table, "next_round_in": cl.cfg.Interval.String()})
		}
		t.Reset(cl.cfg.Interval)
	}
}

// Round runs one cleanup round now, as Cleanup does, and, if this instance held the lock and Window is set, the
// retention check. Run calls it; call it yourself to drive the Cleaner from a scheduler of your own.
func (cl *Cleaner) Round(ctx context.Context) (CleanupResult, error) {
	res, err := cleanup(ctx, cl.ops, cl.c, cl.cfg.CleanupParams)
	if err != nil || res.Skipped || cl.watch == nil {
		return res, err
	}
	ms, err := remembers(ctx, cl.ops)
	if err != nil {
		return res, err
	}
	memory := make([]maintain.Memory, len(ms))
	for i, m := range ms {
		memory[i] = maintain.Memory{Consumer: m.Consumer, Oldest: m.Oldest, Age: m.Age}
	}
	cl.watch.Check(memory, cl.ops.Table, cl.c.logger)
	return res, nil
}
