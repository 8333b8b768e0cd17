package inbox

import (
	"context"
	"database/sql"

	"github.com/effectively-once/watermill-inbox/internal/batch"
)

// TxFromContext returns the transaction that holds this message's inbox row. A handler running under the
// middleware does its side effect on it, so that the effect and the row commit together.
//
// In transaction mode the middleware commits the transaction after the handler returns nil and before the router
// acks; it rolls it back when the handler returns an error, panics, or its context is cancelled, and on a duplicate
// the handler never runs. When the message came from watermill-sql's subscriber, the transaction is the
// subscriber's own, which the subscriber commits after the ack. A nack does not roll that transaction back (the
// subscriber redelivers the message inside it), so the middleware runs the handler in a savepoint and rolls back
// to it when the handler fails: the failed attempt's writes are undone either way.
//
// In batch mode (WithBatch) the transaction is shared by the messages of a batch, and the handler gets a *sql.Tx of
// its own over it: its statements run in the batch's transaction, after a savepoint of the message's, and its
// Commit and Rollback return ErrTxShared and leave the batch as it was. A handler that returns nil after one of its
// statements failed and left the transaction aborted (PostgreSQL) has its message's part rolled back to its
// savepoint and the message nacked, alone, as in per-message mode.
//
// ok is false, and tx nil, in exactly these cases:
//   - ctx is not the context the middleware gave the handler, nor derived from it: the code runs outside the
//     middleware (a handler the middleware does not wrap, a test that calls the handler itself, a goroutine with
//     context.Background), or a middleware between the inbox and the handler replaced the message's context;
//   - lease mode (WithLease), which runs the handler outside any transaction: use LeaseFromContext;
//   - the transaction is not a *sql.Tx: the inbox runs over pgx (pgxinbox); pgxinbox.TxFromContext returns it.
//     (A database/sql inbox never joins watermill-sql v4's subscriber over its pgx adapter: it holds such a
//     message back, before the handler runs, with an error wrapping ErrInvalidOption);
//   - in batch mode, the inbox could not give the handler its view of the batch's transaction: the transaction had
//     ended (the handler ran after its message was settled), or the database refused to begin the view.
//
// A handler that uses tx without checking ok panics on a nil *sql.Tx; Handler checks for it and returns an error
// that says which case it met.
func TxFromContext(ctx context.Context) (tx *sql.Tx, ok bool) {
	tx, ok = NativeTxFromContext(ctx).(*sql.Tx)
	return tx, ok
}

// NativeTxFromContext returns the transaction that holds this message's inbox row as the database's client library
// knows it (*sql.Tx for database/sql, pgx.Tx for pgx), or nil outside the handler and in lease mode. Adapter
// packages build their typed TxFromContext on it, as pgxinbox does.
func NativeTxFromContext(ctx context.Context) any {
	c := claimOf(ctx)
	if c == nil || c.tx == nil {
		return nil
	}
	if v, ok := ctx.Value(viewKey).(*batch.AloneView); ok && v.Tx() == c.tx {
		return v.Native(ctx)
	}
	return c.tx.Native()
}

// EventIDFromContext returns the event ID the inbox claimed for this message, for handlers that record it (in a
// ledger, say) or derive keys from it.
func EventIDFromContext(ctx context.Context) (id string, ok bool) {
	if c := claimOf(ctx); c != nil {
		return c.id, true
	}
	return "", false
}
