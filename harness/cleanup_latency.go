package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/lib/pq"

	inbox "github.com/effectively-once/watermill-inbox"
)

// latencyConfig is one `harness cleanup-latency` invocation.
type latencyConfig struct {
	DSN string
	// Rows is how many expired rows the idle and batched-delete tables hold. 1,000,000 by default.
	Rows int
	// SmallRows and GrowthRows are the rows of the growth scenario's two tables: 10,000 and, by default,
	// 10,000,000.
	SmallRows, GrowthRows int
	// Claimers is how many goroutines claim at once, each on a connection of its own. 4 by default.
	Claimers int
	// Runs is how many times every scenario is measured; the report shows medians. 3 by default.
	Runs int
	// Measure is how long a scenario with nothing running beside the claims measures them. 10 s by default.
	Measure time.Duration
	// Batch is the cleanup's CleanupParams.BatchSize. inbox.DefaultCleanupBatch by default.
	Batch int
	// Pause is the cleanup's CleanupParams.Pause, the wait after each batch that deleted rows. None by default.
	Pause time.Duration
	// Scenarios are the keys of the scenarios to measure, in the order of latencyScenarios.
	Scenarios []string
}

// The long form's defaults, and the short form's: the short one runs in seconds and is what the harness's test runs.
var (
	latencyLong  = latencyConfig{Rows: 1_000_000, GrowthRows: 10_000_000, Runs: 3, Measure: 10 * time.Second}
	latencyShort = latencyConfig{Rows: 100_000, GrowthRows: 200_000, Runs: 1, Measure: 2 * time.Second}
)

const (
	// latencySmallRows is the small table of the growth scenario: an inbox that has just started.
	latencySmallRows = 10_000
	// latencyConsumer is the consumer of every row, filled or claimed: the cleanup deletes that consumer's
	// expired rows while the same consumer claims new ones, as a service cleaning its own inbox does.
	latencyConsumer = "wallet-credits"
	// latencyAccountKey is the metadata key that tells a claim's handler which account row to update.
	latencyAccountKey = "account"
	// latencySampleEvery is how often the sampler reads what the measured backends are doing.
	latencySampleEvery = 20 * time.Millisecond
)

// latencyScenario is one row of the report: a way to build a table and to run something beside the claims.
type latencyScenario struct {
	// Key selects the scenario with --scenarios; scenarios that are measured together share one.
	Key string
	// Name labels the scenario's row.
	Name string
	// Baseline names the scenario whose claim p99, in the same run, this one's p99 is divided by; "" for none.
	Baseline string
	// WindowOf names the scenario whose measuring time this one's claims are measured for, so that the two are
	// measured over the same stretch after their tables' checkpoint (see latencyBench.table), when the full page
	// images of the first change of each page make commits slower than later: it runs right after that scenario
	// in each run. "" measures for --measure.
	WindowOf string
	// Run builds the scenario's table, measures claims on it for window when nothing else sets the time, and drops
	// the table.
	Run func(ctx context.Context, b *latencyBench, window time.Duration) (latencySample, error)
}

// latencyScenarios are the scenarios in the order they are reported. Each is a function and a row, so a new way of
// removing expired rows is one more of each.
func latencyScenarios(c latencyConfig) []latencyScenario {
	small, large := "growth: "+thousands(float64(c.SmallRows))+" rows", "growth: "+thousands(float64(c.GrowthRows))+" rows"
	return []latencyScenario{
		{Key: "idle", Name: "idle", WindowOf: "batched delete", Run: idleScenario},
		{Key: "batched-delete", Name: "batched delete", Baseline: "idle", Run: batchedDeleteScenario},
		{Key: "partition-drop", Name: "partition drop", Baseline: "idle", Run: partitionDropScenario},
		{Key: "partition-drop", Name: "idle partitioned", Baseline: "idle", WindowOf: "partition drop", Run: idlePartitionedScenario},
		{Key: "growth", Name: small, Run: growthScenario(c.SmallRows)},
		{Key: "growth", Name: large, Baseline: small, Run: growthScenario(c.GrowthRows)},
	}
}

// latencyScenarioKeys are the keys --scenarios accepts, in the order of latencyScenarios.
var latencyScenarioKeys = []string{"idle", "batched-delete", "partition-drop", "growth"}

// idleScenario: claims on a table holding the expired rows, with no cleanup running.
func idleScenario(ctx context.Context, b *latencyBench, window time.Duration) (latencySample, error) {
	table, drop, err := b.table(ctx, b.cfg.Rows, true)
	defer drop()
	if err != nil {
		return latencySample{}, err
	}
	return b.measure(ctx, table, window, nil)
}

