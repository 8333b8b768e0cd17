package inboxtest_test

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	_ "github.com/lib/pq"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/inboxtest"
)

// TestMain runs the tests in a PostgreSQL database of their own, dropped at the end.
func TestMain(m *testing.M) {
	os.Exit(inboxtest.RunInOwnDatabases(m, inboxtest.PostgresDatabase("postgres")))
}

// TestSuite_LibPQ runs the behaviour suite over database/sql with lib/pq, the way a driver's own test calls it.
// The pgxinbox module runs it with pgx's database/sql driver and with pgx natively, and the mysqlinbox module on
// MariaDB.
func TestSuite_LibPQ(t *testing.T) {
	t.Parallel()
	inboxtest.Run(t, inboxtest.HarnessFunc(func(t testing.TB) inboxtest.Conn {
		db := openDB(t)
		return inboxtest.StdSQL(db, inbox.On(driver.StdSQL(db)), inboxtest.PostgreSQL)
	}))
}

// openDB connects to the test database and fails t, loudly, when it cannot.
func openDB(t testing.TB) *sql.DB {
	t.Helper()
	dsn := inboxtest.PostgresDatabase("postgres").DSN()
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("PostgreSQL is not reachable at %s (set INBOX_TEST_DATABASE_URL, or start it with "+
			"`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`): %v", dsn, err)
	}
	db.SetMaxOpenConns(20)
	return db
}
