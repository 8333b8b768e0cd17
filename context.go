package inbox

import (
	"context"
	"database/sql"

	"github.com/effectively-once/watermill-inbox/driver"
)

type ctxKey int

const (
	txKey ctxKey = iota
	eventIDKey
)

func withClaim(ctx context.Context, tx driver.Tx, eventID string) context.Context {
	return context.WithValue(context.WithValue(ctx, txKey, tx), eventIDKey, eventID)
}

// TxFromContext returns the transaction that holds this message's inbox row. A handler running under the
// middleware does its side effect on it, so that the effect and the row commit together.
//
// In transaction mode the middleware commits the transaction after the handler returns nil and before the router
// acks; it rolls it back when the handler returns an error, panics, or its context is cancelled, and on a duplicate
// the handler never runs. When the message came from watermill-sql's subscriber, the transaction is the
// subscriber's own, which the subscriber commits after the ack. A nack does not roll that transaction back (the
// subscriber redelivers the message inside it), so the middleware runs the handler in a savepoint and rolls back
// to it when the handler fails: the failed attempt's writes are undone either way. Outside the handler, or in lease
// mode, ok is false.
func TxFromContext(ctx context.Context) (tx *sql.Tx, ok bool) {
	tx, ok = NativeTxFromContext(ctx).(*sql.Tx)
	return tx, ok
}

// NativeTxFromContext returns the transaction that holds this message's inbox row as the database's client library
// knows it (*sql.Tx for database/sql, pgx.Tx for pgx), or nil outside the handler and in lease mode. Adapter
// packages build their typed TxFromContext on it, as pgxinbox does.
func NativeTxFromContext(ctx context.Context) any {
	if tx, ok := ctx.Value(txKey).(driver.Tx); ok {
		return tx.Native()
	}
	return nil
}

// EventIDFromContext returns the event ID the inbox claimed for this message, for handlers that record it (in a
// ledger, say) or derive keys from it.
func EventIDFromContext(ctx context.Context) (id string, ok bool) {
	id, ok = ctx.Value(eventIDKey).(string)
	return id, ok
}