// batchedDeleteScenario: the same claims while Database.Cleanup deletes the expired rows, batch by batch. The claims
// are measured for as long as the cleanup runs.
func batchedDeleteScenario(ctx context.Context, b *latencyBench, _ time.Duration) (latencySample, error) {
	table, drop, err := b.table(ctx, b.cfg.Rows, true)
	defer drop()
	if err != nil {
		return latencySample{}, err
	}
	s, err := b.measure(ctx, table, 0, func(ctx context.Context) (latencyRemoval, error) {
		res, err := inbox.OnSQL(b.cleanDB).Cleanup(ctx, inbox.CleanupParams{BatchSize: b.cfg.Batch, Pause: b.cfg.Pause}, inbox.WithTable(table))
		return latencyRemoval{Rows: res.Deleted, Took: res.Took, Batches: res.Batches}, err
	})
	if err == nil && s.Removed != int64(b.cfg.Rows) {
		err = fmt.Errorf("the cleanup deleted %d rows of the %d expired ones", s.Removed, b.cfg.Rows)
	}
	return s, err
}

// partitionDropScenario: the same number of expired rows, in a table of managed partitions (WithPartitions, one an
// hour) whose expired partitions hold them, beside live rows in the partitions of the last day; the claims, with
// UUIDv7 event IDs, land in the partition of this hour while Database.Cleanup with WithPartitions detaches and drops
// the expired ones. The claims are measured for as long as the cleanup runs, as for the batched delete.
func partitionDropScenario(ctx context.Context, b *latencyBench, _ time.Duration) (latencySample, error) {
	table, expired, drop, err := b.partitionedTable(ctx, b.cfg.Rows, latencyLiveRows(b.cfg.Rows))
	defer drop()
	if err != nil {
		return latencySample{}, err
	}
	var dropped int
	s, err := b.measure(ctx, table, 0, func(ctx context.Context) (latencyRemoval, error) {
		res, err := inbox.OnSQL(b.cleanDB).Cleanup(ctx, inbox.CleanupParams{BatchSize: b.cfg.Batch, Pause: b.cfg.Pause}, latencyPartitionOptions(table)...)
		dropped = res.PartitionsDropped
		// The rows of a dropped partition are not in Deleted: they are the rows the partitions held.
		rows := int64(0)
		if dropped == expired {
			rows = int64(b.cfg.Rows)
		}
		return latencyRemoval{Rows: rows + res.Deleted, Took: res.Took, Batches: res.PartitionsDropped + res.Batches}, err
	})
	if err == nil && dropped != expired {
		err = fmt.Errorf("the cleanup dropped %d of the %d expired partitions", dropped, expired)
	}
	if err == nil {
		err = b.expectNoExpired(ctx, table)
	}
	return s, err
}

// idlePartitionedScenario: claims on the partition drop's table, expired partitions and all, with no cleanup
// running, for as long as the drop of the same run took, right after it: what the partitioned table and the
// UUIDv7 IDs cost the claims by themselves.
func idlePartitionedScenario(ctx context.Context, b *latencyBench, window time.Duration) (latencySample, error) {
	table, _, drop, err := b.partitionedTable(ctx, b.cfg.Rows, latencyLiveRows(b.cfg.Rows))
	defer drop()
	if err != nil {
		return latencySample{}, err
	}
	return b.measure(ctx, table, window, nil)
}

// latencyLiveRows is how many live rows the partitioned table holds beside its expired ones: a tenth as many.
func latencyLiveRows(expired int) int { return max(expired/10, 1) }

// growthScenario: claims on a table of rows still within the retention, with no cleanup running.
func growthScenario(rows int) func(context.Context, *latencyBench, time.Duration) (latencySample, error) {
	return func(ctx context.Context, b *latencyBench, window time.Duration) (latencySample, error) {
		table, drop, err := b.table(ctx, rows, false)
		defer drop()
		if err != nil {
			return latencySample{}, err
		}
		return b.measure(ctx, table, window, nil)
	}
}

// latencySample is one scenario measured once.
type latencySample struct {
	Scenario  string
	Run       int
	TableRows int // rows in the table when the claims began
	Claims    int
	Elapsed   time.Duration
	PerSec    float64 // claims a second
	P50, P99  time.Duration
	P999, Max time.Duration
	// Extended is set when the claims went on after what ran beside them returned, to measureOptions.AtLeast.
	Extended bool
	// Removed, RemoveTook and Batches are what ran beside the claims did: rows it removed, how long it took, and
	// the statements it took to do so. Zero when nothing ran.
	Removed    int64
	RemoveTook time.Duration
	Batches    int
	// Ratio is this run's P99 over the baseline scenario's, when the scenario has one and it was measured.
	Ratio float64
	latencyDiagnosis
}

