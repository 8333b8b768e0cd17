package pgxinbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
)

// testDSN is the PostgreSQL the tests run against: INBOX_TEST_DATABASE_URL, or this machine's default.
func testDSN() string { return inboxtest.PostgresDatabase("pgx").DSN() }

// openPool connects a pgx pool to dsn and fails the test, loudly, when it cannot.
func openPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	return openPoolIn(t, dsn, pgx.QueryExecModeCacheStatement)
}

// openPoolIn is openPool with the pool's statements sent in mode (pgx's default is QueryExecModeCacheStatement).
func openPoolIn(t testing.TB, dsn string, mode pgx.QueryExecMode) *pgxpool.Pool {
	t.Helper()
	inboxtest.SkipWhenShort(t, "PostgreSQL")
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.MaxConns = 10
	cfg.ConnConfig.DefaultQueryExecMode = mode
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		t.Fatalf("PostgreSQL is not reachable at %s (set INBOX_TEST_DATABASE_URL, or start it with "+
			"`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`): %v", dsn, err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// testBundle is what a test needs around the inbox under test: its pool, its tables, and what it logged.
type testBundle struct {
	pool     *pgxpool.Pool
	sqlDB    *sql.DB // the same database over database/sql, for the tests that need both
	table    string  // the inbox table
	accounts string  // a side-effect table: id, balance
	logs     *recordingLogger
}

// newBundle migrates a fresh inbox table (with opts) and an accounts table with account 1 at balance 0.
func newBundle(t testing.TB, opts ...inbox.MaintenanceOption) *testBundle {
	t.Helper()
	return newBundleOn(t, openPool(t, testDSN()), opts...)
}

// newBundleOn is newBundle over pool.
func newBundleOn(t testing.TB, pool *pgxpool.Pool, opts ...inbox.MaintenanceOption) *testBundle {
	t.Helper()
	ctx := context.Background()
	b := &testBundle{pool: pool, table: inboxtest.UniqueName("inbox_pgx"), logs: &recordingLogger{}}
	b.accounts = b.table + "_accounts"
	t.Cleanup(func() { b.drop(t) })
	require.NoError(t, pgxinbox.Database(b.pool).Migrate(ctx, append([]inbox.MaintenanceOption{inbox.WithTable(b.table)}, opts...)...))
	_, err := b.pool.Exec(ctx, `CREATE TABLE `+b.accounts+` (id int PRIMARY KEY, balance bigint NOT NULL)`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `INSERT INTO `+b.accounts+` VALUES (1, 0)`)
	require.NoError(t, err)
	return b
}

// drop removes every object the inbox may have created under the bundle's table name.
func (b *testBundle) drop(t testing.TB) {
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, `DROP TABLE IF EXISTS `+b.accounts)
	for _, q := range inboxtest.PostgreSQL.DropInbox(b.table) {
		if err != nil {
			break
		}
		_, err = b.pool.Exec(ctx, q)
	}
	if err != nil {
		t.Errorf("drop the test's tables: %v", err)
	}
}

// options are the inbox options of the bundle's tests: its table, a fixed consumer name and its logger, then opts.
func (b *testBundle) options(opts ...inbox.Option) []inbox.Option {
	return append([]inbox.Option{inbox.WithTable(b.table), inbox.WithConsumer("wallet-credits"), inbox.WithLogger(b.logs)}, opts...)
}

// credit is a handler whose side effect is not idempotent: every run adds amount to account 1, on the pgx
// transaction the inbox gives it.
func (b *testBundle) credit(amount int, calls *atomic.Int64) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		if calls != nil {
			calls.Add(1)
		}
		tx, ok := pgxinbox.TxFromContext(msg.Context())
		if !ok {
			return nil, fmt.Errorf("no pgx transaction in the handler's context")
		}
		_, err := tx.Exec(msg.Context(), `UPDATE `+b.accounts+` SET balance = balance + $1 WHERE id = 1`, amount)
		return nil, err
	}
}

func (b *testBundle) balance(t testing.TB) int {
	t.Helper()
	var balance int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT balance FROM `+b.accounts+` WHERE id = 1`).Scan(&balance))
	return balance
}

// rows counts the inbox rows of consumer.
func (b *testBundle) rows(t testing.TB, consumer string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+b.table+`_view WHERE consumer = $1`, consumer).Scan(&n))
	return n
}

// row returns the state and attempts of one inbox row.
func (b *testBundle) row(t testing.TB, consumer, id string) (state string, attempts int) {
	t.Helper()
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT state, coalesce(attempts, 0) FROM `+b.table+`_view WHERE consumer = $1 AND message_id::text = $2`, consumer, id).
		Scan(&state, &attempts))
	return state, attempts
}

// newMsg, recordingLogger and recordingPublisher are the behaviour suite's, shared by every driver's tests.
func newMsg(eventID string) *message.Message { return inboxtest.NewMessage(eventID) }

type (
	recordingLogger    = inboxtest.RecordingLogger
	recordingPublisher = inboxtest.RecordingPublisher
)

// openStdlib connects to dsn through pgx v5's database/sql driver and fails the test, loudly, when it cannot.
func openStdlib(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	inboxtest.SkipWhenShort(t, "PostgreSQL")
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		t.Fatalf("PostgreSQL is not reachable at %s through pgx's database/sql driver (set INBOX_TEST_DATABASE_URL): %v", dsn, err)
	}
	db.SetMaxOpenConns(10)
	t.Cleanup(func() { db.Close() })
	return db
}
