// Package testkit is the code of inboxtest: the behaviour suite every driver runs and the tests' shared fixture.
// It lives here, in the root module, so that the root module's own tests use it without requiring the inboxtest
// module, which requires the root. Each exported identifier is documented where inboxtest names it.
package testkit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
)

type Harness interface {
	// Open connects to the database under test and fails t, saying how to start the database, when it cannot.
	// It closes what it opened when t ends. Run calls it once, after its -short check, and every case shares
	// what it returns, in parallel.
	Open(t testing.TB) Conn
}

type HarnessFunc func(t testing.TB) Conn

// Open calls f.
func (f HarnessFunc) Open(t testing.TB) Conn { return f(t) }

type Conn interface {
	// Dialect is the SQL the suite writes for its own statements on this database.
	Dialect() Dialect
	// Database is the inbox's view of the database, through the library's adapter.
	Database() *inbox.Database
	// Pool reaches the same database for the suite's own statements: creating its side-effect tables, ageing
	// inbox rows, reading them back. Each statement runs in a transaction of its own.
	Pool() driver.Pool
	// ExecInHandler runs query on the transaction the inbox gave the handler whose message context is ctx,
	// found the way the library's users find it (inbox.TxFromContext for database/sql, pgxinbox.TxFromContext for
	// pgx), and returns an error when ctx holds none.
	ExecInHandler(ctx context.Context, query string, args ...any) error
	// EndInHandler commits (commit true) or rolls back that same transaction, as a handler that misuses it
	// would, and returns what the call returned.
	EndInHandler(ctx context.Context, commit bool) error
	// LeaveRowUnscannedInHandler runs query on that same transaction as a query of one row and never scans the
	// row, as a handler that forgot to would: the result stays open on the connection.
	LeaveRowUnscannedInHandler(ctx context.Context, query string) error
}

type StmtConn interface {
	Conn
	// ExecPreparedInHandler prepares query on the Conn's pool and runs it, through the handler's transaction
	// (tx.StmtContext), as a handler that keeps its statements prepared does.
	ExecPreparedInHandler(ctx context.Context, query string, args ...any) error
}

type Dialect struct {
	// Name names the database in failure messages.
	Name string
	// Param returns the placeholder of the n-th (from 1) argument of a statement: "$1" or "?".
	Param func(n int) string
	// Ago returns an SQL expression for the database clock's time d ago, for locked_until.
	Ago func(d time.Duration) string
	// ProcessedAgo returns an SQL expression for the database clock's time d ago as the inbox table's
	// processed_at stores it.
	ProcessedAgo func(d time.Duration) string
	// View names the relation that shows the inbox table's rows with consumer names and states spelled out.
	View func(table string) string
	// AgeConsumer returns the statement that moves back by d, as time would, what the database records of when
	// the consumer named by the first parameter began to remember; "" when it reads that from the rows alone.
	AgeConsumer func(table string, d time.Duration) string
	// Row returns the condition on the inbox table itself that picks the row of the consumer named by the first
	// parameter and the message ID of the second.
	Row func(table string) string
	// DropInbox returns the statements that remove every object the inbox creates for the table named table
	// (its side tables, functions, triggers), each one harmless when the object does not exist.
	DropInbox func(table string) []string
	// ConsumerIDs returns a query of one row: the greatest id the table's consumers carry and how many names it
	// has registered. Nil for a database whose rows carry the consumer's name instead of an id.
	ConsumerIDs func(table string) string
	// ExhaustConsumerIDs returns the statement that hands out the last of the table's consumer ids, as thousands
	// of registered names would, so that no new name can be registered. Nil when ConsumerIDs is.
	ExhaustConsumerIDs func(table string) string
	// DeferredCheck returns a statement that creates the table named table with a constraint checked only at
	// COMMIT, and a statement that violates it: a handler that runs the second makes its transaction's commit
	// fail. Nil for a database that checks every constraint at its statement, as MariaDB and MySQL do: no commit
	// of theirs fails on demand, and the case that needs one skips.
	DeferredCheck func(table string) (create, violate string)
	// RollBackNewest returns the statements that roll back the newest migration of the table named table and
	// remove its record from the versions table, so that Migrate applies it again. The case runs them, in order,
	// in one transaction, each statement as one call (a statement may hold several, as a migration file does).
	RollBackNewest func(table string) ([]string, error)
	// BriefLockWait returns the statements that run stmt in a transaction and wait for its locks a second at
	// most, failing with the database's lock-wait timeout past it.
	BriefLockWait func(stmt string) []string
	// ViewsEveryTx is set for a database whose server can end a transaction under a failed statement (MySQL,
	// MariaDB): the inbox then gives the handler its view of the transaction in every mode, as it does in batch
	// mode everywhere.
	ViewsEveryTx bool
}

