package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"
)

const storageCompactUsage = `harness storage-compact: bytes per row of compact inbox layouts beside today's table, and how a BRIN
cleanup index behaves (docs/results/storage-compact.md).

--parts picks what runs:

  sizes    Each layout (--layouts) is created fresh per run and key type, filled with --rows rows in one COPY
           (the consumers taking turns when --consumers > 1, or each claiming every ID with --lag), VACUUM
           ANALYZEd and measured as 'harness storage' measures: heap, primary key, cleanup index and the rest
           (the 'processing' index, the consumers table, the free-space and visibility maps). Prints the
           median per row of --runs runs.
  cleanup  The batched cleanup of --rows rows spread over 14 days: today's table through inbox.Cleanup (its
           B-tree), the recommended layout through its BRIN index with each shape of batch query. Deletes one
           day, then half the table, in batches of --batch; median of --runs runs.
  reuse    --days days of service on the recommended layout: each day the cleanup deletes the day that left
           the retention window, VACUUM frees its pages and a new day of rows fills them. Reports how many
           heap pages the BRIN index makes the cleanup read, beside the pages that hold expired rows, per
           pages_per_range and upkeep of the BRIN ranges the cleanup deleted in.
  claims   Claim INSERTs, one per transaction from --workers workers, into today's table and the compact
           layouts (the consumer's id looked up by name in the claim, or known), each holding --rows rows after
           a day's cleanup and VACUUM, so that new rows land in freed pages inside summarized BRIN ranges;
           --rounds rounds of --claims claims, tables interleaved. Sessions run with synchronous_commit off, so
           that the WAL flush does not hide the work of the indexes.

Flags:
`

// compactLayout is one candidate table: the statements that create it, with {table} and {id} (the message ID's
// type) to fill in.
type compactLayout struct {
	Name string
	// Doc says what the layout changes against the previous one, for the table's legend.
	Doc string
	// Minutes is true when processed_at is an integer of minutes since 1970 instead of a timestamptz.
	Minutes bool
	// DDL creates the layout's tables and indexes.
	DDL string
}

// The layouts compared with today's table. They share the consumers, produced and locks tables and the
// applying guard; they differ in the columns of the row, the order of the primary key and the cleanup's index.
// Every layout keeps eight columns, so the null bitmap of the lease columns fits the tuple header's spare byte.
//
// Column order follows alignment: a row's data starts at byte 24 (a 23-byte header and the bitmap), processed_at
// first so that an 8-byte timestamptz needs no padding, the 2-byte consumer_id and the 1-byte state next, and the
// message ID last, because neither a uuid (1-byte alignment) nor a short text (a 1-byte length, no alignment)
// needs any padding there.
var compactLayouts = []compactLayout{
	{
		Name: "ids-btree",
		Doc:  "consumer as a smallint id, state as a 1-byte \"char\"; today's B-tree (consumer_id, processed_at)",
		DDL: compactCommonDDL + compactRowDDL(false, "consumer_id, message_id", 90) + `
CREATE INDEX "{table}_processed_at" ON "{table}" (consumer_id, processed_at) WHERE state <> 'p';`,
	},
	{
		Name: "ids-brin",
		Doc:  "as ids-btree, with a BRIN index on processed_at instead of the B-tree",
		DDL:  compactCommonDDL + compactRowDDL(false, "consumer_id, message_id", 90) + compactBRINDDL(32),
	},
	{
		Name: "key-first",
		Doc:  "as ids-brin, with the primary key led by the message ID: (message_id, consumer_id)",
		DDL:  compactCommonDDL + compactRowDDL(false, "message_id, consumer_id", 90) + compactBRINDDL(32),
	},
	{
		Name: "key-first-ff100",
		Doc:  "as key-first, with the primary key's fillfactor 100",
		DDL:  compactCommonDDL + compactRowDDL(false, "message_id, consumer_id", 100) + compactBRINDDL(32),
	},
	{
		Name:    "minutes",
		Doc:     "as key-first, with processed_at an integer of minutes since 1970",
		Minutes: true,
		DDL:     compactRecommendedDDL(32),
	},
	{
		Name:    "minutes-ff100",
		Doc:     "as minutes, with the primary key's fillfactor 100",
		Minutes: true,
		DDL:     compactCommonDDL + compactRowDDL(true, "message_id, consumer_id", 100) + compactBRINDDL(32),
	},
}

