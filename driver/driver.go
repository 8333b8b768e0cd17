// Package driver is the seam between the inbox and a database client library: the few operations the inbox needs
// from a connection pool and a transaction, whatever library provides them. The inbox ships an adapter over
// database/sql (any driver) and, in its own module, one over pgx v5 (pgxinbox); an adapter for another library
// implements these interfaces and nothing else. The SQL itself lives with the inbox's dialects, not here.
package driver

import (
	"context"
	"errors"
	"sync"
)

// ErrNoRows is what Row.Scan returns when the query returned no row. Adapters translate their library's own
// no-rows error (sql.ErrNoRows, pgx.ErrNoRows) into it, so the inbox branches on one value.
var ErrNoRows = errors.New("driver: no rows in result set")

// ErrTxDone is what Commit and Rollback return for a transaction that already ended (database/sql ends one whose
// context was cancelled). Adapters translate their library's own error (sql.ErrTxDone, pgx.ErrTxClosed) into it.
var ErrTxDone = errors.New("driver: transaction has already been committed or rolled back")

// ErrTxShared is what Commit and Rollback return on the transaction a batch-mode handler gets (inbox.WithBatch):
// the transaction is the batch's, shared by several messages, and the inbox ends it once every handler has
// returned. The call leaves the batch's transaction as it was.
var ErrTxShared = errors.New("inbox: the transaction is shared by a batch of messages and ended by the inbox, not by a " +
	"handler: return an error to roll back this message's part")

// Executor runs statements on a pool or in a transaction.
type Executor interface {
	// Exec runs a statement that returns no rows and reports how many rows it affected.
	Exec(ctx context.Context, query string, args ...any) (rowsAffected int64, err error)
	// QueryRow runs a query that returns at most one row. Errors are reported by the Row's Scan.
	QueryRow(ctx context.Context, query string, args ...any) Row
	// Query runs a query that returns rows. The caller closes them.
	Query(ctx context.Context, query string, args ...any) (Rows, error)
}

// Row is the result of QueryRow.
type Row interface {
	// Scan copies the row's columns into dest, or returns ErrNoRows when there was none, or the query's error.
	Scan(dest ...any) error
}

// Rows is the result of Query.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	// Err reports the error that ended the iteration, if any.
	Err() error
	// Close releases the rows; it may be called more than once.
	Close() error
}

// Tx is a transaction begun by a Pool or found in a message's context.
type Tx interface {
	Executor
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
	// Native returns the library's own transaction (*sql.Tx, pgx.Tx): what a handler gets from the context to
	// run its side effect on.
	Native() any
}

// TxOptions are the transaction settings the inbox asks for.
type TxOptions struct {
	// ReadCommitted begins the transaction at READ COMMITTED whatever the session's default, for the inbox's own
	// short statements, which are written for it. False keeps the default: a handler's transaction runs at the
	// level the application chose.
	ReadCommitted bool
	// ReadOnly begins a read-only transaction.
	ReadOnly bool
}

// LiteralArgs is implemented by a Tx whose library sends a statement with arguments in a round trip more than one
// without: lib/pq has the server parse and describe each such statement before it binds the arguments, unless its
// DSN sets binary_parameters. The PostgreSQL dialect then writes the arguments of its own statements into their
// text, as literals, wherever it can do so exactly, and the statement costs one round trip.
type LiteralArgs interface {
	LiteralArgs() bool
}

// SessionState is implemented by a Tx whose adapter can tell its connection from the pool's others (the adapter over
// lib/pq can). Session returns notes that live as long as the connection, for the dialect to record there what it
// left on the connection's server session: a statement it prepared with SQL's PREPARE, which lib/pq then runs in
// one round trip and PostgreSQL without parsing and planning it anew. Session returns nil when there are no notes,
// or once SessionLost was called on any transaction of the pool.
type SessionState interface {
	Session() *sync.Map
	// SessionLost reports that a session did not hold what the notes said: a pooler in transaction mode hands a
	// connection's transactions to whichever server session is free, or the application deallocated the
	// statements. The pool keeps no notes from then on.
	SessionLost()
}

// Pool begins transactions on a database.
type Pool interface {
	Begin(ctx context.Context, opts TxOptions) (Tx, error)
}

// CommitWither is implemented by a Tx that can send one last statement in the round trip of its COMMIT (pgxinbox's,
// which pipelines them). The inbox's claim at commit (WithClaimAtCommit) needs it.
type CommitWither interface {
	// CommitWith runs query with args and then commits, the two in one round trip. ran reports that query
	// succeeded, and err is then COMMIT's error: nil when the transaction committed. When query fails, ran is
	// false, err is query's error, the COMMIT did not run, and the transaction is still to be rolled back; a
	// connection lost on the way leaves both unknown, ran false.
	CommitWith(ctx context.Context, query string, args ...any) (ran bool, err error)
}

// CommitWithPool is implemented by a Pool that can tell whether the transactions it begins are CommitWithers.
type CommitWithPool interface {
	CommitsWith() bool
}

// Joiner finds, in a message's context, a transaction that a subscriber opened and will commit itself (watermill-sql's
// subscribers do), for the inbox to join instead of beginning its own.
type Joiner interface {
	Joined(ctx context.Context) (Tx, bool)
}
