package main

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	inbox "github.com/effectively-once/watermill-inbox"
)

const storageUsage = `harness storage: bytes per remembered message ID, heap and index, for text, uuid v4 and uuid v7 keys.

Each run fills a fresh table with --rows rows in one COPY (keys made in Go; PostgreSQL 15 has no uuidv7()),
runs VACUUM ANALYZE and reads the sizes from the catalog, for three shapes of table:

  article  the article's table: consumer text, message_id, processed_at; primary key (consumer, message_id)
  before   this library's table of migrations 001 to 006: consumer names in every row, a B-tree cleanup index
  now      this library's table as Database.Migrate creates it today (001 to 007, the compact layout): consumer
           ids, a one-byte state, minutes, a BRIN cleanup index
  fingerprint  the now table as Database.Migrate creates it with inbox.WithFingerprint, each row with its
           message's fingerprint (not measured unless --shapes names it)

The inbox shapes count every relation the library creates for the table: its indexes, and the consumers and
produced tables with theirs. It prints the median per row of --runs runs as a markdown table, beside the
article's figures (PostgreSQL 18.6) and the goals of the compact layout, with the size of --days of retention at
--daily messages a day, and writes a chart to --svg.

With --migration (the default), each run also fills the before shape with --rows rows and times migration 007
on it, from its first statement to its commit: the time the table is locked ACCESS EXCLUSIVE.

Flags:
`

// The article's measurements: median of 5 runs of 1,000,000 rows after VACUUM, PostgreSQL 18.6.
var storageArticle = map[string]storageSizes{
	"text":    {Heap: 93.1, Index: 101.3, Total: 194.5},
	"uuid v4": {Heap: 68.3, Index: 65.6, Total: 134.0},
	"uuid v7": {Heap: 68.3, Index: 49.7, Total: 118.1},
}

// storageKeys are the message ID types measured, in the article's order.
var storageKeys = []string{"text", "uuid v4", "uuid v7"}

// storageGoal is the most bytes per row the compact layout may take, every index counted (issue #12).
var storageGoal = map[string]float64{"text": 175, "uuid v4": 115, "uuid v7": 100}

// storageShapes are the shapes of table measured, in the order they are printed.
var storageShapes = []string{"article", "before", "now"}

// storageBeforeVersion is the last migration of the layout before the compact one: the "before" shape.
const storageBeforeVersion = 6

// storageConsumer is the consumer name in every row. Its length matters: it is stored in every heap tuple and in
// every entry of the primary key and of the cleanup index. 14 characters reproduce the article's heap figures.
const storageConsumer = "wallet-credits"

// storageSizes is one measurement, in bytes per row: the heap's main fork, all indexes, and everything
// (pg_total_relation_size: heap, indexes, free-space and visibility maps, TOAST). PKey and Cleanup split Index
// for the inbox shape.
type storageSizes struct {
	Heap, Index, Total float64
	PKey, Cleanup      float64
	// Side is the consumers and produced tables, with their indexes, included in Index and Total.
	Side float64
}

type storageConfig struct {
	dsn       string
	runs      int
	rows      int
	daily     float64
	days      int
	svg       string
	shapes    []string
	migration bool
}

