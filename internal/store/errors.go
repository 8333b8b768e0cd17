package store

import (
	"context"
	"errors"
	"strings"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// The errors the store translates the database's into, for callers to branch on. The inbox package exports them
// under the same names and documents them there.
var (
	ErrSchemaMissing        = errors.New("inbox: inbox table does not exist (run inbox.Migrate)")
	ErrInvalidEventID       = errors.New("inbox: invalid event ID")
	ErrLeaseLost            = errors.New("inbox: lease lost to another consumer")
	ErrProducedUnstorable   = errors.New("inbox: produced messages cannot be stored")
	ErrConsumerIDsExhausted = errors.New("inbox: no consumer id left for a new consumer name")
	ErrResultLeftOpen       = errors.New("inbox: the handler returned with a result of its transaction neither read " +
		"to its end nor closed (an unscanned QueryRowContext, Rows not closed), which keeps the connection busy: " +
		"scan or close every result before the handler returns")
)

// resultLeftOpen reports an error of a client library that refused a statement because a result of an earlier one
// is still being read on the connection: lib/pq's, pgx's, go-sql-driver/mysql's. None carries a code of the
// server's, which never saw the statement.
func resultLeftOpen(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	for _, s := range []string{"there is already a query being processed on this connection", "conn busy",
		"busy buffer", "commands out of sync"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// ErrClientEncoding is a statement the database refused because the connection's session would have read the
// inbox's text in another encoding than UTF-8: its client_encoding was switched (SET client_encoding) after the
// client library connected. The inbox package exports it and documents it there.
var ErrClientEncoding = errors.New("inbox: the database would not store the event ID as sent: the connection's client_encoding is not UTF8 (reset it where it was changed: RESET client_encoding), or the database's encoding has no character for one of the ID's")

// ErrStaleConsumer is a claim that wrote nothing because the consumer's cached id no longer names it: the consumers
// table was made anew. The ids are forgotten by then, and the message can be claimed again at once, with the id
// the name has now.
var ErrStaleConsumer = errors.New("the consumer's id is no longer its own in the consumers table, which was made anew; the id is asked for again")

// ErrClaimLostLock marks a claim that a lock conflict ended before it looked for its row: a deadlock with a
// concurrent transaction (InnoDB's, between inserts that wait for each other), a lock timeout, or a serialization
// failure. Nothing of the message ran; in a transaction of the inbox's own, the attempt may run again at once.
var ErrClaimLostLock = errors.New("the claim lost a lock conflict with a concurrent transaction")

// Conflict is a statement the database rolled back for a serialization failure: the transaction read a
// snapshot older than a row it had to write. Its text is the error's own.
type Conflict struct{ error }

func (e Conflict) Unwrap() error { return e.error }

// IsConflict reports whether err is a Conflict.
func IsConflict(err error) bool {
	var c Conflict
	return errors.As(err, &c)
}

// InShortTx runs fn in a short transaction of its own, as dialect.InShortTx says (which tells why every statement
// outside a caller's transaction goes through one), and explains an error a transaction-pooling proxy caused.
func InShortTx(ctx context.Context, pool driver.Pool, d dialect.Dialect, fn func(tx driver.Tx) error) error {
	return PoolerHint(d, dialect.InShortTx(ctx, pool, d, fn))
}

// PoolerHint adds what to do to the error a driver reports when a statement it prepared on one server connection
// is used on another, which is what a transaction-pooling proxy does to a driver that caches prepared statements.
func PoolerHint(d dialect.Dialect, err error) error {
	var hinted pooledStatementError
	if err == nil || errors.As(err, &hinted) || d.Classify(err) != dialect.StatementMissing {
		return err
	}
	return pooledStatementError{err}
}

// pooledStatementError is a driver error that PoolerHint explained, once however often the error is wrapped.
type pooledStatementError struct{ error }

func (e pooledStatementError) Error() string {
	return e.error.Error() + " (behind a transaction-pooling proxy such as pgbouncer, the driver must not reuse " +
		"prepared statements across transactions: with pgx v5, set default_query_exec_mode=cache_describe; with " +
		"pgx v4, statement_cache_mode=describe)"
}

func (e pooledStatementError) Unwrap() error { return e.error }