// compactRecommended is the layout the cleanup, reuse and claims parts run on, the one docs/results/storage-compact.md
// recommends.
const compactRecommended = "minutes"

// compactTodayName is today's table, created by the library's own migrations, in the tables and flags.
const compactTodayName = "today"

// compactCommonDDL is what every candidate layout has besides its row: the consumers, once each, with the record
// that answers "how far back does this consumer remember" without an index on the inbox; and the locks table of
// migration 006, unchanged.
const compactCommonDDL = `
CREATE TABLE "{table}_consumers" (
    id             smallint    GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    name           text        NOT NULL UNIQUE,
    created_at     timestamptz NOT NULL DEFAULT now(),
    cleaned_before timestamptz
);
CREATE TABLE "{table}_locks" (
    name       text        PRIMARY KEY,
    holder     uuid        NOT NULL,
    held_until timestamptz NOT NULL
);`

// compactRowDDL is the inbox table of a candidate, its produced table and its guard trigger. minutes makes
// processed_at an integer of minutes since 1970; pk is the primary key's column list and ff its fillfactor.
func compactRowDDL(minutes bool, pk string, ff int) string {
	processedAt := `processed_at timestamptz NOT NULL DEFAULT now(),`
	if minutes {
		processedAt = `processed_at integer     NOT NULL DEFAULT (floor(extract(epoch FROM now()) / 60))::integer,`
	}
	return fmt.Sprintf(`
CREATE TABLE "{table}" (
    %s
    consumer_id  smallint    NOT NULL,
    state        "char"      NOT NULL DEFAULT 'd',
    message_id   {id}        NOT NULL,
    locked_until timestamptz,
    attempts     integer,
    lease_token  uuid,
    last_error   text,
    PRIMARY KEY (%s) WITH (fillfactor = %d)
);
CREATE INDEX "{table}_processing" ON "{table}" (locked_until) WHERE state = 'p';
CREATE TABLE "{table}_produced" (
    message_id  {id}     NOT NULL,
    consumer_id smallint NOT NULL,
    produced    jsonb    NOT NULL,
    PRIMARY KEY (%s),
    FOREIGN KEY (%s) REFERENCES "{table}" ON DELETE CASCADE
);
CREATE FUNCTION "{table}_unfinished_claim"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM "{table}"
               WHERE consumer_id = NEW.consumer_id AND message_id = NEW.message_id AND state = 'a') THEN
        RAISE EXCEPTION 'inbox: claim %%/%% would commit before its handler finished', NEW.consumer_id, NEW.message_id;
    END IF;
    RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER "{table}_unfinished_claim"
    AFTER INSERT OR UPDATE OF state ON "{table}"
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.state = 'a')
    EXECUTE FUNCTION "{table}_unfinished_claim"();`, processedAt, pk, ff, pk, pk)
}

// compactBRINDDL is the cleanup's BRIN index: one summary (the least and greatest processed_at) per ppr heap pages.
func compactBRINDDL(ppr int) string {
	return fmt.Sprintf(`
CREATE INDEX "{table}_processed_at" ON "{table}" USING brin (processed_at) WITH (pages_per_range = %d);`, ppr)
}

// compactDropDDL drops what any layout, today's included, may have created under table's name.
const compactDropDDL = `DROP TABLE IF EXISTS "{table}_produced", "{table}_consumers", "{table}_locks", "{table}_migrations", "{table}" CASCADE;
DROP FUNCTION IF EXISTS "{table}_unfinished_claim"() CASCADE;`

func compactFill(ddl, table, idType string) string {
	return strings.NewReplacer("{table}", table, "{id}", idType).Replace(ddl)
}

// compactTarget is the goal per key type, in bytes per row, every index counted.
var compactTarget = map[string]float64{"text": 175, "uuid v4": 115, "uuid v7": 100}

