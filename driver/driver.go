// Package driver is the seam between the inbox and a database client library: the few operations the inbox needs
// from a connection pool and a transaction, whatever library provides them. The inbox ships an adapter over
// database/sql (any driver) and, in its own module, one over pgx v5 (pgxinbox); an adapter for another library
// implements these interfaces and nothing else. The SQL itself lives with the inbox's dialects, not here.
package driver

import (
	"context"
	"errors"
)

// ErrNoRows is what Row.Scan returns when the query returned no row. Adapters translate their library's own
// no-rows error (sql.ErrNoRows, pgx.ErrNoRows) into it, so the inbox branches on one value.
var ErrNoRows = errors.New("driver: no rows in result set")

// ErrTxDone is what Commit and Rollback return for a transaction that already ended (database/sql ends one whose
// context was cancelled). Adapters translate their library's own error (sql.ErrTxDone, pgx.ErrTxClosed) into it.
var ErrTxDone = errors.New("driver: transaction has already been committed or rolled back")

// ErrTxShared is what Commit and Rollback return on the transaction a batch-mode handler gets (inbox.WithBatch):
// the transaction is the batch's, shared by several messages, and the inbox ends it once every handler has
// returned. A message that batch mode applies alone, and every message on a server that can end a transaction
// under a failed statement (MariaDB, MySQL), gets the same refusal on a transaction of its own. The call leaves the
// transaction as it was.
var ErrTxShared = errors.New("inbox: the transaction is the inbox's (in batch mode, shared with other messages) and the " +
	"inbox ends it once the handler returns: return an error to roll back this message's part")

// ErrHandlerReturned is what every statement returns on a batch member's transaction once its handler has
// returned: the batch goes on with other messages' statements, and a write that a goroutine of the handler's
// makes after it would land in their commit, or in none.
var ErrHandlerReturned = errors.New("inbox: the handler of this message has returned, and its batch transaction " +
	"refuses the statements of goroutines that outlive it: finish the handler's writes before it returns")

// ErrTxEnded is what every statement, and Commit, returns on a shared transaction (SharedPool) once a statement's
// error told that the server ended the transaction under it and went on in autocommit: MySQL and MariaDB roll a
// transaction back on a deadlock, and on a lock-wait timeout with innodb_rollback_on_timeout (TxOptions.Ends).
// The inbox's claim went with it, and a statement that ran now would commit on its own, outside any transaction.
// It wraps the error that ended the transaction.
var ErrTxEnded = errors.New("inbox: the database rolled back this message's transaction under a failed statement, " +
	"and refuses every later one: return an error, and the message is applied on its redelivery")

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
	// Ends, when set, tells from a statement's error that the server has ended the transaction under it and runs
	// what follows in autocommit (dialect.TxEnder). A shared transaction (SharedPool) then refuses every later
	// statement, its views' and the inbox's, and its Commit, with ErrTxEnded.
	Ends func(error) bool
}

// Pool begins transactions on a database.
type Pool interface {
	Begin(ctx context.Context, opts TxOptions) (Tx, error)
}

// Joiner finds, in a message's context, a transaction that a subscriber opened and will commit itself (watermill-sql's
// subscribers do), for the inbox to join instead of beginning its own.
type Joiner interface {
	Joined(ctx context.Context) (Tx, bool)
}

// JoinerFunc is a function that is a Joiner.
type JoinerFunc func(ctx context.Context) (Tx, bool)

// Joined calls f.
func (f JoinerFunc) Joined(ctx context.Context) (Tx, bool) { return f(ctx) }

// NativeTyper is implemented by a Pool that knows the type its transactions' Native values have for a handler:
// the type its library's TxFromContext asks the context for (*sql.Tx for database/sql, pgx.Tx for pgx). A joined
// subscriber transaction of another type (watermill-sql v4's over the other library's adapter) would leave the
// handler without one, so the inbox refuses to join it.
type NativeTyper interface {
	// NativeType names the type, as a handler's code spells it: "*sql.Tx", "pgx.Tx".
	NativeType() string
	// IsNative reports whether native is of that type.
	IsNative(native any) bool
}

// PoolLimit is implemented by a Pool that can tell its limit of open connections (database/sql's SetMaxOpenConns,
// a *pgxpool.Pool's MaxConns). Batch mode keeps fewer batches waiting on a limited pool, so that two connections
// stay free for what handlers take from the pool outside their transaction.
type PoolLimit interface {
	// MaxConns is the limit, 0 for none.
	MaxConns() int
}

// SharedPool is implemented by a Pool that can begin a transaction whose handlers' views refuse Commit and
// Rollback (batch mode's): the adapter over database/sql can. Its TxCaps' View gives a handler its view of a
// transaction that BeginShared began.
type SharedPool interface {
	BeginShared(ctx context.Context, opts TxOptions) (Tx, error)
}

