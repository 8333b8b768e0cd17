package inbox

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

const (
	// shortTxTries bounds how often one of the inbox's own short transactions is run when PostgreSQL aborts it for
	// a serialization failure or a deadlock. Such an abort rolled everything back, so running it again is safe; a
	// few tries ride out a burst of contention without turning a persistent conflict into a long stall.
	shortTxTries = 5
	// shortTxBackoff is the wait before the second try; it doubles with each try after, and each wait is jittered
	// so that transactions that collided once do not collide again in step.
	shortTxBackoff = 5 * time.Millisecond
)

// shortTxOptions pins the inbox's own transactions to READ COMMITTED whatever the database's or the connection's
// default_transaction_isolation says. Every statement they run is a single compare-and-set or read written for
// READ COMMITTED: a statement sees what committed before it started, and an ON CONFLICT or UPDATE that meets a row
// changed since rechecks its condition on the newest version. Under REPEATABLE READ or SERIALIZABLE the same
// statement fails with a serialization error instead whenever another holder changed the row, which lease mode's
// racing copies do all the time.
var shortTxOptions = driver.TxOptions{ReadCommitted: true}

// inShortTx runs fn in a short transaction of its own and commits it, running it again (up to shortTxTries times
// in all) when the database aborted it for a conflict with another transaction.
//
// Each statement the inbox runs outside a caller's transaction goes through here, not through the pool's
// autocommit. A transaction-pooling proxy such as pgbouncer hands a client's statements to whichever server
// connection is free once the previous one finished; drivers that send a statement in two steps (lib/pq prepares
// an unnamed statement, then binds it, with a sync between) would have the second step land on another server
// connection than the first. Inside a transaction every step stays on one server connection.
func inShortTx(ctx context.Context, pool driver.Pool, d dialect.Dialect, fn func(tx driver.Tx) error) error {
	try := func() error { return runShortTx(ctx, pool, d, fn) }
	err := retryConflicts(ctx, d, shortTxTries, shortTxBackoff, try)
	if errors.Is(err, errSessionLost) { // its first statement, prepared, was not on the session: again with literals
		err = retryConflicts(ctx, d, shortTxTries, shortTxBackoff, try)
	}
	return err
}

func runShortTx(ctx context.Context, pool driver.Pool, d dialect.Dialect, fn func(tx driver.Tx) error) error {
	tx, err := pool.Begin(ctx, shortTxOptions)
	if err != nil {
		return poolerHint(d, fmt.Errorf("begin: %w", err))
	}
	if err := fn(tx); err != nil {
		return poolerHint(d, errors.Join(err, rollbackErr(tx.Rollback(ctx))))
	}
	if err := tx.Commit(ctx); err != nil {
		return poolerHint(d, fmt.Errorf("commit: %w", err))
	}
	return nil
}

// retryConflicts calls try until it succeeds, fails with an error other than one d classifies as retryable (a
// serialization failure, a deadlock, a lock wait that ran out), or has been called tries times. Between calls it waits a jittered, doubling backoff, and stops
// early when ctx ends.
func retryConflicts(ctx context.Context, d dialect.Dialect, tries int, backoff time.Duration, try func() error) error {
	for n := 1; ; n++ {
		err := try()
		if err == nil || !d.Classify(err).Retryable() {
			return err
		}
		if n == tries {
			return fmt.Errorf("%w (still conflicting after %d tries)", err, n)
		}
		wait := backoff << (n - 1)
		wait = wait/2 + rand.N(wait/2+1) // between half and all of the doubled wait
		if serr := sleep(ctx, wait); serr != nil {
			return errors.Join(err, serr)
		}
	}
}

// poolerHint adds what to do to the error a driver reports when a statement it prepared on one server connection
// is used on another, which is what a transaction-pooling proxy does to a driver that caches prepared statements.
func poolerHint(d dialect.Dialect, err error) error {
	var hinted pooledStatementError
	if err == nil || errors.As(err, &hinted) || d.Classify(err) != dialect.StatementMissing {
		return err
	}
	return pooledStatementError{err}
}

// pooledStatementError is a driver error that poolerHint explained, once however often the error is wrapped.
type pooledStatementError struct{ error }

func (e pooledStatementError) Error() string {
	return e.error.Error() + " (behind a transaction-pooling proxy such as pgbouncer, the driver must not reuse " +
		"prepared statements across transactions: with pgx v5, set default_query_exec_mode=cache_describe; with " +
		"pgx v4, statement_cache_mode=describe)"
}

func (e pooledStatementError) Unwrap() error { return e.error }