// latencyDiagnosis is what the database and the machine did while the claims were measured: evidence for what
// slowed them, read rather than guessed.
type latencyDiagnosis struct {
	// ClaimStates counts, per sample, each claim backend's state: "CPU" (running, no wait event), a wait event as
	// "type:event", or "client" (idle in transaction: waiting for the claimer's next statement).
	ClaimStates map[string]int
	// CleanStates is the same for the cleanup's backend.
	CleanStates map[string]int
	// Ticks is how many samples were taken; VacuumTicks, in how many a VACUUM (autovacuum) was working on the table.
	Ticks, VacuumTicks int
	// WALBytes is the WAL the whole server wrote while the claims ran, other databases' included.
	WALBytes int64
	// Checkpoints is how many checkpoints started while the claims ran.
	Checkpoints int64
	// Autovacuums is how many autovacuum and autoanalyze runs of the table ended while the claims ran.
	Autovacuums int64
	// CPUBusy is the share of the machine's CPU time spent outside idle and I/O wait while the claims ran, or -1
	// where /proc/stat cannot be read.
	CPUBusy float64
}

// latencyRemoval is what the work beside the claims did.
type latencyRemoval struct {
	Rows    int64
	Took    time.Duration
	Batches int
}

// latencyBench holds the connections and the names one invocation uses.
type latencyBench struct {
	cfg      latencyConfig
	progress io.Writer
	// claimDB carries the claims, cleanDB the cleanup, watchDB the sampler and the fills: three pools with their own
	// application_name, so pg_stat_activity tells their backends apart.
	claimDB, cleanDB, watchDB    *sql.DB
	claimApp, cleanApp, watchApp string
	command                      string // the harness command, for the progress lines
	prefix                       string // of every table this invocation creates
	accounts                     string // the table the claims' handler updates
	tables                       int
	// uuid7 are the tables whose IDs are uuid and whose claims carry UUIDv7 IDs: partitionedTable's, and any a
	// caller marks so.
	uuid7 map[string]bool
}

func newLatencyBench(ctx context.Context, c latencyConfig, progress io.Writer) (*latencyBench, error) {
	return newBench(ctx, c, progress, "cleanup-latency", "cleanlat")
}

// newBench opens the bench of a command: its tables are named harness_<short>_<pid>_..., its backends
// harness-<short>-claim-<pid> and so on.
func newBench(ctx context.Context, c latencyConfig, progress io.Writer, command, short string) (_ *latencyBench, err error) {
	pid := os.Getpid()
	b := &latencyBench{cfg: c, progress: progress, command: command, prefix: fmt.Sprintf("harness_%s_%d", short, pid), uuid7: map[string]bool{},
		claimApp: fmt.Sprintf("harness-%s-claim-%d", short, pid), cleanApp: fmt.Sprintf("harness-%s-clean-%d", short, pid),
		watchApp: fmt.Sprintf("harness-%s-watch-%d", short, pid)}
	b.accounts = b.prefix + "_accounts"
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	open := func(app string, conns int) (*sql.DB, error) {
		db, err := sql.Open("postgres", withAppName(c.DSN, app))
		if err != nil {
			return nil, err
		}
		// database/sql keeps two idle connections by default: with more claimers than that, every claim past the
		// second would close its connection and the next would open one, and the measurement would be of that.
		db.SetMaxIdleConns(conns)
		return db, nil
	}
	if b.claimDB, err = open(b.claimApp, c.Claimers+1); err != nil {
		return nil, err
	}
	if b.cleanDB, err = open(b.cleanApp, 2); err != nil {
		return nil, err
	}
	if b.watchDB, err = open(b.watchApp, 2); err != nil {
		return nil, err
	}
	if err := b.watchDB.PingContext(ctx); err != nil {
		return nil, fmt.Errorf("PostgreSQL at %s: %w", c.DSN, err)
	}
	// One account per claimer: the claims never wait for each other's row locks, only for what the database and the
	// cleanup make them wait for.
	if _, err := b.watchDB.ExecContext(ctx, `CREATE TABLE `+pq.QuoteIdentifier(b.accounts)+
		` (id integer PRIMARY KEY, balance bigint NOT NULL DEFAULT 0)`); err != nil {
		return nil, fmt.Errorf("create the accounts table: %w", err)
	}
	if _, err := b.watchDB.ExecContext(ctx, `INSERT INTO `+pq.QuoteIdentifier(b.accounts)+
		` (id) SELECT generate_series(1, $1)`, c.Claimers); err != nil {
		return nil, fmt.Errorf("fill the accounts table: %w", err)
	}
	return b, nil
}

func (b *latencyBench) close() {
	if b.watchDB != nil {
		if _, err := b.watchDB.Exec(`DROP TABLE IF EXISTS ` + pq.QuoteIdentifier(b.accounts)); err != nil {
			b.logf("drop %s: %v", b.accounts, err)
		}
	}
	for _, db := range []*sql.DB{b.claimDB, b.cleanDB, b.watchDB} {
		if db != nil {
			db.Close()
		}
	}
}

