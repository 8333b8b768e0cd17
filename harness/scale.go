package main

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/maintain"
)

// scaleConfig is one `harness scale` invocation. The bench's part (DSN, Claimers, Measure, Batch, Pause) is the
// same as cleanup-latency's.
type scaleConfig struct {
	latencyConfig
	Sizes    []int
	Variants []scaleVariant
	// ExpiredShare is E, the expired rows, as a share of the retained rows N, within scaleMinExpired and
	// scaleMaxExpired.
	ExpiredShare float64
	// ExpiredSpan is how much time the expired rows' IDs and processed_at spread over, ending an hour before the
	// retention's cutoff: with hourly partitions, about that many hours of partitions to drop.
	ExpiredSpan time.Duration
	Consumers   int
	Out         string
	Replot      bool
}

// scaleVariant is one kind of inbox table the command grows.
type scaleVariant struct {
	Name        string
	IDType      inbox.IDType
	Partitioned bool
	Cleanup     string // what the cleanup does, for the report
	Color       string
}

var scaleVariants = []scaleVariant{
	{Name: "uuid7", IDType: inbox.IDTypeUUID, Cleanup: "batched delete", Color: "#2980b9"},
	{Name: "uuid7-partitioned", IDType: inbox.IDTypeUUID, Partitioned: true, Cleanup: "partition drop", Color: colorInbox},
	{Name: "text", IDType: inbox.IDTypeText, Cleanup: "batched delete", Color: "#c0392b"},
}

// options are the table options of Migrate and Cleanup for the variant's table.
func (v scaleVariant) options(table string) []inbox.MaintenanceOption {
	if v.Partitioned {
		return latencyPartitionOptions(table)
	}
	return []inbox.MaintenanceOption{inbox.WithTable(table), inbox.WithIDType(v.IDType)}
}

const (
	scaleMinExpired = 1_000
	scaleMaxExpired = 1_000_000
	// scaleChunk is the rows of one COPY, each in a transaction of its own.
	scaleChunk = 1_000_000
	// scaleProgressEvery is how often the load prints its progress, in rows.
	scaleProgressEvery = 5_000_000
	// scaleLiveMargin keeps the oldest live row this far inside the retention, so that none expires before the
	// cleanup of a long run and the cleanup removes exactly the expired rows.
	scaleLiveMargin = 24 * time.Hour
	// scaleLiveNewest is the age of the newest live row: the claims' UUIDv7 IDs are newer than every row loaded.
	scaleLiveNewest = time.Minute
	// scaleStatsWait is how long the command waits for the backends it closed to exit.
	scaleStatsWait = 30 * time.Second
)

// scaleExpired is E for n retained rows.
func scaleExpired(n int, share float64) int {
	return min(max(int(math.Round(share*float64(n))), scaleMinExpired), scaleMaxExpired)
}

// measureOptions change what measureWith does (cleanup_latency.go); the zero value is measure.
type measureOptions struct {
	// Rows, when positive, is how many rows the table holds, and the table is not counted.
	Rows int
	// AtLeast keeps the claims running after beside returns until this long has passed since they began.
	AtLeast time.Duration
	// Before runs after the untimed first claims, right before the timed ones begin; After right after the last
	// one ended, before the counters are read again.
	Before, After func(ctx context.Context) error
}