// compactSizes is one measurement of a layout, in bytes per row. Other is everything besides the heap, the
// primary key and the cleanup index: the 'processing' index, the free-space and visibility maps and, for the
// candidates, the consumers table.
type compactSizes struct {
	Heap, PKey, Cleanup, Other, Total float64
}

type compactConfig struct {
	dsn       string
	runs      int
	rows      int
	consumers int
	lag       int
	batch     int
	days      int
	rounds    int
	claims    int
	workers   int
	layouts   []string
	parts     []string
}

func runStorageCompact(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("storage-compact", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), storageCompactUsage); fs.PrintDefaults() }
	var c compactConfig
	var layouts, parts string
	fs.StringVar(&c.dsn, "dsn", defaultDSN, "PostgreSQL DSN (URL form); the tables are created and dropped in its database")
	fs.IntVar(&c.runs, "runs", 5, "runs per layout and key type (sizes) or per method (cleanup); the tables show the median")
	fs.IntVar(&c.rows, "rows", 1_000_000, "rows per table")
	fs.IntVar(&c.consumers, "consumers", 1, "consumers the rows are spread over, round-robin (sizes)")
	fs.IntVar(&c.lag, "lag", 0, "with --consumers > 1: every consumer claims every message ID, each this many messages after the previous consumer (sizes; 0: each row its own ID)")
	fs.IntVar(&c.batch, "batch", 5000, "rows per cleanup batch (cleanup, reuse)")
	fs.IntVar(&c.days, "days", 16, "days of service simulated (reuse); 14 are the retention window")
	fs.IntVar(&c.rounds, "rounds", 5, "rounds per table (claims)")
	fs.IntVar(&c.claims, "claims", 20_000, "claims per round (claims)")
	fs.IntVar(&c.workers, "workers", 4, "concurrent claimers (claims)")
	fs.StringVar(&layouts, "layouts", compactTodayName+","+strings.Join(compactLayoutNames(), ","),
		"layouts to measure, comma-separated (sizes)")
	fs.StringVar(&parts, "parts", "sizes", "what to run, comma-separated: sizes, cleanup, reuse, claims")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if c.runs < 1 || c.rows < 1000 || c.consumers < 1 || c.consumers > 999 || c.lag < 0 || c.batch < 1 || c.days < 1 ||
		c.rounds < 1 || c.claims < 1 || c.workers < 1 {
		return errors.New("storage-compact: want --runs, --batch, --days, --rounds, --claims, --workers >= 1, --rows >= 1000, 1 <= --consumers <= 999, --lag >= 0")
	}
	for _, l := range strings.Split(layouts, ",") {
		l = strings.TrimSpace(l)
		if l != compactTodayName && compactLayoutByName(l) == nil {
			return fmt.Errorf("storage-compact: unknown layout %q (want %s or one of %v)", l, compactTodayName, compactLayoutNames())
		}
		c.layouts = append(c.layouts, l)
	}
	for _, p := range strings.Split(parts, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains([]string{"sizes", "cleanup", "reuse", "claims"}, p) {
			return fmt.Errorf("storage-compact: unknown part %q (want sizes, cleanup, reuse or claims)", p)
		}
		c.parts = append(c.parts, p)
	}

	db, err := sql.Open("postgres", c.dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	var version string
	if err := db.QueryRowContext(ctx, `SHOW server_version`).Scan(&version); err != nil {
		return fmt.Errorf("storage-compact: %w", err)
	}
	version = strings.Fields(version)[0]
	progress := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "%s storage-compact: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
	}
	progress("PostgreSQL %s, parts %v", version, c.parts)
	for _, part := range c.parts {
		var out string
		var err error
		switch part {
		case "sizes":
			out, err = compactSizesPart(ctx, db, c, version, progress)
		case "cleanup":
			out, err = compactCleanupPart(ctx, db, c, progress)
		case "reuse":
			out, err = compactReusePart(ctx, db, c, progress)
		case "claims":
			out, err = compactClaimsPart(ctx, c, progress)
		}
		if err != nil {
			return fmt.Errorf("storage-compact: %s: %w", part, err)
		}
		fmt.Print(out + "\n")
	}
	return nil
}

func compactLayoutNames() []string {
	var out []string
	for _, l := range compactLayouts {
		out = append(out, l.Name)
	}
	return out
}