func runStorage(args []string) error {
	fs := flag.NewFlagSet("storage", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), storageUsage); fs.PrintDefaults() }
	var c storageConfig
	var shapes string
	fs.StringVar(&c.dsn, "dsn", defaultDSN, "PostgreSQL DSN (URL form); the tables are created and dropped in its database")
	fs.IntVar(&c.runs, "runs", 5, "runs per key type and shape; the table shows the median")
	fs.IntVar(&c.rows, "rows", 1_000_000, "rows per table")
	fs.Float64Var(&c.daily, "daily", 5_000_000, "messages a day, for the retention arithmetic (the article's made-up figure)")
	fs.IntVar(&c.days, "days", 14, "days of retention, for the arithmetic (inbox.DefaultRetention)")
	fs.StringVar(&c.svg, "svg", "docs/storage.svg", "where to write the chart")
	fs.StringVar(&shapes, "shapes", strings.Join(storageShapes, ","), "table shapes to measure, comma-separated: article, before, now")
	fs.BoolVar(&c.migration, "migration", true, "also time migration 007 on --rows rows of the before shape, per key type")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.runs < 1 || c.rows < 1000 || c.daily <= 0 || c.days < 1 {
		return errors.New("storage: want --runs >= 1, --rows >= 1000, --daily > 0 and --days >= 1")
	}
	for _, s := range strings.Split(shapes, ",") {
		if s = strings.TrimSpace(s); s != "article" && s != "before" && s != "now" && s != "fingerprint" {
			return fmt.Errorf("storage: unknown shape %q (want article, before, now or fingerprint)", s)
		}
		c.shapes = append(c.shapes, strings.TrimSpace(s))
	}

	ctx := context.Background()
	db, err := sql.Open("postgres", c.dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	var version string
	if err := db.QueryRowContext(ctx, `SHOW server_version`).Scan(&version); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	version = strings.Fields(version)[0] // "15.20 (Debian 15.20-0+deb12u1)" -> "15.20"
	progress := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "%s storage: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
	}
	progress("PostgreSQL %s, %d runs of %s rows, shapes %v", version, c.runs, thousands(float64(c.rows)), c.shapes)

	// Runs are the outer loop, so a drift of the machine during the measurement spreads over every key type
	// instead of landing on one.
	samples := map[string][]storageSizes{} // shape + "/" + key -> one per run
	migrations := map[string][]float64{}   // key -> seconds of migration 007, one per run
	for run := 1; run <= c.runs; run++ {
		if c.migration {
			for _, key := range storageKeys {
				d, err := storageTimeMigration(ctx, db, key, c.rows)
				if err != nil {
					return fmt.Errorf("storage: run %d, migration 007, %s keys: %w", run, key, err)
				}
				migrations[key] = append(migrations[key], d.Seconds())
				progress("run %d/%d migration 007 on %s %s rows: %s", run, c.runs, thousands(float64(c.rows)), key,
					d.Round(time.Millisecond))
			}
		}
		for _, shape := range c.shapes {
			for _, key := range storageKeys {
				start := time.Now()
				s, err := storageMeasure(ctx, db, shape, key, c.rows)
				if err != nil {
					return fmt.Errorf("storage: run %d, %s table, %s keys: %w", run, shape, key, err)
				}
				samples[shape+"/"+key] = append(samples[shape+"/"+key], s)
				progress("run %d/%d %-7s %-7s heap %6.1f  index %6.1f  total %6.1f bytes/row  (%s)",
					run, c.runs, shape, key, s.Heap, s.Index, s.Total, time.Since(start).Round(time.Second))
			}
		}
	}

	med := map[string]storageSizes{}
	for k, ss := range samples {
		med[k] = storageMedian(ss)
	}
	table := storageTable(c, version, med)
	fmt.Print(table)
	if c.migration {
		fmt.Print(storageMigrationTable(c, migrations))
	}
	if c.svg != "" {
		if err := os.MkdirAll(filepath.Dir(c.svg), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(c.svg, []byte(storageChart(c, version, med).svg()), 0o644); err != nil {
			return err
		}
		progress("chart written to %s", c.svg)
	}
	return nil
}

// storageIDType is the message_id column's type for key: text for UUID strings, uuid for both UUID versions.
func storageIDType(key string) string {
	if key == "text" {
		return "text"
	}
	return "uuid"
}

// storageMeasure creates a table of shape, fills it with rows rows of key, vacuums it and returns its size per
// row. The table is dropped again, whatever happens.
func storageMeasure(ctx context.Context, db *sql.DB, shape, key string, rows int) (storageSizes, error) {
	table := fmt.Sprintf("harness_storage_%s_%s_%d", shape, strings.ReplaceAll(key, " ", "_"), os.Getpid())
	drop, err := storageCreate(ctx, db, shape, table, storageIDType(key))
	defer func() {
		if drop != nil {
			drop()
		}
	}()
	if err != nil {
		return storageSizes{}, err
	}
	if err := storageFill(ctx, db, shape, table, key, rows); err != nil {
		return storageSizes{}, err
	}
	if _, err := db.ExecContext(ctx, `VACUUM ANALYZE "`+table+`"`); err != nil {
		return storageSizes{}, err
	}
	return storageSizesOf(ctx, db, table, rows)
}

