package inbox_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/inboxtest"
)

// TestSuite_LibPQ runs the behaviour suite over database/sql with lib/pq.
func TestSuite_LibPQ(t *testing.T) {
	t.Parallel()
	inboxtest.Run(t, stdSQLHarness("postgres"))
}

// TestSuite_PgxStdlib runs the behaviour suite over database/sql with pgx's driver.
func TestSuite_PgxStdlib(t *testing.T) {
	t.Parallel()
	inboxtest.Run(t, stdSQLHarness("pgx"))
}

// stdSQLHarness opens the test database with the database/sql driver of that name.
func stdSQLHarness(driverName string) inboxtest.Harness {
	return inboxtest.HarnessFunc(func(t testing.TB) inboxtest.Conn {
		db := openDBWith(t, driverName)
		return inboxtest.StdSQL(db, inbox.On(driver.StdSQL(db)), inboxtest.PostgreSQL)
	})
}

// openDBWith is openDB with the database/sql driver driverName, whatever INBOX_TEST_DRIVER says.
func openDBWith(t testing.TB, driverName string) *sql.DB {
	t.Helper()
	needsDB(t)
	db, err := sql.Open(driverName, testDSN())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		t.Fatalf("PostgreSQL is not reachable at %s with %s (set INBOX_TEST_DATABASE_URL, or start it with "+
			"`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`): %v", testDSN(), driverName, err)
	}
	db.SetMaxOpenConns(20)
	t.Cleanup(func() { db.Close() })
	return db
}