func compactLayoutByName(name string) *compactLayout {
	for i := range compactLayouts {
		if compactLayouts[i].Name == name {
			return &compactLayouts[i]
		}
	}
	return nil
}

func compactSizesPart(ctx context.Context, db *sql.DB, c compactConfig, version string, progress func(string, ...any)) (string, error) {
	progress("sizes: %d runs of %s rows, %d consumer(s), lag %d, layouts %v", c.runs, thousands(float64(c.rows)), c.consumers, c.lag, c.layouts)
	samples := map[string][]compactSizes{} // layout + "/" + key -> one per run
	// Runs are the outer loop, as in 'harness storage', so a drift of the machine spreads over every layout.
	for run := 1; run <= c.runs; run++ {
		for _, layout := range c.layouts {
			for _, key := range storageKeys {
				start := time.Now()
				s, err := compactMeasure(ctx, db, layout, key, c.rows, c.consumers, c.lag)
				if err != nil {
					return "", fmt.Errorf("run %d, %s, %s keys: %w", run, layout, key, err)
				}
				samples[layout+"/"+key] = append(samples[layout+"/"+key], s)
				progress("run %d/%d %-15s %-7s heap %5.1f  pkey %5.1f  cleanup %5.1f  other %4.1f  total %6.1f bytes/row  (%s)",
					run, c.runs, layout, key, s.Heap, s.PKey, s.Cleanup, s.Other, s.Total, time.Since(start).Round(time.Second))
			}
		}
	}
	med := map[string]compactSizes{}
	for k, ss := range samples {
		med[k] = compactMedian(ss)
	}
	return compactSizesTable(c, version, med), nil
}

// compactMeasure creates layout's tables for key, fills them with rows rows of consumers (lag as in compactRows),
// vacuums them and returns their size per row. The tables are dropped again, whatever happens.
func compactMeasure(ctx context.Context, db *sql.DB, layout, key string, rows, consumers, lag int) (compactSizes, error) {
	table := fmt.Sprintf("harness_compact_%s_%s_%d", strings.ReplaceAll(layout, "-", "_"), strings.ReplaceAll(key, " ", "_"), os.Getpid())
	drop, err := compactCreate(ctx, db, layout, table, compactIDType(key))
	defer drop()
	if err != nil {
		return compactSizes{}, err
	}
	if err := compactFillRows(ctx, db, layout, table, key, compactRows{N: rows, Consumers: consumers, Lag: lag,
		Start: time.Now().Add(-time.Duration(rows) * time.Millisecond), Step: time.Millisecond}); err != nil {
		return compactSizes{}, fmt.Errorf("fill: %w", err)
	}
	if _, err := db.ExecContext(ctx, `VACUUM ANALYZE "`+table+`"`); err != nil {
		return compactSizes{}, err
	}
	return compactReadSizes(ctx, db, table, rows)
}

// compactReadSizes reads the sizes of table and its consumers table, if it has one, per row of rows.
func compactReadSizes(ctx context.Context, db *sql.DB, table string, rows int) (compactSizes, error) {
	var heap, pkey, cleanup, total, consumers int64
	err := db.QueryRowContext(ctx, `SELECT pg_relation_size($1::text::regclass, 'main'),
			pg_relation_size(($1::text || '_pkey')::regclass),
			coalesce(pg_relation_size(to_regclass($1::text || '_processed_at')), 0),
			pg_total_relation_size($1::text::regclass),
			coalesce(pg_total_relation_size(to_regclass($1::text || '_consumers')), 0)`, table).
		Scan(&heap, &pkey, &cleanup, &total, &consumers)
	if err != nil {
		return compactSizes{}, err
	}
	n := float64(rows)
	return compactSizes{Heap: float64(heap) / n, PKey: float64(pkey) / n, Cleanup: float64(cleanup) / n,
		Other: float64(total+consumers-heap-pkey-cleanup) / n, Total: float64(total+consumers) / n}, nil
}

func compactIDType(key string) string {
	if key == "text" {
		return "text"
	}
	return "uuid"
}

