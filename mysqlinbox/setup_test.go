package mysqlinbox_test

import (
	"context"
	"database/sql"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/go-sql-driver/mysql"

	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/mysqlinbox"
)

// TestMain runs the tests in databases of their own, on MariaDB and on PostgreSQL, dropped at the end.
func TestMain(m *testing.M) {
	os.Exit(inboxtest.RunInOwnDatabases(m, inboxtest.MySQLDatabase(), inboxtest.PostgresDatabase("postgres")))
}

// testDSN is the MariaDB or MySQL the tests run against: MYSQL_TEST_DSN, or this machine's default.
func testDSN() string { return inboxtest.MySQLDatabase().DSN() }

var (
	sharedOnce sync.Once
	sharedDB   *sql.DB
	sharedErr  error
)

// openDB returns the database of the tests, shared by them, and fails the test, loudly, when it is unreachable.
// Under -short, which runs only the tests that need no database, it skips the test instead.
func openDB(t testing.TB) *sql.DB {
	t.Helper()
	inboxtest.SkipWhenShort(t, "MariaDB or MySQL")
	sharedOnce.Do(func() {
		sharedDB, sharedErr = sql.Open("mysql", testDSN())
		if sharedErr != nil {
			return
		}
		sharedDB.SetMaxOpenConns(40)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sharedErr = sharedDB.PingContext(ctx)
	})
	if sharedErr != nil {
		t.Fatalf("MariaDB is not reachable at %s (set MYSQL_TEST_DSN, or start it with "+
			"`start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd`): %v", testDSN(), sharedErr)
	}
	return sharedDB
}

// testBundle is the shared fixture (inboxtest.Wallet: an inbox table, account 1 at balance 0, a non-idempotent
// Credit handler, a recording logger) over MariaDB or MySQL, with the *sql.DB.
type testBundle struct {
	*inboxtest.Wallet
	db *sql.DB
}

// newBundle migrates a fresh inbox table and an accounts table with account 1 at balance 0.
func newBundle(t testing.TB) *testBundle {
	t.Helper()
	db := openDB(t)
	return &testBundle{Wallet: inboxtest.NewWallet(t, inboxtest.StdSQL(db, mysqlinbox.Database(db), mariaDB)), db: db}
}

// producing is credit that also produces one message, so that a copy's return can be told from its first run's.
func (b *testBundle) producing(calls *atomic.Int64) message.HandlerFunc {
	credit := b.Credit(1, calls)
	return func(msg *message.Message) ([]*message.Message, error) {
		if _, err := credit(msg); err != nil {
			return nil, err
		}
		return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte("credited"))}, nil
	}
}

// newMsg is the behaviour suite's, shared by every driver's tests.
func newMsg(eventID string) *message.Message { return inboxtest.NewMessage(eventID) }
