package pgxinbox_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/inboxtest"
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
	return openPoolWith(t, dsn, func(cfg *pgxpool.Config) { cfg.ConnConfig.DefaultQueryExecMode = mode })
}

// openPoolWith is openPool with the pool's configuration, of at most 10 connections, changed by configure.
func openPoolWith(t testing.TB, dsn string, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	inboxtest.SkipWhenShort(t, "PostgreSQL")
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.MaxConns = 10
	configure(cfg)
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

// testBundle is the shared fixture (inboxtest.Wallet: an inbox table, account 1 at balance 0, a non-idempotent
// Credit handler on the pgx transaction, a recording logger) over a pgx pool, with the pool and, for the tests
// that need both, the same database over database/sql.
type testBundle struct {
	*inboxtest.Wallet
	pool  *pgxpool.Pool
	sqlDB *sql.DB
}

// newBundle migrates a fresh inbox table (with opts) and an accounts table with account 1 at balance 0.
func newBundle(t testing.TB, opts ...inbox.MaintenanceOption) *testBundle {
	t.Helper()
	return newBundleOn(t, openPool(t, testDSN()), opts...)
}

// newEmptyBundle is newBundle without the inbox's tables, for the tests of their creation.
func newEmptyBundle(t testing.TB) *testBundle {
	t.Helper()
	pool := openPool(t, testDSN())
	return &testBundle{Wallet: inboxtest.NewEmptyWallet(t, pgxConn{pool}), pool: pool}
}

// newBundleOn is newBundle over pool.
func newBundleOn(t testing.TB, pool *pgxpool.Pool, opts ...inbox.MaintenanceOption) *testBundle {
	t.Helper()
	return &testBundle{Wallet: inboxtest.NewWallet(t, pgxConn{pool}, opts...), pool: pool}
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