// compactCreate creates layout under table's name and returns how to drop it, which is safe to call whatever
// happened. Today's table is built by the library's own migrations, through storageCreate, as 'harness storage' builds it.
func compactCreate(ctx context.Context, db *sql.DB, layout, table, idType string) (drop func(), err error) {
	dropSQL := compactFill(compactDropDDL, table, idType)
	dropAll := func() { _, _ = db.Exec(dropSQL) }
	drop = dropAll
	if layout == compactTodayName {
		down, err := storageCreate(ctx, db, "before", table, idType)
		if down != nil {
			return func() { down(); dropAll() }, err
		}
		return dropAll, err
	}
	l := compactLayoutByName(layout)
	if l == nil {
		return drop, fmt.Errorf("unknown layout %q", layout)
	}
	if _, err := db.ExecContext(ctx, compactFill(l.DDL, table, idType)); err != nil {
		return drop, fmt.Errorf("create %s: %w", layout, err)
	}
	return drop, nil
}

// compactConsumerName is the name of the i-th consumer (from 0): storageConsumer for the first, so that one
// consumer measures exactly as 'harness storage' does, and names of the same length for the others.
func compactConsumerName(i int) string {
	if i == 0 {
		return storageConsumer
	}
	return fmt.Sprintf("wallet-cred%03d", i)
}

// compactRows says which rows to copy in: N of them, consumer i%Consumers for row i, processed_at Start plus i
// times Step.
type compactRows struct {
	N, Consumers int
	Start        time.Time
	Step         time.Duration
	// First numbers the first consumer, so that rows added later keep the consumer order of the first fill.
	First int
	// Lag, when positive, has every consumer claim every message ID, consumer k (from 0) its copy Lag*k messages
	// after the first consumer, as consumers of one topic that lag behind each other; rows are N in all. Zero
	// gives each row its own ID, the consumers taking turns.
	Lag int
}

// compactNextSlot is the slot after consumer k's at tick: the next consumer, or the first of the next tick.
func compactNextSlot(tick, k, consumers int) (int, int) {
	if k+1 < consumers {
		return tick, k + 1
	}
	return tick + 1, 0
}