// storageSizesOf reads the sizes of table and of the side tables the library creates beside it (consumers,
// produced: empty here but for the consumers' one row, yet their pages and indexes count), per row of rows.
func storageSizesOf(ctx context.Context, db *sql.DB, table string, rows int) (storageSizes, error) {
	var heap, index, total, pkey, cleanup, sideIndex, side int64
	err := db.QueryRowContext(ctx, `WITH side AS (
			SELECT to_regclass(quote_ident($1::text || s)) AS rel FROM unnest(ARRAY['_consumers', '_produced']) s
		)
		SELECT pg_relation_size(quote_ident($1::text)::regclass, 'main'), pg_indexes_size(quote_ident($1::text)::regclass),
			pg_total_relation_size(quote_ident($1::text)::regclass), pg_relation_size(quote_ident($1::text || '_pkey')::regclass),
			coalesce(pg_relation_size(to_regclass(quote_ident($1::text || '_processed_at'))), 0),
			(SELECT coalesce(sum(pg_indexes_size(rel)), 0) FROM side WHERE rel IS NOT NULL),
			(SELECT coalesce(sum(pg_total_relation_size(rel)), 0) FROM side WHERE rel IS NOT NULL)`, table).
		Scan(&heap, &index, &total, &pkey, &cleanup, &sideIndex, &side)
	if err != nil {
		return storageSizes{}, err
	}
	n := float64(rows)
	return storageSizes{Heap: float64(heap) / n, Index: float64(index+sideIndex) / n, Total: float64(total+side) / n,
		PKey: float64(pkey) / n, Cleanup: float64(cleanup) / n, Side: float64(side) / n}, nil
}

// storageCreate creates the table and returns how to drop it. The inbox shapes are built by the library's own
// migrations, so the measurement follows the schema as it changes: before applies 001 to 006, now all of them.
func storageCreate(ctx context.Context, db *sql.DB, shape, table, idType string) (drop func(), err error) {
	if shape == "article" {
		// The article's schema.sql, with the ID's type as the only change.
		_, err := db.ExecContext(ctx, `CREATE TABLE "`+table+`" (
			consumer     text        NOT NULL,
			message_id   `+idType+`  NOT NULL,
			processed_at timestamptz NOT NULL DEFAULT now(),
			PRIMARY KEY (consumer, message_id))`)
		return func() { _, _ = db.Exec(`DROP TABLE IF EXISTS "` + table + `"`) }, err
	}
	ms, err := inbox.OnSQL(nil).Migrations(inbox.WithTable(table), inbox.WithIDType(inbox.IDType(idType)))
	if err != nil {
		return nil, err
	}
	if shape == "fingerprint" {
		ms = nil // Migrate below: the migrations and the fingerprint column, as an inbox with the option has them
	}
	// Dropped outright: the down migration of 007 would copy every row back into the old layout first.
	drop = func() {
		_, _ = db.Exec(`DROP TABLE IF EXISTS ` + pq.QuoteIdentifier(table+"_produced") + `, ` + pq.QuoteIdentifier(table) + `, ` +
			pq.QuoteIdentifier(table+"_locks") + `, ` + pq.QuoteIdentifier(table+"_migrations") + `, ` +
			pq.QuoteIdentifier(table+"_consumers") + ` CASCADE`)
		_, _ = db.Exec(`DROP FUNCTION IF EXISTS ` + pq.QuoteIdentifier(table+"_unfinished_claim") + `()`)
	}
	for _, m := range ms {
		if shape == "before" && m.Version > storageBeforeVersion {
			break
		}
		if _, err := db.ExecContext(ctx, m.Up); err != nil {
			return drop, fmt.Errorf("migration %03d_%s: %w", m.Version, m.Name, err)
		}
	}
	if shape == "fingerprint" {
		err = inbox.OnSQL(db).Migrate(ctx, inbox.WithTable(table), inbox.WithIDType(inbox.IDType(idType)),
			inbox.WithFingerprint(inbox.Fingerprint{}))
	}
	return drop, err
}

