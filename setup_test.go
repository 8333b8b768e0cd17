package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/lib/pq"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// testDSN is the PostgreSQL the tests run against: INBOX_TEST_DATABASE_URL, or this machine's default.
func testDSN() string { return testkit.PostgresDatabase(testDriver).DSN() }

// testDriver is the database/sql driver the tests in this package use: lib/pq. The pgxinbox module runs the same
// behaviour suite, and the tests behind pgbouncer, with pgx's database/sql driver and with pgx itself.
const testDriver = "postgres"

// openDB connects to the test database and fails the test, loudly, when it cannot: these tests prove behaviour
// against the real PostgreSQL and mean nothing without it.
func openDB(t testing.TB) *sql.DB {
	t.Helper()
	testkit.SkipWhenShort(t, "PostgreSQL")
	db, err := sql.Open(testDriver, testDSN())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("PostgreSQL is not reachable at %s (set INBOX_TEST_DATABASE_URL, or start it with "+
			"`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`): %v", testDSN(), err)
	}
	db.SetMaxOpenConns(20)
	t.Cleanup(func() { db.Close() })
	return db
}

// exampleDB opens the test database for an Example and returns a table name no other test uses, with a function
// that drops every object the inbox and the Example create under that name. Under -short the Examples do not run
// (see testkit.LeaveOutExamplesWhenShort); without it an unreachable database is an error, which the Example prints, so
// that its output does not match and go test fails loudly.
func exampleDB() (db *sql.DB, table string, drop func(), err error) {
	db, err = sql.Open(testDriver, testDSN())
	if err != nil {
		return nil, "", nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, "", nil, fmt.Errorf("PostgreSQL is not reachable at %s (set INBOX_TEST_DATABASE_URL): %w", testDSN(), err)
	}
	table = testkit.UniqueName("inbox_example")
	drop = func() {
		_, err := db.Exec(`DROP TABLE IF EXISTS ` + table + `, ` + table + `_produced, ` + table + `_locks, ` +
			table + `_migrations, ` + table + `_consumers, ` + table + `_accounts CASCADE`)
		if err == nil {
			_, err = db.Exec(`DROP FUNCTION IF EXISTS ` + table + `_unfinished_claim()`)
		}
		if err != nil {
			fmt.Println("drop the example's tables:", err)
		}
		if err := db.Close(); err != nil {
			fmt.Println("close the database:", err)
		}
	}
	return db, table, drop, nil
}

// inboxOptions lists shared options, and more, for New: a test that gives one list of options to the middleware
// and to the maintenance calls keeps it as []inbox.SharedOption.
func inboxOptions(shared []inbox.SharedOption, more ...inbox.Option) []inbox.Option {
	out := make([]inbox.Option, 0, len(shared)+len(more))
	for _, o := range shared {
		out = append(out, o)
	}
	return append(out, more...)
}

// maintenanceOptions lists shared options for the maintenance calls.
func maintenanceOptions(shared []inbox.SharedOption) []inbox.MaintenanceOption {
	out := make([]inbox.MaintenanceOption, 0, len(shared))
	for _, o := range shared {
		out = append(out, o)
	}
	return out
}

// testBundle is the shared fixture (testkit.Wallet: an inbox table, account 1 at balance 0, a non-idempotent
// Credit handler, a recording logger) over lib/pq, with the *sql.DB and the options the Inbox was built with.
type testBundle struct {
	*testkit.Wallet
	db   *sql.DB
	opts []inbox.Option // the options the Inbox was built with, to build another over the same table
}

// setup migrates a fresh inbox table and an accounts table with account 1 at balance 0, and returns an Inbox over
// them built with opts (plus the table, a fixed consumer name and a recording logger, which opts may override).
func setup(t testing.TB, opts ...inbox.Option) (*inbox.Inbox, *testBundle) {
	t.Helper()
	b := newBundle(t)
	b.opts = b.Options(opts...)
	ib, err := inbox.New(b.db, b.opts...)
	require.NoError(t, err)
	return ib, b
}