// runScale measures every variant at every size, in that order, and writes each record to c.Out as it completes;
// then it rewrites the report from all the records in c.Out. With c.Replot it only rewrites the report.
func runScale(ctx context.Context, c scaleConfig, progress io.Writer) ([]scaleRecord, error) {
	if c.Replot {
		return nil, writeScaleReport(c.Out, scaleMachine{})
	}
	b, err := newBench(ctx, c.latencyConfig, progress, "scale", "scale")
	if err != nil {
		return nil, err
	}
	defer b.close()
	m, err := b.machine(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := b.watchDB.ExecContext(ctx, `CREATE EXTENSION IF NOT EXISTS pageinspect`); err != nil {
		return nil, fmt.Errorf("create the pageinspect extension, for the primary key's depth (needs a superuser): %w", err)
	}
	b.logf("PostgreSQL %s, shared_buffers %s, %d cores; sizes %v, variants %s, %d claimers, %d consumers, records in %s",
		m.PostgreSQL, m.SharedBuffers, m.Cores, c.Sizes, scaleVariantNames(c.Variants), c.Claimers, c.Consumers, c.Out)
	var out []scaleRecord
	var runErr error
run:
	for _, v := range c.Variants {
		for _, n := range c.Sizes {
			rec, err := b.scaleOne(ctx, c, v, n, m)
			if err == nil {
				err = writeScaleRecord(c.Out, rec)
			}
			if err != nil {
				runErr = fmt.Errorf("%s, %s rows: %w", v.Name, thousands(float64(n)), err)
				break run
			}
			out = append(out, rec)
		}
	}
	if len(out) > 0 {
		runErr = errors.Join(runErr, writeScaleReport(c.Out, m))
	}
	return out, runErr
}

// machine reads what the report says of the machine. The cores are this process's machine's: the harness runs
// beside the server it measures.
func (b *latencyBench) machine(ctx context.Context) (scaleMachine, error) {
	m := scaleMachine{Cores: runtime.NumCPU()}
	if err := b.watchDB.QueryRowContext(ctx, `SELECT current_setting('server_version'), current_setting('shared_buffers')`).
		Scan(&m.PostgreSQL, &m.SharedBuffers); err != nil {
		return m, err
	}
	m.PostgreSQL = strings.Fields(m.PostgreSQL)[0]
	return m, nil
}

// scalePlan is where the rows of one table go: row i's time, and so its ID and its processed_at, and its consumer.
type scalePlan struct {
	now                    time.Time
	expired, live          int
	expOldest, expNewest   time.Duration // before now
	liveOldest, liveNewest time.Duration
	consumers              []int
}

func (p scalePlan) total() int { return p.expired + p.live }

// at is row i's time in Unix milliseconds: the expired rows evenly from expOldest to expNewest ago, then the live
// ones from liveOldest to liveNewest ago. Rows go in in this order, so their times never fall.
func (p scalePlan) at(i int) int64 {
	seg := func(j, n int, oldest, newest time.Duration) int64 {
		from, to := p.now.Add(-oldest).UnixMilli(), p.now.Add(-newest).UnixMilli()
		if n <= 1 {
			return from
		}
		return from + (to-from)*int64(j)/int64(n-1)
	}
	if i < p.expired {
		return seg(i, p.expired, p.expOldest, p.expNewest)
	}
	return seg(i-p.expired, p.live, p.liveOldest, p.liveNewest)
}

// scaleIDs makes the IDs of a load in ascending order, so that the primary key, which leads with the ID, fills by
// appending. UUIDv7: the row's millisecond, then random bits, kept rising within a millisecond. Text: UUID-shaped
// strings spread uniformly over the key space, the top 64 bits of row i i*step plus a random offset below step and
// the rest random, so that random v4 claims land among them all over the key.
type scaleIDs struct {
	text   bool
	step   uint64
	rng    *rand.Rand
	lastMs int64
	lastA  uint16 // the 12 bits after the version
	lastB  uint64 // the 62 bits after the variant
}

func newScaleIDs(text bool, total int, seed uint64) *scaleIDs {
	return &scaleIDs{text: text, step: math.MaxUint64 / uint64(max(total, 1)), rng: rand.New(rand.NewPCG(seed, uint64(total))), lastMs: -1}
}

func (g *scaleIDs) next(i int, ms int64) string {
	var b [16]byte
	if g.text {
		binary.BigEndian.PutUint64(b[:8], uint64(i)*g.step+g.rng.Uint64N(g.step))
		binary.BigEndian.PutUint64(b[8:], g.rng.Uint64())
		return uuid.UUID(b).String()
	}
	a, r := uint16(g.rng.Uint32()&0xfff), g.rng.Uint64()&(1<<62-1)
	if ms == g.lastMs && (a < g.lastA || a == g.lastA && r <= g.lastB) {
		a, r = g.lastA, g.lastB+1
		if r == 1<<62 {
			a, r = a+1, 0
		}
	}
	g.lastMs, g.lastA, g.lastB = ms, a, r
	var t [8]byte
	binary.BigEndian.PutUint64(t[:], uint64(ms))
	copy(b[:6], t[2:])
	b[6], b[7] = 0x70|byte(a>>8), byte(a)
	binary.BigEndian.PutUint64(b[8:], r)
	b[8] |= 0x80
	return uuid.UUID(b).String()
}

// scaleOne measures one variant at one size: it creates, loads, settles and sizes the table, measures the claims
// idle and during the cleanup, checks the cleanup, and drops the table.
func (b *latencyBench) scaleOne(ctx context.Context, c scaleConfig, v scaleVariant, n int, m scaleMachine) (scaleRecord, error) {
	rec := scaleRecord{Variant: v.Name, Rows: n, Expired: scaleExpired(n, c.ExpiredShare), Consumers: c.Consumers,
		Claimers: c.Claimers, MeasureSeconds: c.Measure.Seconds(), Batch: c.Batch, PauseSeconds: c.Pause.Seconds(),
		ExpiredSpanHours: c.ExpiredSpan.Hours(), Machine: m, MeasuredAt: time.Now().UTC().Truncate(time.Second)}
	b.tables++
	table := fmt.Sprintf("%s_%d", b.prefix, b.tables)
	drop := b.dropper(table)
	defer drop()
	if err := inbox.OnSQL(b.watchDB).Migrate(ctx, v.options(table)...); err != nil {
		return rec, fmt.Errorf("migrate %s: %w", table, err)
	}
	b.uuid7[table] = v.IDType == inbox.IDTypeUUID
	p := scalePlan{expired: rec.Expired, live: n, expNewest: inbox.DefaultRetention + time.Hour,
		liveOldest: inbox.DefaultRetention - scaleLiveMargin, liveNewest: scaleLiveNewest}
	p.expOldest = p.expNewest + c.ExpiredSpan
	if err := b.watchDB.QueryRowContext(ctx, `SELECT now()`).Scan(&p.now); err != nil {
		return rec, err
	}
	var expiredParts int
	if v.Partitioned {
		start := time.Now()
		var err error
		if expiredParts, err = b.createPartitions(ctx, table, p.now, p.expOldest.Seconds(), p.expNewest.Seconds(), false); err != nil {
			return rec, err
		}
		live, err := b.createPartitions(ctx, table, p.now, p.liveOldest.Seconds(), p.liveNewest.Seconds(), true)
		if err != nil {
			return rec, err
		}
		b.logf("%s: %d expired and %d live partitions of an hour in %s", table, expiredParts, live, time.Since(start).Round(100*time.Millisecond))
	}
	var err error
	if p.consumers, err = b.scaleConsumers(ctx, table, c.Consumers, p.now.Add(-p.expOldest)); err != nil {
		return rec, err
	}
	b.logf("%s (%s): loading %s expired and %s live rows", table, v.Name, thousands(float64(p.expired)), thousands(float64(n)))
	loaded, took, err := b.scaleLoad(ctx, table, v, p)
	if err != nil {
		return rec, err
	}
	rec.Loaded, rec.LoadSeconds, rec.LoadRowsPerSec = loaded, took.Seconds(), float64(loaded)/took.Seconds()
	if loaded != int64(p.total()) {
		return rec, fmt.Errorf("load %s: COPY reported %d rows, want %d", table, loaded, p.total())
	}
	if v.Partitioned {
		if err := b.scaleCheckPartitions(ctx, table, p, expiredParts); err != nil {
			return rec, err
		}
	}
	start := time.Now()
	if err := b.settle(ctx, table); err != nil {
		return rec, err
	}
	rec.SettleSeconds = time.Since(start).Seconds()
	if rec.Size, err = b.scaleSize(ctx, table, p.total()); err != nil {
		return rec, err
	}
	b.logf("%s: %s rows in %.1f s (%s rows/s), settled in %.1f s; %.1f bytes/row, primary key level %d, %s on disk",
		table, thousands(float64(loaded)), rec.LoadSeconds, thousands(math.Round(rec.LoadRowsPerSec)), rec.SettleSeconds,
		rec.Size.TotalPerRow, rec.Size.PKeyLevel, scaleBytes(rec.Size.DiskBytes))

	if rec.Idle, _, err = b.scaleWindow(ctx, table, c.Measure, nil, measureOptions{Rows: p.total()}); err != nil {
		return rec, fmt.Errorf("idle: %w", err)
	}
	rec.Idle.Window = fmt.Sprintf("idle, %s", c.Measure)
	b.logf("%s idle: %s", table, rec.Idle.summary())

	// Both windows begin right after a checkpoint, so both pay for the first change of each page after one.
	if _, err := b.watchDB.ExecContext(ctx, `CHECKPOINT`); err != nil {
		return rec, err
	}
	var res inbox.CleanupResult
	cleanup := func(ctx context.Context) (latencyRemoval, error) {
		var err error
		res, err = inbox.OnSQL(b.cleanDB).Cleanup(ctx, inbox.CleanupParams{BatchSize: c.Batch, Pause: c.Pause}, v.options(table)...)
		removed := res.Deleted
		if v.Partitioned && res.PartitionsDropped == expiredParts {
			removed += int64(p.expired) // the rows of the dropped partitions, counted before the window
		}
		return latencyRemoval{Rows: removed, Took: res.Took, Batches: res.Batches + res.PartitionsDropped}, err
	}
	var removed int64
	o := measureOptions{Rows: p.total() + rec.Idle.Claims + c.Claimers, AtLeast: c.Measure}
	if rec.Cleanup, removed, err = b.scaleWindow(ctx, table, 0, cleanup, o); err != nil {
		return rec, fmt.Errorf("cleanup: %w", err)
	}
	rec.Removal = scaleRemoval{Kind: v.Cleanup, Rows: removed, Seconds: res.Took.Seconds(), Batches: res.Batches,
		PartitionsDropped: res.PartitionsDropped}
	rec.Cleanup.Window = "the cleanup"
	if rec.Cleanup.Extended {
		rec.Cleanup.Window = fmt.Sprintf("the cleanup (%.1f s), then claims until %s had passed", res.Took.Seconds(), c.Measure)
	}
	b.logf("%s during %s: %s; %s rows removed in %.1f s", table, v.Cleanup, rec.Cleanup.summary(), thousands(float64(removed)), res.Took.Seconds())
	switch {
	case v.Partitioned && (res.PartitionsDropped != expiredParts || res.Deleted != 0):
		return rec, fmt.Errorf("the cleanup dropped %d of the %d expired partitions and deleted %d rows besides", res.PartitionsDropped, expiredParts, res.Deleted)
	case !v.Partitioned && res.Deleted != int64(p.expired):
		return rec, fmt.Errorf("the cleanup deleted %d rows, want the %d expired ones", res.Deleted, p.expired)
	}
	if rec.Removal.ExpiredLeft, err = b.scaleExpiredLeft(ctx, table); err != nil {
		return rec, err
	}
	if rec.Removal.ExpiredLeft != 0 {
		return rec, fmt.Errorf("the cleanup left %d expired rows in %s", rec.Removal.ExpiredLeft, table)
	}
	return rec, nil
}

// scaleConsumers registers the consumers the rows go round-robin over, the claims' own first, dated back to the
// oldest row as migration 007 dates an existing table's, and returns their ids.
func (b *latencyBench) scaleConsumers(ctx context.Context, table string, n int, oldest time.Time) ([]int, error) {
	ids := make([]int, n)
	for k := range n {
		name := latencyConsumer
		if k > 0 {
			name = fmt.Sprintf("%s-%d", latencyConsumer, k+1)
		}
		if err := b.watchDB.QueryRowContext(ctx, `INSERT INTO `+pq.QuoteIdentifier(table+"_consumers")+
			` (name, created_at) VALUES ($1, $2) RETURNING id`, name, oldest).Scan(&ids[k]); err != nil {
			return nil, fmt.Errorf("register consumer %s in %s: %w", name, table, err)
		}
	}
	return ids, nil
}

// scaleLoad copies the plan's rows into table, in ID order, scaleChunk rows to a COPY and its transaction, and
// returns how many rows the COPYs reported and how long they took.
func (b *latencyBench) scaleLoad(ctx context.Context, table string, v scaleVariant, p scalePlan) (int64, time.Duration, error) {
	ids := newScaleIDs(v.IDType == inbox.IDTypeText, p.total(), 1)
	var loaded int64
	start := time.Now()
	for from := 0; from < p.total(); from += scaleChunk {
		to := min(p.total(), from+scaleChunk)
		n, err := b.scaleCopy(ctx, table, p, ids, from, to)
		if err != nil {
			return loaded, time.Since(start), fmt.Errorf("load %s, rows %d to %d: %w", table, from, to, err)
		}
		loaded += n
		if from/scaleProgressEvery != to/scaleProgressEvery && to < p.total() {
			b.logf("%s: %s of %s rows, %s rows/s", table, thousands(float64(loaded)), thousands(float64(p.total())),
				thousands(math.Round(float64(loaded)/time.Since(start).Seconds())))
		}
	}
	return loaded, time.Since(start), nil
}

func (b *latencyBench) scaleCopy(ctx context.Context, table string, p scalePlan, ids *scaleIDs, from, to int) (n int64, err error) {
	tx, err := b.watchDB.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	// lib/pq runs a prepared COPY ... FROM STDIN as a copy: each Exec sends a row, the last one without arguments
	// ends the COPY.
	stmt, err := tx.PrepareContext(ctx, `COPY `+pq.QuoteIdentifier(table)+` (processed_at, consumer_id, state, message_id) FROM STDIN`)
	if err != nil {
		return 0, err
	}
	for i := from; i < to; i++ {
		ms := p.at(i)
		if _, err := stmt.ExecContext(ctx, ms/60_000, p.consumers[i%len(p.consumers)], "d", ids.next(i, ms)); err != nil {
			return 0, err
		}
	}
	res, err := stmt.ExecContext(ctx)
	if err != nil {
		return 0, err
	}
	if n, err = res.RowsAffected(); err != nil {
		return 0, err
	}
	if err := stmt.Close(); err != nil {
		return 0, err
	}
	return n, tx.Commit()
}

// scaleCheckPartitions checks that the rows landed in their hours' partitions: none in the default partition, and
// every expired row in the expired partitions, so that dropping them removes the expired rows.
func (b *latencyBench) scaleCheckPartitions(ctx context.Context, table string, p scalePlan, expiredParts int) error {
	end := maintain.PeriodStart(p.now.Add(-p.expOldest), latencyPartitionPeriod).Add(time.Duration(expiredParts) * latencyPartitionPeriod)
	var inDefault, inExpired int
	if err := b.watchDB.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM `+pq.QuoteIdentifier(table+"_default")+`),
		(SELECT count(*) FROM `+pq.QuoteIdentifier(table)+` WHERE message_id < $1::uuid)`, maintain.UUID7Floor(end)).
		Scan(&inDefault, &inExpired); err != nil {
		return fmt.Errorf("count the rows of %s's partitions: %w", table, err)
	}
	if inDefault != 0 || inExpired != p.expired {
		return fmt.Errorf("load %s: %d rows in the default partition and %d in the expired ones, want 0 and %d", table, inDefault, inExpired, p.expired)
	}
	return nil
}

// scaleExpiredLeft counts the rows of table older than the retention.
func (b *latencyBench) scaleExpiredLeft(ctx context.Context, table string) (int, error) {
	var n int
	err := b.watchDB.QueryRowContext(ctx, `SELECT count(*) FROM `+pq.QuoteIdentifier(table)+
		` WHERE processed_at < floor(extract(epoch FROM now()) / 60)::integer - $1::integer`,
		int(inbox.DefaultRetention/time.Minute)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count the expired rows left in %s: %w", table, err)
	}
	return n, nil
}

// scaleRelsSQL is the table ($1) and its partitions: the relations whose sizes and buffer counters are summed.
const scaleRelsSQL = `WITH rels AS (
		SELECT to_regclass(quote_ident($1::text))::oid AS rel
		UNION ALL SELECT inhrelid FROM pg_inherits WHERE inhparent = to_regclass(quote_ident($1::text))
	)`

// scaleSizeSQL reads what storageSizesOf does (storage.go), summed over the partitions: the heap's main fork,
// the indexes, everything, the primary keys, and the consumers and produced tables beside; then the partitions,
// and the largest primary key index, whose depth the record gives.
const scaleSizeSQL = scaleRelsSQL + `, side AS (
		SELECT to_regclass(quote_ident($1::text || s)) AS rel FROM unnest(ARRAY['_consumers', '_produced']) s
	), pkeys AS (
		SELECT i.indexrelid FROM pg_index i JOIN rels ON i.indrelid = rels.rel JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indisprimary AND c.relkind = 'i'
	)
	SELECT (SELECT sum(pg_relation_size(rel, 'main')) FROM rels)::bigint, (SELECT sum(pg_indexes_size(rel)) FROM rels)::bigint,
		(SELECT sum(pg_total_relation_size(rel)) FROM rels)::bigint,
		(SELECT coalesce(sum(pg_relation_size(indexrelid)), 0) FROM pkeys)::bigint,
		(SELECT coalesce(sum(pg_indexes_size(rel)), 0) FROM side WHERE rel IS NOT NULL)::bigint,
		(SELECT coalesce(sum(pg_total_relation_size(rel)), 0) FROM side WHERE rel IS NOT NULL)::bigint,
		(SELECT count(*) - 1 FROM rels),
		(SELECT indexrelid::regclass::text FROM pkeys ORDER BY pg_relation_size(indexrelid) DESC, 1 LIMIT 1)`

// scaleSize reads the table's size per row of rows, and the level of its (largest) primary key's root.
func (b *latencyBench) scaleSize(ctx context.Context, table string, rows int) (scaleSize, error) {
	var s scaleSize
	var heap, index, total, pkey, sideIndex, side int64
	if err := b.watchDB.QueryRowContext(ctx, scaleSizeSQL, table).Scan(&heap, &index, &total, &pkey, &sideIndex, &side,
		&s.Partitions, &s.PKeyIndex); err != nil {
		return s, fmt.Errorf("size %s: %w", table, err)
	}
	if err := b.watchDB.QueryRowContext(ctx, `SELECT level FROM bt_metap($1)`, s.PKeyIndex).Scan(&s.PKeyLevel); err != nil {
		return s, fmt.Errorf("bt_metap(%s): %w", s.PKeyIndex, err)
	}
	n := float64(rows)
	s.HeapPerRow, s.IndexPerRow, s.PKeyPerRow = float64(heap)/n, float64(index+sideIndex)/n, float64(pkey)/n
	s.TotalPerRow, s.DiskBytes = float64(total+side)/n, total+side
	return s, nil
}

// scaleBlocksSQL reads the buffer counters of the table ($1) and of each partition: heap and index blocks found
// in shared_buffers (hit) and read from the kernel (read).
const scaleBlocksSQL = scaleRelsSQL + `
	SELECT rels.rel::bigint, coalesce(t.heap_blks_hit, 0), coalesce(t.heap_blks_read, 0),
		coalesce((SELECT sum(idx_blks_hit) FROM pg_statio_user_indexes i WHERE i.relid = rels.rel), 0)::bigint,
		coalesce((SELECT sum(idx_blks_read) FROM pg_statio_user_indexes i WHERE i.relid = rels.rel), 0)::bigint
	FROM rels LEFT JOIN pg_statio_user_tables t ON t.relid = rels.rel`

type scaleBlocks struct{ heapHit, heapRead, indexHit, indexRead int64 }

func (b *latencyBench) blocks(ctx context.Context, table string) (map[int64]scaleBlocks, error) {
	rows, err := b.watchDB.QueryContext(ctx, scaleBlocksSQL, table)
	if err != nil {
		return nil, fmt.Errorf("read the buffer counters of %s: %w", table, err)
	}
	defer rows.Close()
	out := map[int64]scaleBlocks{}
	for rows.Next() {
		var rel int64
		var c scaleBlocks
		if err := rows.Scan(&rel, &c.heapHit, &c.heapRead, &c.indexHit, &c.indexRead); err != nil {
			return nil, err
		}
		out[rel] = c
	}
	return out, rows.Err()
}

// quiesce closes the idle connections of the claims' and the cleanup's pools, and of the sampler's with watch,
// and waits until their backends have exited. A busy backend reports its buffer counters at most once a second,
// and an idle one up to ten seconds after its last statement, but every backend reports them as it exits: after
// quiesce, the counters hold everything those backends did.
func (b *latencyBench) quiesce(ctx context.Context, watch bool) error {
	type pool struct {
		db   *sql.DB
		app  string
		idle int // as newBench set it
	}
	pools := []pool{{b.claimDB, b.claimApp, b.cfg.Claimers + 1}, {b.cleanDB, b.cleanApp, 2}}
	if watch {
		pools = append(pools, pool{b.watchDB, b.watchApp, 2})
	}
	var apps []string
	for _, p := range pools {
		p.db.SetMaxIdleConns(0)
		apps = append(apps, p.app)
	}
	conn, err := b.watchDB.Conn(ctx) // a new backend: the old ones are closing
	for _, p := range pools {
		p.db.SetMaxIdleConns(p.idle)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline := time.Now().Add(scaleStatsWait)
	for {
		var n int
		if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = ANY($1) AND pid <> pg_backend_pid()`, pq.Array(apps)).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d backends of %v still there %s after their connections were closed", n, apps, scaleStatsWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// scaleWindow measures the claims on table, as measureWith does, and the buffer cache hit ratio of the table and