func (b *latencyBench) logf(format string, a ...any) {
	fmt.Fprintf(b.progress, "%s %s: %s\n", time.Now().Format("15:04:05"), b.command, fmt.Sprintf(format, a...))
}

// latencyFillSQL fills a table that Database.Migrate created with $1 rows of consumer $2, their processed_at spread
// evenly from $3 seconds ago (the first row) to $4 seconds ago (the last), by the database clock that the cleanup's
// cutoff is read from. The IDs are random, the shape of v4 UUIDs (md5 of the row number), so the claims' random
// IDs land among them all over the primary key as they do in a real inbox. They are inserted in their sort order,
// with processed_at rising with them, so both indexes fill by appending to their last page: ten million rows in
// random order take many times longer, an index larger than shared_buffers writing a page out for nearly every
// row. The price is an index packed as a bulk load packs it (leaf pages 90% full rather than about 70%), and
// expired rows that sit together in the primary key rather than spread through it: a batch's deletes touch fewer
// pages of the index than they would in production. The table stores the consumer's id and processed_at in minutes
// since 1970 (migration 007, dialect/postgres/migrations): the consumer is registered first, and dated back to the oldest row, as the migration
// of an existing table dates it.
const latencyFillSQL = `WITH consumer AS (
		INSERT INTO %[2]s (name, created_at) VALUES ($2, now() - make_interval(secs => $3::float8))
		ON CONFLICT (name) DO UPDATE SET created_at = least(%[2]s.created_at, excluded.created_at)
		RETURNING id
	)
	INSERT INTO %[1]s (processed_at, consumer_id, message_id, state)
	SELECT floor(extract(epoch FROM now() - make_interval(secs => $3::float8 - ($3::float8 - $4::float8)
			* (row_number() OVER (ORDER BY ids.message_id) - 1) / greatest($1::int - 1, 1))) / 60)::integer,
		consumer.id, ids.message_id, 'd'
	FROM consumer, (SELECT md5(i::text)::uuid::text AS message_id FROM generate_series(1, $1::int) i) ids`

// latencyCreditSQL is the handler's side effect: one small UPDATE in the claim's transaction.
const latencyCreditSQL = `UPDATE %s SET balance = balance + 1 WHERE id = $1`

// latencySampleSQL reads, in one round trip, whether a VACUUM is working on the table ($3) and what the claims' and
// the cleanup's backends ($1, $2) are doing. pg_stat_activity shows a backend that runs without a wait event with
// wait_event NULL: that is CPU, its own or its wait for a core on a busy machine.
const latencySampleSQL = `SELECT 'vacuum', '', '' FROM pg_stat_progress_vacuum WHERE relid = $3::regclass
	UNION ALL
	SELECT application_name, coalesce(state, ''), coalesce(wait_event_type || ':' || wait_event, 'CPU')
	FROM pg_stat_activity WHERE application_name IN ($1, $2)`

// latencyCountersSQL reads the server-wide counters a scenario's diagnosis compares before and after: the WAL
// position, the checkpoints started, and the autovacuum and autoanalyze runs of the table ($1).
const latencyCountersSQL = `SELECT pg_current_wal_lsn()::text,
	(SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter),
	coalesce((SELECT autovacuum_count + autoanalyze_count FROM pg_stat_user_tables WHERE relid = $1::regclass), 0)`

