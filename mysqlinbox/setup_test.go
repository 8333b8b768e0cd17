package mysqlinbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
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

// testBundle is what a test needs around the inbox under test: its database, its tables, and what it logged.
type testBundle struct {
	db       *sql.DB
	table    string // the inbox table
	accounts string // a side-effect table: id, balance
	logs     *recordingLogger
}

// newBundle migrates a fresh inbox table and an accounts table with account 1 at balance 0.
func newBundle(t testing.TB) *testBundle {
	t.Helper()
	ctx := context.Background()
	b := &testBundle{db: openDB(t), table: inboxtest.UniqueName("inbox_my"), logs: &recordingLogger{}}
	b.accounts = b.table + "_accounts"
	t.Cleanup(func() { b.drop(t) })
	require.NoError(t, mysqlinbox.Database(b.db).Migrate(ctx, inbox.WithTable(b.table)))
	_, err := b.db.ExecContext(ctx, `CREATE TABLE `+b.accounts+` (id INT PRIMARY KEY, balance BIGINT NOT NULL) ENGINE = InnoDB`)
	require.NoError(t, err)
	_, err = b.db.ExecContext(ctx, `INSERT INTO `+b.accounts+` VALUES (1, 0)`)
	require.NoError(t, err)
	return b
}

// drop removes every table the inbox may have created under the bundle's table name.
func (b *testBundle) drop(t testing.TB) {
	_, err := b.db.ExecContext(context.Background(), `DROP TABLE IF EXISTS `+b.accounts+`, `+b.table+`_produced, `+
		b.table+`_locks, `+b.table+`_migrations, `+b.table)
	if err != nil {
		t.Errorf("drop the test's tables: %v", err)
	}
}

// options are the inbox options of the bundle's tests: its table, a fixed consumer name and its logger, then opts.
func (b *testBundle) options(opts ...inbox.Option) []inbox.Option {
	return append([]inbox.Option{inbox.WithTable(b.table), inbox.WithConsumer("wallet-credits"), inbox.WithLogger(b.logs)}, opts...)
}

// credit is a handler whose side effect is not idempotent: every run adds amount to account 1, on the transaction
// the inbox gives it.
func (b *testBundle) credit(amount int, calls *atomic.Int64) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		if calls != nil {
			calls.Add(1)
		}
		tx, ok := inbox.TxFromContext(msg.Context())
		if !ok {
			return nil, fmt.Errorf("no transaction in the handler's context")
		}
		_, err := tx.ExecContext(msg.Context(), `UPDATE `+b.accounts+` SET balance = balance + ? WHERE id = 1`, amount)
		return nil, err
	}
}

// producing is credit that also produces one message, so that a copy's return can be told from its first run's.
func (b *testBundle) producing(calls *atomic.Int64) message.HandlerFunc {
	credit := b.credit(1, calls)
	return func(msg *message.Message) ([]*message.Message, error) {
		if _, err := credit(msg); err != nil {
			return nil, err
		}
		return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte("credited"))}, nil
	}
}

func (b *testBundle) balance(t testing.TB) int {
	t.Helper()
	var balance int
	require.NoError(t, b.db.QueryRow(`SELECT balance FROM `+b.accounts+` WHERE id = 1`).Scan(&balance))
	return balance
}

// rows counts the inbox rows of consumer.
func (b *testBundle) rows(t testing.TB, consumer string) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.QueryRow(`SELECT COUNT(*) FROM `+b.table+` WHERE consumer = ?`, consumer).Scan(&n))
	return n
}

// row returns the state and attempts of one inbox row.
func (b *testBundle) row(t testing.TB, consumer, id string) (state string, attempts int) {
	t.Helper()
	require.NoError(t, b.db.QueryRow(`SELECT state, COALESCE(attempts, 0) FROM `+b.table+` WHERE consumer = ? AND message_id = ?`,
		consumer, id).Scan(&state, &attempts))
	return state, attempts
}

// newMsg, recordingLogger and recordingPublisher are the behaviour suite's, shared by every driver's tests.
func newMsg(eventID string) *message.Message { return inboxtest.NewMessage(eventID) }

type (
	recordingLogger    = inboxtest.RecordingLogger
	recordingPublisher = inboxtest.RecordingPublisher
)
