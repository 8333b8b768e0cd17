package dialect

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/effectively-once/watermill-inbox/driver"
)

const (
	// shortTxTries bounds how often one of the inbox's own short transactions is run when the database aborts it
	// for a serialization failure or a deadlock. Such an abort rolled everything back, so running it again is
	// safe; a few tries ride out a burst of contention without turning a persistent conflict into a long stall.
	shortTxTries = 5
	// shortTxBackoff is the wait before the second try; it doubles with each try after, and each wait is jittered
	// so that transactions that collided once do not collide again in step.
	shortTxBackoff = 5 * time.Millisecond
)

// shortTxOptions pins the inbox's own transactions to READ COMMITTED whatever the database's or the connection's
// default isolation says. Every statement they run is a single compare-and-set or read written for READ
// COMMITTED: a statement sees what committed before it started, and an insert that meets a conflicting row or an
// update of a row changed since rechecks its condition on the newest version. Under REPEATABLE READ or
// SERIALIZABLE the same statement fails with a serialization error instead whenever another holder changed the
// row, which lease mode's racing copies do all the time.
var shortTxOptions = driver.TxOptions{ReadCommitted: true}

// InShortTx runs fn in a short transaction of its own and commits it, running it again (up to five times in all)
// when the database aborted it for a conflict with another transaction.
//
// Each statement the inbox runs outside a caller's transaction goes through here, not through the pool's
// autocommit. A transaction-pooling proxy such as pgbouncer hands a client's statements to whichever server
// connection is free once the previous one finished; drivers that send a statement in two steps (lib/pq prepares
// an unnamed statement, then binds it, with a sync between) would have the second step land on another server
// connection than the first. Inside a transaction every step stays on one server connection.
func InShortTx(ctx context.Context, pool driver.Pool, d Dialect, fn func(tx driver.Tx) error) error {
	return RetryConflicts(ctx, d, shortTxTries, shortTxBackoff, func() error { return runShortTx(ctx, pool, fn) })
}

func runShortTx(ctx context.Context, pool driver.Pool, fn func(tx driver.Tx) error) error {
	tx, err := pool.Begin(ctx, shortTxOptions)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		return errors.Join(err, RollbackErr(tx.Rollback(ctx)))
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// RollbackErr drops the error a rollback reports for a transaction that the client library already ended (because
// its context was cancelled), which is no failure, and says what failed of any other.
func RollbackErr(err error) error {
	if err == nil || errors.Is(err, driver.ErrTxDone) {
		return nil
	}
	return fmt.Errorf("inbox: rollback: %w", err)
}

// RetryConflicts calls try until it succeeds, fails with an error other than one d classifies as retryable (a
// serialization failure, a deadlock, a lock wait that ran out), or has been called tries times. Between calls it
// waits a jittered backoff that doubles from backoff, and stops early when ctx ends.
func RetryConflicts(ctx context.Context, d Dialect, tries int, backoff time.Duration, try func() error) error {
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
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		}
	}
}