// table creates a table with Database.Migrate and fills it with rows rows: expired ones (older than the retention, a
// day's worth ending an hour before the cutoff) or live ones (spread over all but the last day of the retention).
// The rows are then made as old as they claim to be: VACUUM ANALYZE sets their hint and visibility bits, as the
// weeks since they were written would have, and a CHECKPOINT makes the next change of each page write it whole to
// the WAL, as the first change of an old page does. drop removes the table; it is never nil.
func (b *latencyBench) table(ctx context.Context, rows int, expired bool) (table string, drop func(), err error) {
	b.tables++
	table = fmt.Sprintf("%s_%d", b.prefix, b.tables)
	drop = b.dropper(table)
	if err := inbox.OnSQL(b.watchDB).Migrate(ctx, inbox.WithTable(table)); err != nil {
		return table, drop, fmt.Errorf("migrate %s: %w", table, err)
	}
	retention := inbox.DefaultRetention.Seconds()
	oldest, newest := retention-3600, 86400.0
	if expired {
		oldest, newest = retention+25*3600, retention+3600
	}
	start := time.Now()
	if _, err := b.watchDB.ExecContext(ctx, fmt.Sprintf(latencyFillSQL, pq.QuoteIdentifier(table), pq.QuoteIdentifier(table+"_consumers")),
		rows, latencyConsumer, oldest, newest); err != nil {
		return table, drop, fmt.Errorf("fill %s: %w", table, err)
	}
	filled := time.Since(start)
	if err := b.settle(ctx, table); err != nil {
		return table, drop, err
	}
	kind := "live"
	if expired {
		kind = "expired"
	}
	b.logf("%s: %s %s rows in %s, ready in %s", table, thousands(float64(rows)), kind,
		filled.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
	return table, drop, nil
}

// dropper returns the function that drops table, its partitions and its companions. Dropped outright rather than
// migrated down: 007's down migration would copy every row back into the old layout first.
func (b *latencyBench) dropper(table string) func() {
	return func() {
		for _, q := range []string{
			`DROP TABLE IF EXISTS ` + pq.QuoteIdentifier(table+"_produced") + `, ` + pq.QuoteIdentifier(table) + `, ` +
				pq.QuoteIdentifier(table+"_locks") + `, ` + pq.QuoteIdentifier(table+"_migrations") + `, ` +
				pq.QuoteIdentifier(table+"_consumers") + ` CASCADE`,
			`DROP FUNCTION IF EXISTS ` + pq.QuoteIdentifier(table+"_unfinished_claim") + `()`,
		} {
			if _, err := b.watchDB.Exec(q); err != nil {
				b.logf("drop %s: %v", table, err)
				return
			}
		}
	}
}

// settle makes a filled table's rows as old as they claim to be (see table): VACUUM ANALYZE, then a CHECKPOINT.
func (b *latencyBench) settle(ctx context.Context, table string) error {
	if _, err := b.watchDB.ExecContext(ctx, `VACUUM ANALYZE `+pq.QuoteIdentifier(table)); err != nil {
		return fmt.Errorf("vacuum %s: %w", table, err)
	}
	if _, err := b.watchDB.ExecContext(ctx, `CHECKPOINT`); err != nil {
		return fmt.Errorf("checkpoint after filling %s (the harness needs a role allowed to run "+
			"CHECKPOINT, pg_checkpoint or a superuser): %w", table, err)
	}
	return nil
}

// measure runs the claimers on table until beside returns, or for window when beside is nil, and samples what
// the database does meanwhile. The claims are the library's: an inbox.Inbox over a *sql.DB, its middleware around a
// handler that does one small UPDATE in the claim's transaction, called directly with a fresh message each time.
func (b *latencyBench) measure(ctx context.Context, table string, window time.Duration, beside func(context.Context) (latencyRemoval, error)) (latencySample, error) {
	return b.measureWith(ctx, table, window, beside, measureOptions{})
}

// measureWith is measure with the options of measureOptions (scale.go); the zero value is measure.
func (b *latencyBench) measureWith(ctx context.Context, table string, window time.Duration, beside func(context.Context) (latencyRemoval, error), o measureOptions) (latencySample, error) {
	s := latencySample{TableRows: o.Rows}
	if o.Rows <= 0 {
		if err := b.watchDB.QueryRowContext(ctx, `SELECT count(*) FROM `+pq.QuoteIdentifier(table)).Scan(&s.TableRows); err != nil {
			return s, fmt.Errorf("count %s: %w", table, err)
		}
	}
	opts := []inbox.Option{inbox.WithTable(table), inbox.WithConsumer(latencyConsumer), inbox.WithAutoMigrate(false)}
	newID := uuid.NewString
	if b.uuid7[table] {
		// The claims carry UUIDv7 IDs, as the producers of such a table would: a partitioned table's land in this
		// hour's partition, where random v4 IDs would all fall into the default partition.
		opts = append(opts, inbox.WithIDType(inbox.IDTypeUUID))
		newID = func() string { return uuid.Must(uuid.NewV7()).String() }
	}
	ib, err := inbox.New(b.claimDB, opts...)
	if err != nil {
		return s, err
	}
	creditSQL := fmt.Sprintf(latencyCreditSQL, pq.QuoteIdentifier(b.accounts))
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		tx, ok := inbox.TxFromContext(msg.Context())
		if !ok {
			return nil, errors.New("the handler's context carries no transaction")
		}
		_, err := tx.ExecContext(msg.Context(), creditSQL, msg.Metadata.Get(latencyAccountKey))
		return nil, err
	})
	claim := func(ctx context.Context, account int) error {
		msg := message.NewMessage(watermill.NewUUID(), nil)
		msg.Metadata.Set("event_id", newID())
		msg.Metadata.Set(latencyAccountKey, strconv.Itoa(account))
		msg.SetContext(ctx)
		_, err := h(msg)
		return err
	}
	// Untimed first claims, one per claimer at once: they open the claimers' connections and let the inbox check the
	// schema, which it does before its first message.
	if err := b.together(ctx, func(ctx context.Context, i int) error { return claim(ctx, i+1) }); err != nil {
		return s, fmt.Errorf("first claims on %s: %w", table, err)
	}
	if o.Before != nil {
		if err := o.Before(ctx); err != nil {
			return s, err
		}
	}

	before, err := b.counters(ctx, table)
	if err != nil {
		return s, err
	}
	cpuBefore := readCPU()
	sampled := b.sample(ctx, table)
	claimCtx, stop := context.WithCancel(ctx)
	defer stop()
	lat := make([][]time.Duration, b.cfg.Claimers)
	claimed := make(chan error, 1)
	start := time.Now()
	go func() {
		claimed <- b.together(claimCtx, func(ctx context.Context, i int) error {
			for ctx.Err() == nil {
				t := time.Now()
				if err := claim(ctx, i+1); err != nil {
					if ctx.Err() != nil { // stopped mid-claim: neither a failure nor a sample
						return nil
					}
					return err
				}
				lat[i] = append(lat[i], time.Since(t))
			}
			return nil
		})
	}()
	var removal latencyRemoval
	var besideErr error
	if beside == nil {
		select {
		case <-time.After(window):
		case <-ctx.Done():
		}
	} else {
		removal, besideErr = beside(ctx)
		if rest := o.AtLeast - time.Since(start); besideErr == nil && rest > 0 {
			s.Extended = true
			select {
			case <-time.After(rest):
			case <-ctx.Done():
			}
		}
	}
	stop()
	claimErr := <-claimed
	s.Elapsed = time.Since(start)
	s.ClaimStates, s.CleanStates, s.Ticks, s.VacuumTicks = sampled()
	s.CPUBusy = cpuBusy(cpuBefore, readCPU())
	var afterErr error
	if o.After != nil && claimErr == nil && besideErr == nil {
		afterErr = o.After(ctx)
	}
	after, err := b.counters(ctx, table)
	if err = errors.Join(claimErr, besideErr, afterErr, ctx.Err(), err); err != nil {
		return s, err
	}
	s.WALBytes, s.Checkpoints, s.Autovacuums = after.wal-before.wal, after.checkpoints-before.checkpoints, after.vacuums-before.vacuums
	s.Removed, s.RemoveTook, s.Batches = removal.Rows, removal.Took, removal.Batches
	all := slices.Concat(lat...)
	s.Claims = len(all)
	if s.Claims == 0 {
		return s, fmt.Errorf("no claim finished on %s in %s", table, s.Elapsed)
	}
	s.PerSec = float64(s.Claims) / s.Elapsed.Seconds()
	s.P50, s.P99, s.P999, s.Max = percentile(all, 0.50), percentile(all, 0.99), percentile(all, 0.999), percentile(all, 1)
	return s, nil
}

