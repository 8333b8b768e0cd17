package main

import (
	"context"
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
runs VACUUM ANALYZE and reads the sizes from the catalog, for two shapes of table:

  article  the article's table: consumer text, message_id, processed_at; primary key (consumer, message_id)
  inbox    this library's table as inbox.Migrate creates it, with the cleanup's index (migrations/004)

It prints the median per row of --runs runs as a markdown table, beside the article's figures (PostgreSQL
18.6), with the size of --days of retention at --daily messages a day, and writes a chart to --svg.

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

// storageConsumer is the consumer name in every row. Its length matters: it is stored in every heap tuple and in
// every entry of the primary key and of the cleanup index. 14 characters reproduce the article's heap figures.
const storageConsumer = "wallet-credits"

// storageSizes is one measurement, in bytes per row: the heap's main fork, all indexes, and everything
// (pg_total_relation_size: heap, indexes, free-space and visibility maps, TOAST). PKey and Cleanup split Index
// for the inbox shape.
type storageSizes struct {
	Heap, Index, Total float64
	PKey, Cleanup      float64
}

type storageConfig struct {
	dsn    string
	runs   int
	rows   int
	daily  float64
	days   int
	svg    string
	shapes []string
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
	fs.StringVar(&shapes, "shapes", "article,inbox", "table shapes to measure, comma-separated: article, inbox")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.runs < 1 || c.rows < 1000 || c.daily <= 0 || c.days < 1 {
		return errors.New("storage: want --runs >= 1, --rows >= 1000, --daily > 0 and --days >= 1")
	}
	for _, s := range strings.Split(shapes, ",") {
		if s = strings.TrimSpace(s); s != "article" && s != "inbox" {
			return fmt.Errorf("storage: unknown shape %q (want article or inbox)", s)
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
	for run := 1; run <= c.runs; run++ {
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

// storageMeasure creates a table of shape, fills it with rows rows of key, vacuums it and returns its size per
// row. The table is dropped again, whatever happens.
func storageMeasure(ctx context.Context, db *sql.DB, shape, key string, rows int) (storageSizes, error) {
	table := fmt.Sprintf("harness_storage_%s_%s_%d", shape, strings.ReplaceAll(key, " ", "_"), os.Getpid())
	idType := "text"
	if key != "text" {
		idType = "uuid"
	}
	drop, err := storageCreate(ctx, db, shape, table, idType)
	defer func() {
		if drop != nil {
			drop()
		}
	}()
	if err != nil {
		return storageSizes{}, err
	}
	if err := storageFill(ctx, db, table, key, rows); err != nil {
		return storageSizes{}, err
	}
	if _, err := db.ExecContext(ctx, `VACUUM ANALYZE "`+table+`"`); err != nil {
		return storageSizes{}, err
	}
	var heap, index, total, pkey, cleanup int64
	err = db.QueryRowContext(ctx, `SELECT pg_relation_size($1::text::regclass, 'main'), pg_indexes_size($1::text::regclass),
			pg_total_relation_size($1::text::regclass), pg_relation_size(($1::text || '_pkey')::regclass),
			coalesce(pg_relation_size(to_regclass($1::text || '_processed_at')), 0)`, table).
		Scan(&heap, &index, &total, &pkey, &cleanup)
	if err != nil {
		return storageSizes{}, err
	}
	n := float64(rows)
	return storageSizes{Heap: float64(heap) / n, Index: float64(index) / n, Total: float64(total) / n,
		PKey: float64(pkey) / n, Cleanup: float64(cleanup) / n}, nil
}

// storageCreate creates the table and returns how to drop it. The inbox shape is built by the library's own
// migrations, so the measurement follows the schema as it changes.
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
	ms, err := inbox.Migrations(inbox.WithTable(table), inbox.WithIDType(inbox.IDType(idType)))
	if err != nil {
		return nil, err
	}
	drop = func() {
		for i := len(ms) - 1; i >= 0; i-- {
			_, _ = db.Exec(ms[i].Down)
		}
	}
	for _, m := range ms {
		if _, err := db.ExecContext(ctx, m.Up); err != nil {
			return drop, fmt.Errorf("migration %03d_%s: %w", m.Version, m.Name, err)
		}
	}
	return drop, nil
}

// storageFill copies rows rows into table in one transaction, the keys made in Go for every type alike. Each row
// gets its own processed_at, a millisecond after the previous one, as rows committed one by one do: equal
// timestamps would let the cleanup index deduplicate its entries and look smaller than it is.
func storageFill(ctx context.Context, db *sql.DB, table, key string, rows int) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	stmt, err := tx.PrepareContext(ctx, "COPY "+pq.QuoteIdentifier(table)+" (consumer, message_id, processed_at) FROM STDIN")
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
		if _, err := stmt.ExecContext(ctx, storageConsumer, id, base.Add(time.Duration(i)*time.Millisecond)); err != nil {
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
		"PostgreSQL 18.6. The last columns are %s rows: %d days at %s messages a day.\n\n",
		c.runs, thousands(float64(c.rows)), version, thousands(retained), c.days, thousands(c.daily))
	if _, ok := med["article/text"]; ok {
		b.WriteString("The article's table (consumer, message_id, processed_at):\n\n")
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
		b.WriteString("\n")
	}
	if _, ok := med["inbox/text"]; ok {
		b.WriteString("This library's table, as inbox.Migrate creates it (state column, lease columns, cleanup index):\n\n")
		var rows [][]string
		for _, k := range storageKeys {
			m := med["inbox/"+k]
			rows = append(rows, []string{k, fmt.Sprintf("%.1f", m.Heap), fmt.Sprintf("%.1f", m.PKey),
				fmt.Sprintf("%.1f", m.Cleanup), fmt.Sprintf("%.1f", m.Total), storageGB(c, m.Total)})
		}
		b.WriteString(markdownTable([]string{"message_id type", "heap", "primary key", "cleanup index", "total",
			thousands(retained) + " rows"}, rows))
	}
	return b.String()
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
	ours := series{Name: "article's table (ours)", Color: colorNeutral}
	inboxRow := series{Name: "inbox table with cleanup index (ours)", Color: colorInbox}
	for _, k := range storageKeys {
		article.Values = append(article.Values, storageArticle[k].Total)
		ours.Values = append(ours.Values, storageValue(med, "article/"+k))
		inboxRow.Values = append(inboxRow.Values, storageValue(med, "inbox/"+k))
	}
	chart.Series = []series{article, ours, inboxRow}
	return chart
}

func storageValue(med map[string]storageSizes, k string) float64 {
	m, ok := med[k]
	if !ok {
		return math.NaN()
	}
	return m.Total
}