// its indexes over the window: every backend that touched them before the window has reported its counters, and
// so have the claims' and the cleanup's after it. Partitions dropped during the window drop out of the sums. It
// returns the rows beside removed, too.
func (b *latencyBench) scaleWindow(ctx context.Context, table string, window time.Duration, beside func(context.Context) (latencyRemoval, error), o measureOptions) (scaleWindow, int64, error) {
	if err := b.quiesce(ctx, true); err != nil {
		return scaleWindow{}, 0, err
	}
	var before, after map[int64]scaleBlocks
	o.Before = func(ctx context.Context) (err error) {
		before, err = b.blocks(ctx, table)
		return err
	}
	o.After = func(ctx context.Context) (err error) {
		if err := b.quiesce(ctx, false); err != nil {
			return err
		}
		after, err = b.blocks(ctx, table)
		return err
	}
	s, err := b.measureWith(ctx, table, window, beside, o)
	if err != nil {
		return scaleWindow{}, 0, err
	}
	var d scaleBlocks
	for rel, a := range after {
		if bf, ok := before[rel]; ok {
			d.heapHit, d.heapRead = d.heapHit+a.heapHit-bf.heapHit, d.heapRead+a.heapRead-bf.heapRead
			d.indexHit, d.indexRead = d.indexHit+a.indexHit-bf.indexHit, d.indexRead+a.indexRead-bf.indexRead
		}
	}
	msOf := func(t time.Duration) float64 { return float64(t) / float64(time.Millisecond) }
	w := scaleWindow{Extended: s.Extended, TableRows: s.TableRows, Claims: s.Claims, Seconds: s.Elapsed.Seconds(), PerSec: s.PerSec,
		P50Ms: msOf(s.P50), P99Ms: msOf(s.P99), P999Ms: msOf(s.P999), MaxMs: msOf(s.Max),
		BlocksHit: d.heapHit + d.indexHit, BlocksRead: d.heapRead + d.indexRead,
		CacheHit: hitRatio(d.heapHit+d.indexHit, d.heapRead+d.indexRead), HeapHit: hitRatio(d.heapHit, d.heapRead),
		IndexHit: hitRatio(d.indexHit, d.indexRead), CPUBusy: s.CPUBusy, WALBytes: s.WALBytes, Checkpoints: s.Checkpoints}
	return w, s.Removed, nil
}

// hitRatio is hits over all the blocks asked for, or -1 when none was.
func hitRatio(hit, read int64) float64 {
	if hit+read <= 0 {
		return -1
	}
	return float64(hit) / float64(hit+read)
}

func (w scaleWindow) summary() string {
	return fmt.Sprintf("%s claims in %.1f s, %s/s, p50 %.2f p99 %.2f p99.9 %.2f max %.1f ms, cache hit %s",
		thousands(float64(w.Claims)), w.Seconds, thousands(math.Round(w.PerSec)), w.P50Ms, w.P99Ms, w.P999Ms, w.MaxMs, percentCell(w.CacheHit))
}