// compactFillRows copies r's rows into table in one transaction, keys made in Go as 'harness storage' makes them.
// The candidates get their consumers' ids from the consumers table, which this fills first when needed.
func compactFillRows(ctx context.Context, db *sql.DB, layout, table, key string, r compactRows) (err error) {
	if r.Consumers < 1 {
		r.Consumers = 1
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	today := layout == compactTodayName
	minutes := !today && compactLayoutByName(layout).Minutes
	ids := make([]int, r.Consumers)
	if !today {
		for i := range ids {
			err := tx.QueryRowContext(ctx, `WITH added AS (
					INSERT INTO `+pq.QuoteIdentifier(table+"_consumers")+` (name) VALUES ($1)
					ON CONFLICT (name) DO NOTHING RETURNING id)
				SELECT id FROM added UNION ALL SELECT id FROM `+pq.QuoteIdentifier(table+"_consumers")+` WHERE name = $1`,
				compactConsumerName(i)).Scan(&ids[i])
			if err != nil {
				return fmt.Errorf("consumer %d: %w", i, err)
			}
		}
	}
	cols := "(consumer_id, message_id, processed_at)"
	if today {
		cols = "(consumer, message_id, processed_at)"
	}
	stmt, err := tx.PrepareContext(ctx, "COPY "+pq.QuoteIdentifier(table)+" "+cols+" FROM STDIN")
	if err != nil {
		return err
	}
	newID := func() (string, error) {
		if key != "uuid v7" {
			return uuid.NewString(), nil
		}
		u, err := uuid.NewV7()
		return u.String(), err
	}
	// With a lag, message j is claimed by every consumer, consumer k's copy at tick j + k*Lag; made holds the IDs
	// made so far, in order.
	var made []string
	tick, k := 0, 0
	for i := range r.N {
		var id string
		ci := (r.First + i) % r.Consumers
		if r.Lag > 0 {
			for tick-k*r.Lag < 0 { // consumer k has not started yet at this tick
				tick, k = compactNextSlot(tick, k, r.Consumers)
			}
			j := tick - k*r.Lag
			for len(made) <= j {
				id, err := newID()
				if err != nil {
					return err
				}
				made = append(made, id)
			}
			id, ci = made[j], k
			tick, k = compactNextSlot(tick, k, r.Consumers)
		} else if id, err = newID(); err != nil {
			return err
		}
		var consumer any = ids[ci]
		if today {
			consumer = compactConsumerName(ci)
		}
		at := r.Start.Add(time.Duration(i) * r.Step).UTC()
		var processedAt any = at
		if minutes {
			processedAt = compactMinutes(at)
		}
		if _, err := stmt.ExecContext(ctx, consumer, id, processedAt); err != nil {
			return err
		}
	}
	if _, err := stmt.ExecContext(ctx); err != nil {
		return err
	}
	if err := stmt.Close(); err != nil {
		return err
	}
	return tx.Commit()
}

// compactMinutes is t as the minutes layout stores it: whole minutes since 1970, rounded down, as the column's
// default computes them from now().
func compactMinutes(t time.Time) int64 { return t.Unix() / 60 }

func compactMedian(ss []compactSizes) compactSizes {
	pick := func(f func(compactSizes) float64) float64 {
		xs := make([]float64, len(ss))
		for i, s := range ss {
			xs[i] = f(s)
		}
		return spreadOf(xs).Median
	}
	return compactSizes{
		Heap:    pick(func(s compactSizes) float64 { return s.Heap }),
		PKey:    pick(func(s compactSizes) float64 { return s.PKey }),
		Cleanup: pick(func(s compactSizes) float64 { return s.Cleanup }),
		Other:   pick(func(s compactSizes) float64 { return s.Other }),
		Total:   pick(func(s compactSizes) float64 { return s.Total }),
	}
}

func compactSizesTable(c compactConfig, version string, med map[string]compactSizes) string {
	var b strings.Builder
	who := fmt.Sprintf("%d consumer(s), each row its own message ID", c.consumers)
	if c.consumers > 1 && c.lag > 0 {
		who = fmt.Sprintf("%d consumers claiming every message ID, each %s messages behind the previous one", c.consumers, thousands(float64(c.lag)))
	}
	fmt.Fprintf(&b, "Bytes per row, every index counted, median of %d runs of %s rows after VACUUM ANALYZE, PostgreSQL %s, %s:\n\n",
		c.runs, thousands(float64(c.rows)), version, who)
	header := []string{"layout"}
	for _, k := range storageKeys {
		header = append(header, fmt.Sprintf("%s (goal ≤ %.0f)", k, compactTarget[k]))
	}
	var rows [][]string
	for _, l := range c.layouts {
		row := []string{l}
		for _, k := range storageKeys {
			m, ok := med[l+"/"+k]
			if !ok {
				row = append(row, "")
				continue
			}
			mark := ""
			if m.Total <= compactTarget[k] {
				mark = " ✓"
			}
			row = append(row, fmt.Sprintf("%.1f%s", m.Total, mark))
		}
		rows = append(rows, row)
	}
	b.WriteString(markdownTable(header, rows))
	b.WriteString("\nThe parts, bytes per row:\n\n")
	rows = nil
	for _, l := range c.layouts {
		for _, k := range storageKeys {
			m, ok := med[l+"/"+k]
			if !ok {
				continue
			}
			rows = append(rows, []string{l, k, fmt.Sprintf("%.1f", m.Heap), fmt.Sprintf("%.1f", m.PKey),
				fmt.Sprintf("%.2f", m.Cleanup), fmt.Sprintf("%.2f", m.Other), fmt.Sprintf("%.1f", m.Total)})
		}
	}
	b.WriteString(markdownTable([]string{"layout", "message_id type", "heap", "primary key", "cleanup index", "other", "total"}, rows))
	b.WriteString("\nLayouts:\n\n")
	for _, l := range c.layouts {
		if l == compactTodayName {
			b.WriteString("- " + compactTodayName + ": the table of migrations 001 to 006, as inbox.Migrate creates it\n")
			continue
		}
		b.WriteString("- " + l + ": " + compactLayoutByName(l).Doc + "\n")
	}
	return b.String()
}
