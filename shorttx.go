package inbox

import (
	"context"
	"errors"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// inShortTx runs fn in a short transaction of its own, as dialect.InShortTx says (which tells why every statement
// outside a caller's transaction goes through one), and explains an error a transaction-pooling proxy caused.
func inShortTx(ctx context.Context, pool driver.Pool, d dialect.Dialect, fn func(tx driver.Tx) error) error {
	return poolerHint(d, dialect.InShortTx(ctx, pool, d, fn))
}

// rollbackErr drops the error a rollback reports for a transaction that the client library already ended (because
// its context was cancelled), which is no failure.
func rollbackErr(err error) error { return dialect.RollbackErr(err) }

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
