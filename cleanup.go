package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
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
	// CleanupParams.Pause is zero: the round then keeps a database backend busy a sixth of the time at most.
	DefaultCleanupRest = 5
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
	// first cleanup of a large backlog. When zero, the default, the round rests after each such batch five times
	// as long as the batch took (DefaultCleanupRest): a batch's deletes are WAL that every claim's commit beside
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
// new keys, are never blocked. On PostgreSQL the round finds, through the BRIN index of migrations/007, the pages
// that hold expired rows of any consumer and deletes them window by window in page order, reading each page once,
// then summarizes those pages' ranges afresh; on MySQL and MariaDB each batch walks one consumer's expired rows
// oldest first through an index. With WithPartitions the round first creates and drops partitions (see
// WithPartitions) and then deletes rows of the default partition only. Many instances may call Cleanup at once: a lock row in the table's "_locks" table (migrations/006) lets
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
	return cleanup(ctx, d.pool, newOpsStore(d.dialect, c.table), c, p)
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

// cleanupLockHold is how long the cleanup's lock is held past its last batch: longer than any one batch takes, so
// that a live cleaner never loses it, and short enough that the lock of a cleaner that died is free again well
// before the next round (DefaultCleanupInterval). The pause between batches is added to it.
const cleanupLockHold = 5 * time.Minute

func cleanup(ctx context.Context, pool driver.Pool, s *opsStore, c config, p CleanupParams) (res CleanupResult, err error) {
	start := time.Now()
	holder := watermill.NewUUID()
	hold := cleanupLockHold + p.Pause
	var locked bool
	lock := dialect.LockParams{Table: s.table, Name: cleanupLockName, Holder: holder, Hold: hold, Back: p.Retention}
	err = inShortTx(ctx, pool, s.d, func(tx driver.Tx) error {
		var err error
		locked, res.Cutoff, err = s.d.TakeLock(ctx, tx, lock)
		return err
	})
	if err != nil {
		return res, s.wrap("cleanup: lock", err)
	}
	fields := watermill.LogFields{"table": s.table, "retention": p.Retention.String(), "cutoff": res.Cutoff}
	if !locked {
		res.Skipped = true
		c.logger.Debug("Inbox cleanup skipped: another instance is cleaning this table", fields)
		return res, nil
	}
	defer func() { err = errors.Join(err, s.unlock(ctx, pool, holder)) }()

	r := cleanupRound{ctx: ctx, pool: pool, s: s, c: c, p: p, lock: lock, res: &res}
	if c.partitionPeriod > 0 {
		pr, err := maintainPartitions(ctx, pool, s.d, c, res.Cutoff, r.batch)
		if err != nil {
			return res, err
		}
		res.PartitionsCreated, res.PartitionsDropped, r.walkOnly = pr.created, pr.dropped, pr.defaultPartition
	}
	if sc, ok := s.d.(dialect.SpanCleaner); ok {
		err = r.walk(sc)
	} else {
		err = r.byConsumer()
	}
	if err != nil {
		return res, err
	}

	err = inShortTx(ctx, pool, s.d, func(tx driver.Tx) error {
		var err error
		res.Abandoned, err = s.d.CountAbandoned(ctx, tx, s.table, res.Cutoff)
		return err
	})
	if err != nil {
		return res, s.wrap("count abandoned leases", err)
	}
	res.Took = time.Since(start)
	fields = fields.Add(watermill.LogFields{"deleted": res.Deleted, "batches": res.Batches, "took": res.Took.String()})
	if c.partitionPeriod > 0 {
		fields = fields.Add(watermill.LogFields{"partitions_created": res.PartitionsCreated, "partitions_dropped": res.PartitionsDropped})
	}
	c.logger.Info("Inbox cleanup finished", fields)
	if res.Abandoned > 0 {
		c.logger.Error("Inbox holds abandoned leases: find them with the CLI's stats, settle them, then forget them",
			fmt.Errorf("inbox: %d rows of %s are 'processing' with a lease that ran out before %s and no copy took them over",
				res.Abandoned, s.table, res.Cutoff.Format(time.RFC3339)),
			fields.Add(watermill.LogFields{"abandoned": res.Abandoned}))
	}
	return res, nil
}

