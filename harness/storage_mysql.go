package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/mysqlinbox"
)

const storageMySQLUsage = `harness storage-mysql: bytes per remembered message ID of the inbox on MariaDB or MySQL (mysqlinbox).

Each run migrates a fresh inbox table with mysqlinbox's own migrations, fills it with --rows rows (a UUID v4
string as the event ID, the consumer wallet-credits, processed_at one millisecond apart, as PostgreSQL's text
row is measured by 'harness storage') in multi-row INSERTs, runs ANALYZE TABLE and reads the size of every index
from mysql.innodb_index_stats: the clustered index, which holds the rows, and each secondary index. The file's
size is read from information_schema.INNODB_SYS_TABLESPACES as a cross-check. It prints the median per row of
--runs runs as a markdown table, beside PostgreSQL's figures for the same rows.

Flags:
`

// defaultMySQLDSN is the MariaDB the harness measures unless told otherwise, the same default as mysqlinbox's tests.
const defaultMySQLDSN = "root@tcp(127.0.0.1:3306)/test?parseTime=true"

// storagePostgresText is this library's table on PostgreSQL 15 with text IDs, from docs/results/storage.md (median of 5
// runs of 1,000,000 rows after VACUUM ANALYZE): heap, primary key, cleanup index, total.
var storagePostgresText = struct{ Heap, PKey, Cleanup, Total float64 }{101.1, 101.3, 40.6, 243.1}

// mysqlSizes is one measurement of the inbox table on InnoDB, in bytes per row. Clustered is the primary key's
// B-tree, which holds the rows themselves; Cleanup and Processing are the secondary indexes; Indexes is the sum
// of every index, clustered included, and File the tablespace file.
type mysqlSizes struct {
	Clustered, Cleanup, Processing, Indexes, File float64
}

// mysqlIndexPages is the page count of one index of a table, as ANALYZE TABLE recorded it.
type mysqlIndexPages struct {
	Size, Leaf int64
}

func runStorageMySQL(args []string) error {
	fs := flag.NewFlagSet("storage-mysql", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), storageMySQLUsage); fs.PrintDefaults() }
	dsn := fs.String("dsn", defaultMySQLDSN, "MariaDB or MySQL DSN (go-sql-driver form); the tables are created and dropped in its database")
	runs := fs.Int("runs", 3, "runs; the table shows the median")
	rows := fs.Int("rows", 1_000_000, "rows per table")
	batch := fs.Int("batch", 5000, "rows per INSERT statement")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *runs < 1 || *rows < 1000 || *batch < 1 || *batch > 20_000 {
		return errors.New("storage-mysql: want --runs >= 1, --rows >= 1000 and 1 <= --batch <= 20000")
	}
	ctx := context.Background()
	db, err := sql.Open("mysql", *dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	var version string
	if err := db.QueryRowContext(ctx, `SELECT VERSION()`).Scan(&version); err != nil {
		return fmt.Errorf("storage-mysql: %w", err)
	}
	progress := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "%s storage-mysql: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
	}
	progress("%s, %d runs of %s rows", version, *runs, thousands(float64(*rows)))
	var samples []mysqlSizes
	for run := 1; run <= *runs; run++ {
		start := time.Now()
		s, err := storageMeasureMySQL(ctx, db, *rows, *batch)
		if err != nil {
			return fmt.Errorf("storage-mysql: run %d: %w", run, err)
		}
		samples = append(samples, s)
		progress("run %d/%d clustered %6.1f  cleanup %5.1f  processing %5.1f  indexes %6.1f  file %6.1f bytes/row  (%s)",
			run, *runs, s.Clustered, s.Cleanup, s.Processing, s.Indexes, s.File, time.Since(start).Round(time.Second))
	}
	fmt.Print(storageMySQLTable(version, *runs, *rows, storageMySQLMedian(samples)))
	return nil
}