// together runs f for every claimer at once and returns the first error.
func (b *latencyBench) together(ctx context.Context, f func(ctx context.Context, i int) error) error {
	errs := make([]error, b.cfg.Claimers)
	var wg sync.WaitGroup
	for i := range b.cfg.Claimers {
		wg.Go(func() { errs[i] = f(ctx, i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

type latencyCounters struct{ wal, checkpoints, vacuums int64 }

func (b *latencyBench) counters(ctx context.Context, table string) (latencyCounters, error) {
	var c latencyCounters
	var lsn string
	if err := b.watchDB.QueryRowContext(ctx, latencyCountersSQL, table).Scan(&lsn, &c.checkpoints, &c.vacuums); err != nil {
		return c, fmt.Errorf("read the server's counters: %w", err)
	}
	hi, lo, ok := strings.Cut(lsn, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return c, fmt.Errorf("read the server's counters: WAL position %q", lsn)
	}
	c.wal = int64(h<<32 | l)
	return c, nil
}

// sample polls latencySampleSQL until the returned function is called, which returns the counts.
func (b *latencyBench) sample(ctx context.Context, table string) func() (claims, clean map[string]int, ticks, vacuum int) {
	claims, clean := map[string]int{}, map[string]int{}
	ticks, vacuum := 0, 0
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(latencySampleEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rows, err := b.watchDB.QueryContext(ctx, latencySampleSQL, b.claimApp, b.cleanApp, table)
			if err != nil {
				continue // a missed sample; the next tick tries again
			}
			ticks++
			for rows.Next() {
				var app, state, what string
				if rows.Scan(&app, &state, &what) != nil {
					continue
				}
				switch {
				case app == "vacuum":
					vacuum++
				case state == "idle in transaction":
					pick(app, claims, clean)["client"]++
				case state == "active":
					pick(app, claims, clean)[what]++
				}
			}
			rows.Close()
		}
	}()
	return func() (map[string]int, map[string]int, int, int) {
		cancel()
		<-done
		return claims, clean, ticks, vacuum
	}
}

func pick(app string, claims, clean map[string]int) map[string]int {
	if strings.Contains(app, "-claim-") {
		return claims
	}
	return clean
}

// percentile is the nearest-rank percentile p (0 < p <= 1) of xs, which it sorts.
func percentile(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	k := int(math.Ceil(p*float64(len(xs)))) - 1
	return xs[max(0, min(k, len(xs)-1))]
}

// cpuTimes are the machine's CPU counters from /proc/stat: busy (user, nice, system, irq, softirq, steal) and total.
type cpuTimes struct {
	busy, total uint64
	ok          bool
}

func readCPU() cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTimes{}
	}
	var t cpuTimes
	for i, v := range f[1:9] { // the guest times after these are counted in user time already
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return cpuTimes{}
		}
		t.total += n
		if i != 3 && i != 4 { // idle, iowait
			t.busy += n
		}
	}
	t.ok = true
	return t
}

// cpuBusy is the share of the CPU time from a to b that was busy, or -1 when it cannot be told.
func cpuBusy(a, b cpuTimes) float64 {
	if !a.ok || !b.ok || b.total <= a.total {
		return -1
	}
	return float64(b.busy-a.busy) / float64(b.total-a.total)
}

// runCleanupLatency measures every scenario cfg.Runs times, one run after the other, each run going through all the
// scenarios (latencyOrder).
func runCleanupLatency(ctx context.Context, c latencyConfig, progress io.Writer) ([]latencySample, error) {
	var scenarios []latencyScenario
	for _, sc := range latencyScenarios(c) {
		if slices.Contains(c.Scenarios, sc.Key) {
			scenarios = append(scenarios, sc)
		}
	}
	if len(scenarios) == 0 {
		return nil, fmt.Errorf("no scenario among %v", c.Scenarios)
	}
	b, err := newLatencyBench(ctx, c, progress)
	if err != nil {
		return nil, err
	}
	defer b.close()
	b.logf("%d runs, %d claimers, %s expired rows, growth %s to %s rows, cleanup batches of %s, pause %s",
		c.Runs, c.Claimers, thousands(float64(c.Rows)), thousands(float64(c.SmallRows)), thousands(float64(c.GrowthRows)),
		thousands(float64(c.Batch)), c.Pause)
	var out []latencySample
	for run := 1; run <= c.Runs; run++ {
		took := map[string]time.Duration{}
		for _, sc := range latencyOrder(scenarios) {
			window := c.Measure
			if d, ok := took[sc.WindowOf]; ok {
				window = d
			}
			s, err := sc.Run(ctx, b, window)
			if err != nil {
				return out, fmt.Errorf("run %d, %s: %w", run, sc.Name, err)
			}
			s.Scenario, s.Run = sc.Name, run
			took[sc.Name] = s.Elapsed
			b.logf("run %d/%d %-22s %s claims in %s, %.0f/s, p50 %s p99 %s max %s%s", run, c.Runs, sc.Name,
				thousands(float64(s.Claims)), s.Elapsed.Round(100*time.Millisecond), float64(s.Claims)/s.Elapsed.Seconds(),
				ms(s.P50), ms(s.P99), ms(s.Max), removalNote(s))
			out = append(out, s)
		}
	}
	latencyRatios(scenarios, out)
	return out, nil
}

// latencyOrder is the order of one run: the scenarios' own, except that one measured for another's time comes
// right after it. The two of a comparison are so measured back to back, on the machine as it is at that moment.
func latencyOrder(scenarios []latencyScenario) []latencyScenario {
	selected := map[string]bool{}
	for _, sc := range scenarios {
		selected[sc.Name] = true
	}
	var out []latencyScenario
	placed := map[string]bool{}
	waiting := map[string][]latencyScenario{}
	var place func(sc latencyScenario)
	place = func(sc latencyScenario) {
		out, placed[sc.Name] = append(out, sc), true
		for _, w := range waiting[sc.Name] {
			place(w)
		}
	}
	for _, sc := range scenarios {
		if selected[sc.WindowOf] && !placed[sc.WindowOf] {
			waiting[sc.WindowOf] = append(waiting[sc.WindowOf], sc)
			continue
		}
		place(sc)
	}
	return out
}

// latencyRatios sets each sample's Ratio from its baseline's sample of the same run.
func latencyRatios(scenarios []latencyScenario, samples []latencySample) {
	base := map[string]string{}
	for _, sc := range scenarios {
		base[sc.Name] = sc.Baseline
	}
	type key struct {
		run      int
		scenario string
	}
	p99 := map[key]time.Duration{}
	for _, s := range samples {
		p99[key{s.Run, s.Scenario}] = s.P99
	}
	for i, s := range samples {
		if b, ok := p99[key{s.Run, base[s.Scenario]}]; ok && base[s.Scenario] != "" && b > 0 {
			samples[i].Ratio = float64(s.P99) / float64(b)
		}
	}
}

func removalNote(s latencySample) string {
	if s.Batches == 0 {
		return ""
	}
	return fmt.Sprintf("; cleanup %s rows in %s, %.0f rows/s", thousands(float64(s.Removed)),
		s.RemoveTook.Round(10*time.Millisecond), float64(s.Removed)/s.RemoveTook.Seconds())
}

// ms formats a latency in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

// parseCleanupLatency reads the command's flags; --short sets the short form's defaults for the flags not given.
// Help and errors go to out.
func parseCleanupLatency(args []string, out io.Writer) (latencyConfig, error) {
	fs := newFlagSet("cleanup-latency")
	fs.Init("cleanup-latency", flag.ContinueOnError)
	fs.SetOutput(out)
	c := latencyConfig{SmallRows: latencySmallRows}
	fs.StringVar(&c.DSN, "dsn", defaultDSN, "PostgreSQL DSN (URL form); the tables are created and dropped in its database")
	fs.IntVar(&c.Rows, "rows", latencyLong.Rows, "expired rows the cleanup deletes (and the idle table holds)")
	fs.IntVar(&c.GrowthRows, "growth-rows", latencyLong.GrowthRows, "rows of the growth scenario's large table, measured against 10,000")
	fs.IntVar(&c.Claimers, "claimers", 4, "claims in flight at once, one connection each")
	fs.IntVar(&c.Runs, "runs", latencyLong.Runs, "runs of every scenario; the table shows medians")
	fs.DurationVar(&c.Measure, "measure", latencyLong.Measure, "how long the scenarios without a cleanup measure claims")
	fs.IntVar(&c.Batch, "batch", inbox.DefaultCleanupBatch, "the cleanup's batch size (inbox.CleanupParams.BatchSize)")
	fs.DurationVar(&c.Pause, "pause", 0, "the cleanup's wait after each batch that deleted rows (inbox.CleanupParams.Pause)")
	scenarios := fs.String("scenarios", strings.Join(latencyScenarioKeys, ","), "scenarios to measure, comma-separated")
	short := fs.Bool("short", false, fmt.Sprintf("the short form: %s expired rows, growth to %s rows, %d run, %s measurements "+
		"(flags given as well win)", thousands(float64(latencyShort.Rows)), thousands(float64(latencyShort.GrowthRows)),
		latencyShort.Runs, latencyShort.Measure))
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("cleanup-latency: unexpected arguments %v", fs.Args())
	}
	if *short {
		given := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
		if !given["rows"] {
			c.Rows = latencyShort.Rows
		}
		if !given["growth-rows"] {
			c.GrowthRows = latencyShort.GrowthRows
		}
		if !given["runs"] {
			c.Runs = latencyShort.Runs
		}
		if !given["measure"] {
			c.Measure = latencyShort.Measure
		}
	}
	for _, k := range strings.Split(*scenarios, ",") {
		k = strings.TrimSpace(k)
		if !slices.Contains(latencyScenarioKeys, k) {
			return c, fmt.Errorf("cleanup-latency: unknown scenario %q (want one of %s)", k, strings.Join(latencyScenarioKeys, ", "))
		}
		c.Scenarios = append(c.Scenarios, k)
	}
	switch {
	case c.Rows < 1 || c.GrowthRows < 1:
		return c, errors.New("cleanup-latency: --rows and --growth-rows must be positive")
	case c.Runs < 1:
		return c, errors.New("cleanup-latency: --runs must be at least 1")
	}
	return c, c.checkClaimsAndCleanup("cleanup-latency")
}

// checkClaimsAndCleanup checks the flags that the cleanup-latency and scale commands (named command in the error)
// share: the claimers, the measuring window, and the cleanup's batch and pause.
func (c latencyConfig) checkClaimsAndCleanup(command string) error {
	switch {
	case c.Claimers < 1:
		return fmt.Errorf("%s: --claimers must be at least 1", command)
	case c.Measure <= 0:
		return fmt.Errorf("%s: --measure must be positive", command)
	case c.Batch < 1 || c.Batch > inbox.MaxCleanupBatch:
		return fmt.Errorf("%s: --batch must be 1 to %d", command, inbox.MaxCleanupBatch)
	case c.Pause < 0:
		return fmt.Errorf("%s: --pause must not be negative", command)
	}
	return nil
}

func cleanupLatencyCommand(ctx context.Context, args []string) error {
	c, err := parseCleanupLatency(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	start := time.Now()
	res, err := runCleanupLatency(ctx, c, os.Stderr)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "%s cleanup-latency: done in %s\n", time.Now().Format("15:04:05"), time.Since(start).Round(time.Second))
	fmt.Print(latencyReport(c, res))
	return nil
}