// TxCapser is implemented by a Pool whose transactions can do more than Tx: pgxinbox's send a statement with their
// COMMIT, hold a statement back for the next one, and pipeline batch members' first statements; database/sql's
// shared ones (SharedPool) give each handler a view of its own. The inbox asks once, when it is built, and from
// then on calls the functions of the TxCaps on the pool's transactions.
type TxCapser interface {
	TxCaps() TxCaps
}

// TxCaps is what the transactions a pool begins can do beyond Tx. Each function takes a transaction the pool
// began, and is nil when the pool's transactions cannot do it. The inbox uses DeferExec and EndDeferred only when
// both are set, and ExecPipelined, RollbackToSeat and MemberView only when all three are.
type TxCaps struct {
	// CommitWith runs query with args in tx and then commits, the two in one round trip. The inbox's claim at
	// commit (WithClaimAtCommit) needs it. ran reports that query succeeded, and err is then COMMIT's error: nil
	// when the transaction committed. When query fails, ran is false, err is query's error, the COMMIT did not
	// run, and the transaction is still to be rolled back; a connection lost on the way leaves both unknown, ran
	// false.
	CommitWith func(ctx context.Context, tx Tx, query string, args ...any) (ran bool, err error)

	// DeferExec holds query, a statement without arguments, back until tx's next statement, to go in one round
	// trip with it. A batch member's savepoint goes that way: it costs no round trip of its own, and none at all
	// when the member runs no statement.
	DeferExec func(tx Tx, query string)
	// EndDeferred reports whether the statement DeferExec held back in tx ran, and how; one still held back is
	// dropped.
	EndDeferred func(tx Tx) (ran bool, err error)

	// ExecPipelined runs in tx, in one round trip and in order, for each k a savepoint named after seats[k] and
	// then sqls[k] with args[k]: several batch members' first statements, each after a savepoint of its own. It
	// sets results[k] and errs[k] to the statement's outcome, and returns how many savepoints were set: after a
	// statement that fails nothing more runs, so that one's is the last. An error of its own means that the
	// transaction can no longer be trusted.
	ExecPipelined func(ctx context.Context, tx Tx, seats []int, sqls []string, args [][]any, results []any, errs []error) (set int, err error)
	// RollbackToSeat rolls tx back to the newest savepoint ExecPipelined set for seat.
	RollbackToSeat func(ctx context.Context, tx Tx, seat int) error
	// MemberView returns the view of tx that member's handler gets. Its statements with arguments call
	// member.First, which runs one (ran) when it is the member's first; every other use calls member.Take first.
	MemberView func(tx Tx, member Member) View

	// View returns a new view of tx, a transaction that SharedPool's BeginShared began, for one handler. The
	// transaction closes its views when it ends.
	View func(ctx context.Context, tx Tx) (View, error)
}

// Member is a batch member as the view that MemberView makes for it sees it.
type Member interface {
	// First runs sql with args as the member's first statement, pipelined with other members' (ran), and returns
	// its outcome; it does nothing (ran false) when the member already used the transaction.
	First(ctx context.Context, sql string, args []any) (res any, ran bool, err error)
	// Take gives the member the connection to itself, before a use that First does not run.
	Take()
}

// View is one handler's view of a transaction it shares (a batch member's).
type View interface {
	// Native is the library's transaction the handler gets (*sql.Tx, pgx.Tx): its statements run in the shared
	// transaction, and its Commit and Rollback return ErrTxShared.
	Native() any
	// Failed returns the first error a statement run through the view returned, or nil. On PostgreSQL such an error
	// leaves the shared transaction aborted unless the handler rolled back to a savepoint of its own: the caller
	// finds out which with a statement of its own.
	Failed() error
	// Close ends the view when its handler returns: it waits for a statement the view runs and closes the results
	// the handler left open, and from then on every statement through the view returns ErrHandlerReturned.
	Close()
}

// Server names a kind of database server: what an Identifier reaches, and what a dialect speaks.
type Server string

const (
	// PostgreSQL is PostgreSQL, and any server that speaks its protocol: pgx and lib/pq reach nothing else.
	PostgreSQL Server = "PostgreSQL"
	// MySQL is MySQL or MariaDB, which speak one protocol and, for the inbox's statements, one SQL.
	MySQL Server = "MySQL"
)

// Identifier is implemented by a Pool that can tell, without a round trip, whether it reaches a database at all,
// and often which kind: an adapter given a nil handle reaches none, and the adapter over database/sql knows the
// server from the types of lib/pq's, pgx's and go-sql-driver/mysql's drivers. The inbox checks it when it is
// built, so that a handle that cannot work fails there and not in every message.
type Identifier interface {
	// Identify returns an error when the pool reaches no database, and otherwise the server it reaches, or ""
	// when it cannot tell without asking the server.
	Identify() (Server, error)
}