// storageMeasureMySQL migrates a fresh inbox table, fills it with rows rows, analyzes it and returns its sizes per
// row. The tables are dropped again, whatever happens.
func storageMeasureMySQL(ctx context.Context, db *sql.DB, rows, batch int) (mysqlSizes, error) {
	table := fmt.Sprintf("harness_storage_mysql_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
	defer func() {
		_, _ = db.Exec("DROP TABLE IF EXISTS `" + table + "_produced`, `" + table + "_locks`, `" +
			table + "_migrations`, `" + table + "`")
	}()
	if err := mysqlinbox.Database(db).Migrate(ctx, inbox.WithTable(table)); err != nil {
		return mysqlSizes{}, err
	}
	if err := storageFillMySQL(ctx, db, table, rows, batch); err != nil {
		return mysqlSizes{}, fmt.Errorf("fill: %w", err)
	}
	// ANALYZE TABLE recomputes the persistent statistics; the page counts are exact (the pages each index's
	// segments hold), unlike the row and cardinality estimates, which are sampled.
	if err := storageAnalyzeMySQL(ctx, db, table); err != nil {
		return mysqlSizes{}, err
	}
	pages, err := storageIndexPagesMySQL(ctx, db, table)
	if err != nil {
		return mysqlSizes{}, err
	}
	var pageSize, fileSize int64
	if err := db.QueryRowContext(ctx, `SELECT @@innodb_page_size`).Scan(&pageSize); err != nil {
		return mysqlSizes{}, err
	}
	err = db.QueryRowContext(ctx, `SELECT file_size FROM information_schema.INNODB_SYS_TABLESPACES
		WHERE name = CONCAT(DATABASE(), '/', ?)`, table).Scan(&fileSize)
	if err != nil {
		return mysqlSizes{}, fmt.Errorf("tablespace of %s (needs innodb_file_per_table): %w", table, err)
	}
	want := []string{"PRIMARY", table + "_processed_at", table + "_processing"}
	if len(pages) != len(want) {
		return mysqlSizes{}, fmt.Errorf("%s has indexes %v, want %v", table, pages, want)
	}
	per := func(p int64) float64 { return float64(p*pageSize) / float64(rows) }
	s := mysqlSizes{File: float64(fileSize) / float64(rows)}
	for _, name := range want {
		p, ok := pages[name]
		if !ok {
			return mysqlSizes{}, fmt.Errorf("%s has no index %s (it has %v)", table, name, pages)
		}
		s.Indexes += per(p.Size)
	}
	s.Clustered, s.Cleanup, s.Processing = per(pages[want[0]].Size), per(pages[want[1]].Size), per(pages[want[2]].Size)
	return s, nil
}

// storageFillMySQL inserts rows rows, batch to a statement and 50 statements to a transaction. The IDs are UUID v4
// strings, in random order, as a consumer meets them; each row's processed_at is a millisecond after the previous
// row's, as rows committed one by one get. State is left to its default, 'done', as transaction mode writes it.
func storageFillMySQL(ctx context.Context, db *sql.DB, table string, rows, batch int) error {
	prepare := func(tx *sql.Tx, n int) (*sql.Stmt, error) {
		return tx.PrepareContext(ctx, "INSERT INTO `"+table+"` (consumer, message_id, processed_at) VALUES "+
			strings.TrimSuffix(strings.Repeat("(?, ?, ?), ", n), ", "))
	}
	base := time.Now().Add(-time.Duration(rows) * time.Millisecond).UTC()
	args := make([]any, 0, 3*batch)
	for done := 0; done < rows; {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		var full *sql.Stmt
		for range 50 {
			if done == rows {
				break
			}
			n := min(batch, rows-done)
			args = args[:0]
			for i := done; i < done+n; i++ {
				args = append(args, storageConsumer, uuid.NewString(), base.Add(time.Duration(i)*time.Millisecond))
			}
			stmt := full
			if n != batch || full == nil {
				if stmt, err = prepare(tx, n); err != nil {
					_ = tx.Rollback()
					return err
				}
				if n == batch {
					full = stmt
				}
			}
			if _, err := stmt.ExecContext(ctx, args...); err != nil {
				_ = tx.Rollback()
				return err
			}
			done += n
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}

// storageAnalyzeMySQL runs ANALYZE TABLE, which reports its failures as result rows rather than as an error.
func storageAnalyzeMySQL(ctx context.Context, db *sql.DB, table string) error {
	rs, err := db.QueryContext(ctx, "ANALYZE TABLE `"+table+"`")
	if err != nil {
		return fmt.Errorf("analyze %s: %w", table, err)
	}
	defer rs.Close()
	for rs.Next() {
		var name, op, kind, text string
		if err := rs.Scan(&name, &op, &kind, &text); err != nil {
			return fmt.Errorf("analyze %s: %w", table, err)
		}
		if kind == "error" || (kind == "status" && text != "OK" && !strings.Contains(text, "up to date")) {
			return fmt.Errorf("analyze %s: %s: %s", table, kind, text)
		}
	}
	return rs.Err()
}

// storageIndexPagesMySQL reads the page counts of every index of table from the persistent statistics: "size" is
// every page the index's segments hold (its leaves, the levels above them, and pages allocated but still free),
// "n_leaf_pages" its leaves.
func storageIndexPagesMySQL(ctx context.Context, db *sql.DB, table string) (map[string]mysqlIndexPages, error) {
	rs, err := db.QueryContext(ctx, `SELECT index_name, stat_name, stat_value FROM mysql.innodb_index_stats
		WHERE database_name = DATABASE() AND table_name = ? AND stat_name IN ('size', 'n_leaf_pages')`, table)
	if err != nil {
		return nil, fmt.Errorf("index sizes of %s: %w", table, err)
	}
	defer rs.Close()
	out := map[string]mysqlIndexPages{}
	for rs.Next() {
		var name, stat string
		var v int64
		if err := rs.Scan(&name, &stat, &v); err != nil {
			return nil, fmt.Errorf("index sizes of %s: %w", table, err)
		}
		p := out[name]
		if stat == "size" {
			p.Size = v
		} else {
			p.Leaf = v
		}
		out[name] = p
	}
	return out, rs.Err()
}

func storageMySQLMedian(ss []mysqlSizes) mysqlSizes {
	pick := func(f func(mysqlSizes) float64) float64 {
		xs := make([]float64, len(ss))
		for i, s := range ss {
			xs[i] = f(s)
		}
		return spreadOf(xs).Median
	}
	return mysqlSizes{
		Clustered:  pick(func(s mysqlSizes) float64 { return s.Clustered }),
		Cleanup:    pick(func(s mysqlSizes) float64 { return s.Cleanup }),
		Processing: pick(func(s mysqlSizes) float64 { return s.Processing }),
		Indexes:    pick(func(s mysqlSizes) float64 { return s.Indexes }),
		File:       pick(func(s mysqlSizes) float64 { return s.File }),
	}
}

func storageMySQLTable(version string, runs, rows int, m mysqlSizes) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Bytes per row of the inbox table with text IDs (a UUID string), median of %d runs of %s rows after "+
		"ANALYZE TABLE, %s; PostgreSQL 15's from docs/results/storage.md. On InnoDB the rows live in the primary key's "+
		"clustered index.\n\n", runs, thousands(float64(rows)), version)
	pg := storagePostgresText
	f := func(x float64) string { return fmt.Sprintf("%.1f", x) }
	b.WriteString(markdownTable(
		[]string{"database", "rows + primary key", "cleanup index", "lease index", "total", "file on disk"},
		[][]string{
			{version, f(m.Clustered), f(m.Cleanup), f(m.Processing), f(m.Indexes), f(m.File)},
			{"PostgreSQL 15 (heap " + f(pg.Heap) + " + primary key " + f(pg.PKey) + ")", f(pg.Heap + pg.PKey),
				f(pg.Cleanup), "0.0 (partial: 'processing' rows only)", f(pg.Total), "—"},
		}))
	return b.String()
}