var PostgreSQL = Dialect{
	Name: "PostgreSQL",
	BriefLockWait: func(stmt string) []string {
		return []string{`SET LOCAL lock_timeout = '1s'`, stmt}
	},
	Param: func(n int) string { return "$" + strconv.Itoa(n) },
	Ago: func(d time.Duration) string {
		return fmt.Sprintf("(now() - interval '%d microseconds')", d.Microseconds())
	},
	ProcessedAgo: func(d time.Duration) string {
		return fmt.Sprintf("(floor(extract(epoch FROM now() - interval '%d microseconds') / 60))::integer", d.Microseconds())
	},
	View: func(table string) string { return table + "_view" },
	AgeConsumer: func(table string, d time.Duration) string {
		return fmt.Sprintf(`UPDATE %s_consumers SET created_at = least(created_at, now() - interval '%d microseconds') WHERE name = $1`,
			table, d.Microseconds())
	},
	Row: func(table string) string {
		return `consumer_id = (SELECT id FROM ` + table + `_consumers WHERE name = $1) AND message_id = $2`
	},
	DropInbox: func(table string) []string {
		return []string{
			`DROP TABLE IF EXISTS ` + table + `_produced, ` + table + `, ` + table + `_locks, ` + table + `_migrations, ` +
				table + `_consumers CASCADE`,
			`DROP FUNCTION IF EXISTS ` + table + `_unfinished_claim()`,
		}
	},
	ConsumerIDs: func(table string) string {
		return `SELECT coalesce(max(id), 0), count(*) FROM ` + table + `_consumers`
	},
	ExhaustConsumerIDs: func(table string) string {
		return `SELECT setval(pg_get_serial_sequence('` + table + `_consumers', 'id'), 32767)`
	},
	DeferredCheck: func(table string) (create, violate string) {
		return `CREATE TABLE ` + table + ` (id int, CONSTRAINT ` + table + `_once UNIQUE (id) DEFERRABLE INITIALLY DEFERRED)`,
			`INSERT INTO ` + table + ` VALUES (1), (1)`
	},
	// The newest is 007, which moves the rows to the compact layout and numbers the consumers; its down migration
	// drops the consumers table, and applying 007 again numbers them anew, in the order of their names.
	RollBackNewest: func(table string) ([]string, error) {
		ms, err := inbox.OnSQL(nil).Migrations(inbox.WithTable(table))
		if err != nil {
			return nil, err
		}
		newest := ms[len(ms)-1]
		return []string{newest.Down, fmt.Sprintf(`DELETE FROM %s_migrations WHERE version = %d`, table, newest.Version)}, nil
	},
}

func StdSQL(db *sql.DB, database *inbox.Database, d Dialect) Conn {
	return stdConn{db: db, database: database, dialect: d}
}

type stdConn struct {
	db       *sql.DB
	database *inbox.Database
	dialect  Dialect
}

func (c stdConn) Dialect() Dialect          { return c.dialect }
func (c stdConn) Database() *inbox.Database { return c.database }
func (c stdConn) Pool() driver.Pool         { return driver.StdSQL(c.db) }

func (c stdConn) ExecInHandler(ctx context.Context, query string, args ...any) error {
	tx, ok := inbox.TxFromContext(ctx)
	if !ok {
		return errors.New("inboxtest: no *sql.Tx in the handler's context")
	}
	_, err := tx.ExecContext(ctx, query, args...)
	return err
}

func (c stdConn) LeaveRowUnscannedInHandler(ctx context.Context, query string) error {
	tx, ok := inbox.TxFromContext(ctx)
	if !ok {
		return errors.New("inboxtest: no *sql.Tx in the handler's context")
	}
	_ = tx.QueryRowContext(ctx, query)
	return nil
}

func (c stdConn) ExecPreparedInHandler(ctx context.Context, query string, args ...any) error {
	tx, ok := inbox.TxFromContext(ctx)
	if !ok {
		return errors.New("inboxtest: no *sql.Tx in the handler's context")
	}
	stmt, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return err
	}
	defer stmt.Close()
	_, err = tx.StmtContext(ctx, stmt).ExecContext(ctx, args...)
	return err
}

func (c stdConn) EndInHandler(ctx context.Context, commit bool) error {
	tx, ok := inbox.TxFromContext(ctx)
	if !ok {
		return errors.New("inboxtest: no *sql.Tx in the handler's context")
	}
	if commit {
		return tx.Commit()
	}
	return tx.Rollback()
}
