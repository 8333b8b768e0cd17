package inboxtest

import (
	"database/sql"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// Harness connects the suite to the database under test.
type Harness = testkit.Harness

// HarnessFunc is a Harness made of its Open function.
type HarnessFunc = testkit.HarnessFunc

// Conn is the database under test as one client library reaches it.
type Conn = testkit.Conn

// StmtConn is a Conn whose client library prepares statements on its pool and hands them to a transaction
// (database/sql's DB.PrepareContext and Tx.StmtContext). The cases that need it skip, saying why, on a Conn
// without it: pgx prepares statements on a connection, not on its pool.
type StmtConn = testkit.StmtConn

// Dialect is the SQL of one database that the suite needs for its own statements. The inbox's statements are the
// inbox's: the suite only sets the stage and reads the result, through the columns consumer, message_id, state,
// attempts, processed_at and locked_until of View.
type Dialect = testkit.Dialect

// PostgreSQL is the dialect of PostgreSQL, whatever the client library.
var PostgreSQL = testkit.PostgreSQL

// StdSQL returns the Conn of a database/sql driver: database is the inbox over db (inbox.On(driver.StdSQL(db)),
// or a dialect module's own), and a handler finds its transaction with inbox.TxFromContext.
func StdSQL(db *sql.DB, database *inbox.Database, d Dialect) Conn {
	return testkit.StdSQL(db, database, d)
}