// cleanupRound is one round of the cleanup, holding the lock; its batches each run in a short transaction that
// first extends the lock, so that a cleaner that lost it deletes nothing more.
type cleanupRound struct {
	ctx  context.Context
	pool driver.Pool
	s    *opsStore
	c    config
	p    CleanupParams
	lock dialect.LockParams
	res  *CleanupResult
	// took is how long the last batch took.
	took time.Duration
	// walkOnly is the one partition the walk cleans, with managed partitions (partitions.go): the others are
	// dropped whole.
	walkOnly string
}

// batch runs fn in a short transaction after extending the lock.
func (r *cleanupRound) batch(fn func(tx driver.Tx) error) error {
	start := time.Now()
	defer func() { r.took = time.Since(start) }()
	err := inShortTx(r.ctx, r.pool, r.s.d, func(tx driver.Tx) error {
		held, err := r.s.d.ExtendLock(r.ctx, tx, r.lock)
		if err != nil {
			return err
		}
		if !held {
			return errCleanupLockLost
		}
		return fn(tx)
	})
	r.res.Batches++
	if err != nil {
		return r.s.wrap("cleanup", err)
	}
	return nil
}

// deleted reports the rows one batch deleted, per consumer, then pauses if the params ask for it.
func (r *cleanupRound) deleted(counts map[string]int64) error {
	var total int64
	for consumer, n := range counts {
		if n == 0 {
			continue
		}
		total += n
		r.res.Deleted += n
		r.c.observer.RowsCleaned(r.ctx, CleanupEvent{Table: r.s.table, Consumer: consumer, Rows: n})
		if r.p.Progress != nil {
			r.p.Progress(CleanupProgress{Consumer: consumer, Batch: r.res.Batches, Deleted: n, Total: r.res.Deleted})
		}
	}
	pause := r.p.Pause
	if pause == 0 {
		pause = DefaultCleanupRest * r.took
	}
	if total > 0 && pause > 0 {
		if err := sleep(r.ctx, pause); err != nil {
			return fmt.Errorf("inbox: cleanup %s: %w", r.s.table, err)
		}
	}
	return nil
}

// walk cleans the table in one walk of the pages that hold expired rows, for every consumer at once: windows of
// about a batch of rows each, in page order, then whatever the walk did not meet, then the cleanup index's
// summaries of the pages it emptied (dialect.SpanCleaner).
func (r *cleanupRound) walk(sc dialect.SpanCleaner) error {
	pages := dialect.CleanupPagesParams{Table: r.s.table, Partition: r.walkOnly, Cutoff: r.res.Cutoff, Limit: r.p.BatchSize}
	var span dialect.Span
	err := r.batch(func(tx driver.Tx) error {
		var err error
		span, err = sc.CleanupSpan(r.ctx, tx, pages)
		return err
	})
	if err != nil {
		return err
	}
	// A window of about a batch of rows. Without statistics (a table never analyzed), the guess of 60 rows a page
	// errs on the wide side, which costs less: a window that holds more than a batch is walked again, while one
	// that holds a handful makes a transaction per page.
	rowsPerPage := span.RowsPerPage
	if rowsPerPage <= 0 {
		rowsPerPage = 60
	}
	window := max(1, int64(float64(r.p.BatchSize)/rowsPerPage))
	for from := span.First; from <= span.Last; {
		pages.From, pages.To = from, min(from+window, span.Last+1)
		var counts map[string]int64
		if err := r.batch(func(tx driver.Tx) (err error) {
			counts, err = sc.CleanupPages(r.ctx, tx, pages)
			return err
		}); err != nil {
			return err
		}
		if err := r.deleted(counts); err != nil {
			return err
		}
		if total(counts) < int64(r.p.BatchSize) {
			from = pages.To // the window is done; a full batch may have left rows in it
		}
	}
	for {
		var counts map[string]int64
		if err := r.batch(func(tx driver.Tx) (err error) {
			counts, err = sc.CleanupRest(r.ctx, tx, pages)
			return err
		}); err != nil {
			return err
		}
		if len(counts) == 0 {
			break
		}
		if err := r.deleted(counts); err != nil {
			return err
		}
	}
	if span.Last < span.First {
		return nil
	}
	pages.From, pages.To = span.First, span.Last+1
	err = r.batch(func(tx driver.Tx) error { return sc.CleanupSummarize(r.ctx, tx, pages) })
	if r.s.d.Classify(err) == dialect.LockConflict {
		r.c.logger.Debug("Inbox cleanup left the summaries of the pages it emptied to VACUUM: their lock was taken",
			watermill.LogFields{"table": r.s.table})
		return nil
	}
	return err
}

