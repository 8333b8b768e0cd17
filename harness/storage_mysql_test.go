package main

import (
	"cmp"
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"
	"time"
)

// storageMySQLTestDB returns the MariaDB of the tests: MYSQL_TEST_DSN, as for mysqlinbox's tests, or the default.
func storageMySQLTestDB(t *testing.T) (*sql.DB, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs MariaDB or MySQL; run without -short")
	}
	dsn := cmp.Or(os.Getenv("MYSQL_TEST_DSN"), defaultMySQLDSN)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("MariaDB is not reachable at %s (set MYSQL_TEST_DSN, or start it with "+
			"`start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd`): %v", dsn, err)
	}
	return db, dsn
}

// Every InnoDB index holds the 50 bytes of the primary key (the 14-byte consumer and the 36-byte ID) in each of its
// entries: the clustered one as the row's key, the secondary ones as the pointer to the row. A measurement below
// that has missed pages; and the file holds every index, so it cannot be smaller than their sum.
func TestStorageMeasureMySQL_EveryIndexCarriesThePrimaryKeyAndTheFileHoldsThemAll(t *testing.T) {
	db, _ := storageMySQLTestDB(t)
	const rows = 5000
	s, err := storageMeasureMySQL(context.Background(), db, rows, 1000)
	if err != nil {
		t.Fatal(err)
	}
	const key = float64(len(storageConsumer) + len("00000000-0000-0000-0000-000000000000"))
	for name, v := range map[string]float64{"clustered": s.Clustered, "cleanup": s.Cleanup, "processing": s.Processing} {
		if v < key {
			t.Errorf("%s index: %.1f bytes per row, less than the %.0f bytes of its key", name, v, key)
		}
	}
	if sum := s.Clustered + s.Cleanup + s.Processing; s.Indexes != sum {
		t.Errorf("indexes %.1f bytes per row, not the sum of the three, %.1f", s.Indexes, sum)
	}
	if s.File < s.Indexes {
		t.Errorf("file %.1f bytes per row, smaller than its indexes' %.1f", s.File, s.Indexes)
	}
	var left int
	if err := db.QueryRow(`SELECT COUNT(*) FROM information_schema.tables
		WHERE table_schema = DATABASE() AND table_name LIKE 'harness\_storage\_mysql\_%'`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d harness_storage_mysql_ tables left behind", left)
	}
}

func TestRunStorageMySQL_PrintsTheTableBesidePostgreSQL(t *testing.T) {
	_, dsn := storageMySQLTestDB(t)
	stdout := os.Stdout
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout = w
	runErr := runStorageMySQL([]string{"--dsn", dsn, "--runs", "1", "--rows", "2000", "--batch", "500"})
	os.Stdout = stdout
	w.Close()
	out := new(strings.Builder)
	buf := make([]byte, 1<<16)
	for {
		n, err := r.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			break
		}
	}
	if runErr != nil {
		t.Fatal(runErr)
	}
	for _, s := range []string{"| rows + primary key |", "| PostgreSQL 15", "243.1", "2,000 rows"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
}