// newBundle creates the tables of a test without building an Inbox, for tests that build their own.
func newBundle(t testing.TB) *testBundle {
	t.Helper()
	db := openDB(t)
	return &testBundle{Wallet: testkit.NewWallet(t, testkit.StdSQL(db, inbox.OnSQL(db), testkit.PostgreSQL)), db: db}
}

// newMsg returns a message carrying eventID under the default metadata key, with a fresh UUID as a broker's
// redelivery or a relay's republish would not necessarily keep.
func newMsg(eventID string) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"account_id":1,"amount":100}`))
	msg.Metadata.Set(inbox.DefaultIDMetadataKey, eventID)
	msg.SetContext(context.Background())
	return msg
}

// recordingLogger is the behaviour suite's, which every driver's tests share.
type recordingLogger = testkit.RecordingLogger

// newSQLTopic returns a topic name of watermill-sql's PostgreSQL pub/sub that no other test uses, and drops its
// tables when the test ends.
func newSQLTopic(t testing.TB, db *sql.DB) string {
	t.Helper()
	topic := testkit.UniqueName("inbox_topic")
	t.Cleanup(func() {
		if t.Failed() {
			logXminHolders(t, db)
		}
		_, _ = db.Exec(`DROP TABLE IF EXISTS "watermill_` + topic + `"`)
		_, _ = db.Exec(`DROP TABLE IF EXISTS "watermill_offsets_` + topic + `"`)
	})
	return topic
}

// logXminHolders names the transactions that hold a transaction ID open on the server, in any of its databases.
// watermill-sql's default PostgreSQL subscriber reads only the messages whose transaction ID is below the xmin of
// the current snapshot, which such a transaction holds back for the whole server: the tests' own database does not
// keep them apart, and while one is open the subscriber's tests time out waiting for messages.
func logXminHolders(t testing.TB, db *sql.DB) {
	rows, err := db.Query(`SELECT pid, datname, coalesce(application_name, ''), now() - xact_start, left(query, 80)
		FROM pg_stat_activity
		WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid() AND xact_start < now() - interval '5 seconds'
		ORDER BY xact_start`)
	if err != nil {
		t.Logf("list the transactions that hold the snapshot's xmin back: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var (
			pid             int
			datname, app, q string
			age             string
		)
		if rows.Scan(&pid, &datname, &app, &age, &q) == nil {
			t.Logf("watermill-sql's subscriber sees no message written after this transaction began: pid %d on "+
				"database %s (%s), open for %s: %s", pid, datname, app, age, q)
		}
	}
}

// newSQLPublisher publishes to watermill-sql's PostgreSQL pub/sub: a durable broker that redelivers what was not
// acked, also to a new process.
func newSQLPublisher(t testing.TB, db *sql.DB) *wsql.Publisher {
	t.Helper()
	pub, err := wsql.NewPublisher(db, wsql.PublisherConfig{SchemaAdapter: wsql.DefaultPostgreSQLSchema{}, AutoInitializeSchema: true}, nil)
	require.NoError(t, err)
	return pub
}

// newSQLSubscriber subscribes to watermill-sql's PostgreSQL pub/sub as consumer group group.
func newSQLSubscriber(t testing.TB, db *sql.DB, group string) *wsql.Subscriber {
	t.Helper()
	sub, err := wsql.NewSubscriber(db, sqlSubscriberConfig(group), nil)
	require.NoError(t, err)
	return sub
}

func sqlSubscriberConfig(group string) wsql.SubscriberConfig {
	return wsql.SubscriberConfig{
		ConsumerGroup:    group,
		SchemaAdapter:    wsql.DefaultPostgreSQLSchema{},
		OffsetsAdapter:   wsql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true,
		PollInterval:     20 * time.Millisecond,
		ResendInterval:   20 * time.Millisecond,
		RetryInterval:    20 * time.Millisecond,
	}
}