func total(counts map[string]int64) (n int64) {
	for _, c := range counts {
		n += c
	}
	return n
}

// byConsumer cleans one consumer's rows after another, each in batches that walk the cleanup index from where the
// previous batch ended.
func (r *cleanupRound) byConsumer() error {
	consumers, err := r.s.listConsumers(r.ctx, r.pool)
	if err != nil {
		return err
	}
	for _, consumer := range consumers {
		from := time.Time{} // year 1, before any processed_at
		for {
			var b dialect.CleanupBatch
			if err := r.batch(func(tx driver.Tx) (err error) {
				b, err = r.s.d.CleanupBatch(r.ctx, tx, dialect.CleanupBatchParams{
					Table: r.s.table, Consumer: consumer, From: from, Cutoff: r.res.Cutoff, Limit: r.p.BatchSize})
				return err
			}); err != nil {
				return err
			}
			from = b.Next
			if b.Picked == 0 {
				break
			}
			if err := r.deleted(map[string]int64{consumer: b.Deleted}); err != nil {
				return err
			}
		}
	}
	return nil
}

// errCleanupLockLost stops a cleanup whose lock ran out and was taken by another instance, before it deletes more.
var errCleanupLockLost = errors.New("the cleanup lock ran out and another instance took it; stopping before the next batch")

// unlock releases the cleanup lock, outliving a cancelled ctx so that a stopped cleanup does not make the next
// round wait for the lock to run out. A failure is returned; the lock then runs out on its own.
func (s *opsStore) unlock(ctx context.Context, pool driver.Pool, holder string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := inShortTx(ctx, pool, s.d, func(tx driver.Tx) error {
		return s.d.ReleaseLock(ctx, tx, dialect.LockParams{Table: s.table, Name: cleanupLockName, Holder: holder})
	})
	if err != nil {
		return s.wrap("cleanup: unlock", err)
	}
	return nil
}

// listConsumers returns the consumers that have rows, in order.
func (s *opsStore) listConsumers(ctx context.Context, pool driver.Pool) ([]string, error) {
	var out []string
	err := inShortTx(ctx, pool, s.d, func(tx driver.Tx) error {
		var err error
		out, err = s.d.Consumers(ctx, tx, s.table)
		return err
	})
	if err != nil {
		return nil, s.wrap("list consumers", err)
	}
	return out, nil
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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
	pool  driver.Pool
	cfg   CleanerConfig
	c     config
	store *opsStore
	watch *memoryWatch
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
	cl := &Cleaner{pool: d.pool, cfg: cfg, c: c, store: newOpsStore(d.dialect, c.table)}
	if cfg.Window > 0 {
		cl.watch = newMemoryWatch(cfg.Window)
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
				watermill.LogFields{"table": cl.store.table, "next_round_in": cl.cfg.Interval.String()})
		}
		t.Reset(cl.cfg.Interval)
	}
}

// Round runs one cleanup round now, as Cleanup does, and, if this instance held the lock and Window is set, the
// retention check. Run calls it; call it yourself to drive the Cleaner from a scheduler of your own.
func (cl *Cleaner) Round(ctx context.Context) (CleanupResult, error) {
	res, err := cleanup(ctx, cl.pool, cl.store, cl.c, cl.cfg.CleanupParams)
	if err != nil || res.Skipped || cl.watch == nil {
		return res, err
	}
	ms, err := cl.store.remembers(ctx, cl.pool)
	if err != nil {
		return res, err
	}
	cl.watch.check(ms, cl.store.table, cl.c.logger)
	return res, nil
}