// storageFill copies rows rows into table in one transaction, the keys made in Go for every type alike. Each row
// gets its own processed_at, a millisecond after the previous one, as rows committed one by one do: equal
// timestamps would let the cleanup index deduplicate its entries and look smaller than it is. The now shape stores
// the consumer's id, registered first, and processed_at in minutes since 1970.
func storageFill(ctx context.Context, db *sql.DB, shape, table, key string, rows int) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	var consumer any = storageConsumer
	copySQL := "COPY " + pq.QuoteIdentifier(table) + " (consumer, message_id, processed_at) FROM STDIN"
	compact := shape == "now" || shape == "fingerprint"
	if compact {
		var id int
		if err := tx.QueryRowContext(ctx, `INSERT INTO `+pq.QuoteIdentifier(table+"_consumers")+` (name) VALUES ($1) RETURNING id`,
			storageConsumer).Scan(&id); err != nil {
			return err
		}
		consumer = id
		copySQL = "COPY " + pq.QuoteIdentifier(table) + " (consumer_id, message_id, processed_at) FROM STDIN"
	}
	if shape == "fingerprint" {
		copySQL = "COPY " + pq.QuoteIdentifier(table) + " (consumer_id, message_id, processed_at, fingerprint) FROM STDIN"
	}
	stmt, err := tx.PrepareContext(ctx, copySQL)
	if err != nil {
		return err
	}
	base := time.Now().Add(-time.Duration(rows) * time.Millisecond).UTC()
	for i := range rows {
		var id string
		switch key {
		case "uuid v7":
			u, err := uuid.NewV7() // RFC 9562: 48-bit Unix milliseconds, then a counter and random bits
			if err != nil {
				return err
			}
			id = u.String()
		default:
			id = uuid.NewString() // v4, random: "text" stores the same 36 characters as text
		}
		var at any = base.Add(time.Duration(i) * time.Millisecond)
		if compact {
			at = at.(time.Time).Unix() / 60
		}
		args := []any{consumer, id, at}
		if shape == "fingerprint" { // as the inbox computes one: eight bytes of a hash, here of the ID
			sum := sha256.Sum256([]byte(id))
			args = append(args, sum[:8])
		}
		if _, err := stmt.ExecContext(ctx, args...); err != nil {
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

func storageMedian(ss []storageSizes) storageSizes {
	pick := func(f func(storageSizes) float64) float64 {
		xs := make([]float64, len(ss))
		for i, s := range ss {
			xs[i] = f(s)
		}
		return spreadOf(xs).Median
	}
	return storageSizes{
		Heap:    pick(func(s storageSizes) float64 { return s.Heap }),
		Index:   pick(func(s storageSizes) float64 { return s.Index }),
		Total:   pick(func(s storageSizes) float64 { return s.Total }),
		PKey:    pick(func(s storageSizes) float64 { return s.PKey }),
		Cleanup: pick(func(s storageSizes) float64 { return s.Cleanup }),
		Side:    pick(func(s storageSizes) float64 { return s.Side }),
	}
}

// storageGB is the size of days of retention at daily messages a day, in decimal gigabytes as the article counts.
func storageGB(c storageConfig, perRow float64) string {
	return fmt.Sprintf("%.1f GB", c.daily*float64(c.days)*perRow/1e9)
}

func storageTable(c storageConfig, version string, med map[string]storageSizes) string {
	retained := c.daily * float64(c.days)
	var b strings.Builder
	fmt.Fprintf(&b, "Bytes per row, median of %d runs of %s rows after VACUUM ANALYZE, PostgreSQL %s; the article's on "+
		"PostgreSQL 18.6. The retention columns are %s rows: %d days at %s messages a day.\n\n",
		c.runs, thousands(float64(c.rows)), version, thousands(retained), c.days, thousands(c.daily))
	_, haveBefore := med["before/text"]
	_, haveNow := med["now/text"]
	if haveBefore || haveNow {
		b.WriteString("The inbox table, every index and side table counted, beside the article's minimal table and the goals of #12:\n\n")
		var rows [][]string
		for _, k := range storageKeys {
			row := []string{k, fmt.Sprintf("%.1f", storageArticle[k].Total), storageCell(med, "before/"+k), storageCell(med, "now/"+k),
				fmt.Sprintf("<= %.0f", storageGoal[k])}
			if m, ok := med["now/"+k]; ok {
				row = append(row, storagePass(m.Total, k))
			} else {
				row = append(row, "")
			}
			if bf, ok := med["before/"+k]; ok && haveNow {
				row = append(row, fmt.Sprintf("%.0f%%", 100*(1-med["now/"+k].Total/bf.Total)))
			} else {
				row = append(row, "")
			}
			rows = append(rows, row)
		}
		b.WriteString(markdownTable([]string{"message_id type", "article", "before (001-006)", "now (001-007)", "goal",
			"now within goal", "smaller than before"}, rows))
		b.WriteString("\n")
		for _, shape := range []string{"before", "now"} {
			if _, ok := med[shape+"/text"]; !ok {
				continue
			}
			if shape == "before" {
				b.WriteString("Before: the table of migrations 001 to 006 (consumer names, B-tree cleanup index):\n\n")
			} else {
				b.WriteString("Now: the table as Database.Migrate creates it (consumer ids, BRIN cleanup index, consumers table):\n\n")
			}
			var rows [][]string
			for _, k := range storageKeys {
				m := med[shape+"/"+k]
				rows = append(rows, []string{k, fmt.Sprintf("%.1f", m.Heap), fmt.Sprintf("%.1f", m.PKey),
					fmt.Sprintf("%.2f", m.Cleanup), fmt.Sprintf("%.2f", m.Side), fmt.Sprintf("%.1f", m.Total), storageGB(c, m.Total)})
			}
			b.WriteString(markdownTable([]string{"message_id type", "heap", "primary key", "cleanup index",
				"consumers and produced tables", "total", thousands(retained) + " rows"}, rows))
			b.WriteString("\n")
		}
	}
	if _, ok := med["fingerprint/text"]; ok {
		b.WriteString("With inbox.WithFingerprint (the fingerprint column, a fingerprint in every row), beside the table without it:\n\n")
		var rows [][]string
		for _, k := range storageKeys {
			m, now := med["fingerprint/"+k], med["now/"+k]
			extra := ""
			if _, ok := med["now/"+k]; ok {
				extra = fmt.Sprintf("%+.1f", m.Total-now.Total)
			}
			rows = append(rows, []string{k, storageCell(med, "now/"+k), fmt.Sprintf("%.1f", m.Heap), fmt.Sprintf("%.1f", m.Total),
				extra, storageGB(c, m.Total)})
		}
		b.WriteString(markdownTable([]string{"message_id type", "without (total)", "with: heap", "with: total",
			"extra bytes per row", thousands(retained) + " rows, with"}, rows))
		b.WriteString("\n")
	}
	if _, ok := med["article/text"]; ok {
		b.WriteString("The article's table (consumer, message_id, processed_at), ours beside the article's:\n\n")
		var rows [][]string
		for _, k := range storageKeys {
			m, a := med["article/"+k], storageArticle[k]
			rows = append(rows, []string{k,
				fmt.Sprintf("%.1f", m.Heap), fmt.Sprintf("%.1f", a.Heap),
				fmt.Sprintf("%.1f", m.Index), fmt.Sprintf("%.1f", a.Index),
				fmt.Sprintf("%.1f", m.Total), fmt.Sprintf("%.1f", a.Total),
				storageGB(c, m.Total), storageGB(c, a.Total)})
		}
		b.WriteString(markdownTable([]string{"message_id type", "heap (ours)", "heap (article)", "index (ours)", "index (article)",
			"total (ours)", "total (article)", thousands(retained) + " rows (ours)", thousands(retained) + " rows (article)"}, rows))
	}
	return b.String()
}

// storagePass marks whether total bytes per row of key are within the goal.
func storagePass(total float64, key string) string {
	if total <= storageGoal[key] {
		return "yes"
	}
	return fmt.Sprintf("NO (%.1f over)", total-storageGoal[key])
}

func storageCell(med map[string]storageSizes, k string) string {
	if m, ok := med[k]; ok {
		return fmt.Sprintf("%.1f", m.Total)
	}
	return ""
}

// storageMigrationTable prints the median time of migration 007 per key type.
func storageMigrationTable(c storageConfig, secs map[string][]float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nMigration 007 on %s rows of the before layout, median of %d runs (min to max), from its first "+
		"statement to its commit: the table is locked ACCESS EXCLUSIVE all along.\n\n", thousands(float64(c.rows)), c.runs)
	var rows [][]string
	for _, k := range storageKeys {
		sp := spreadOf(secs[k])
		rows = append(rows, []string{k, fmt.Sprintf("%.1f s", sp.Median), fmt.Sprintf("%.1f to %.1f s", sp.Min, sp.Max)})
	}
	b.WriteString(markdownTable([]string{"message_id type", "locked for (median)", "range"}, rows))
	return b.String()
}

// storageTimeMigration fills the before shape with rows rows of key, vacuums it as an old table would be, and
// times migration 007 on it in one transaction, as Database.Migrate runs it.
func storageTimeMigration(ctx context.Context, db *sql.DB, key string, rows int) (time.Duration, error) {
	table := fmt.Sprintf("harness_storage_migrate_%s_%d", strings.ReplaceAll(key, " ", "_"), os.Getpid())
	drop, err := storageCreate(ctx, db, "before", table, storageIDType(key))
	if drop != nil {
		defer drop()
	}
	if err != nil {
		return 0, err
	}
	if err := storageFill(ctx, db, "before", table, key, rows); err != nil {
		return 0, err
	}
	if _, err := db.ExecContext(ctx, `VACUUM ANALYZE `+pq.QuoteIdentifier(table)); err != nil {
		return 0, err
	}
	ms, err := inbox.OnSQL(nil).Migrations(inbox.WithTable(table), inbox.WithIDType(inbox.IDType(storageIDType(key))))
	if err != nil {
		return 0, err
	}
	var up string
	for _, m := range ms {
		if m.Version == storageBeforeVersion+1 {
			up = m.Up
		}
	}
	if up == "" {
		return 0, fmt.Errorf("no migration %03d", storageBeforeVersion+1)
	}
	start := time.Now()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, up); err != nil {
		_ = tx.Rollback()
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	elapsed := time.Since(start)
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+pq.QuoteIdentifier(table)).Scan(&n); err != nil {
		return 0, err
	} else if n != rows {
		return 0, fmt.Errorf("the migrated table has %d rows, want %d", n, rows)
	}
	return elapsed, nil
}

func storageChart(c storageConfig, version string, med map[string]storageSizes) barChart {
	chart := barChart{
		Title: "Bytes per remembered message ID",
		Subtitle: fmt.Sprintf("heap + indexes, median of %d runs of %s rows after VACUUM; article PostgreSQL 18.6, ours %s",
			c.runs, thousands(float64(c.rows)), version),
		YLabel:     "bytes per row",
		Categories: storageKeys,
	}
	article := series{Name: "article's table (article, PG 18.6)", Color: colorNeutral, Hollow: true}
	before := series{Name: "inbox table before (001-006)", Color: colorNeutral}
	now := series{Name: "inbox table now (001-007)", Color: colorInbox}
	for _, k := range storageKeys {
		article.Values = append(article.Values, storageArticle[k].Total)
		before.Values = append(before.Values, storageValue(med, "before/"+k))
		now.Values = append(now.Values, storageValue(med, "now/"+k))
	}
	chart.Series = []series{article, before, now}
	return chart
}

func storageValue(med map[string]storageSizes, k string) float64 {
	m, ok := med[k]
	if !ok {
		return math.NaN()
	}
	return m.Total
}
