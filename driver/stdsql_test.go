package driver

import (
	"cmp"
	"database/sql"
	"os"
	"testing"

	_ "github.com/lib/pq"
)

// openLibpq connects to the test database (INBOX_TEST_DATABASE_URL, or this machine's) with lib/pq, failing loudly
// when it cannot.
func openLibpq(t testing.TB) *sql.DB {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL; run without -short")
	}
	dsn := cmp.Or(os.Getenv("INBOX_TEST_DATABASE_URL"), "postgres://root@127.0.0.1:5432/test?sslmode=disable")
	db, err := sql.Open("postgres", dsn)
	if err == nil {
		t.Cleanup(func() { db.Close() })
		err = db.Ping()
	}
	if err != nil {
		t.Fatalf("PostgreSQL is not reachable at %s (set INBOX_TEST_DATABASE_URL): %v", dsn, err)
	}
	return db
}
