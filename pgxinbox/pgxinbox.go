// Package pgxinbox runs the inbox over pgx v5: a pgxpool.Pool (or a pgx.Conn) instead of a *sql.DB, with the
// handler's transaction a pgx.Tx. It also joins the subscriber transaction of watermill-sql v4, over either of its
// adapters. It is a module of its own, so that the inbox's users who do not use pgx v5 or watermill-sql v4 do not
// get their dependencies.
//
//	router.AddMiddleware(pgxinbox.Middleware(pool))
//	router.AddConsumerHandler("wallet-credits", "deposits", sub, func(msg *message.Message) error {
//		tx, _ := pgxinbox.TxFromContext(msg.Context())
//		_, err := tx.Exec(msg.Context(), "UPDATE accounts SET balance = balance + $1 WHERE id = $2", amount, id)
//		return err
//	})
//
// Everything else the inbox offers (Migrate, Cleanup, NewCleaner, ReadStats, Forget, Remembers) is a method of the
// *inbox.Database that Database returns.
//
// Behind pgbouncer in transaction pooling mode, set the pool's default_query_exec_mode to cache_describe, exec or
// simple_protocol: pgx's default caches prepared statements per connection, which a pooler that hands each
// transaction another server connection breaks.
package pgxinbox

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	inbox "github.com/effectively-once/watermill-inbox"
)

// Database returns the database p reaches, for the inbox's operations, joining the transaction of watermill-sql
// v4's subscriber (see SQLv4Joiner).
func Database(p Beginner) *inbox.Database { return inbox.On(Pool(p), SQLv4Joiner()) }

// New checks the options and returns an Inbox over p, as inbox.New does over a *sql.DB.
func New(p Beginner, opts ...inbox.Option) (*inbox.Inbox, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: the pool is nil", inbox.ErrInvalidOption)
	}
	return Database(p).New(opts...)
}

// Middleware returns a router middleware that applies each message at most once per consumer over p, as
// inbox.Middleware does over a *sql.DB. It panics, once and at construction, with an error wrapping
// inbox.ErrInvalidOption if an option is invalid; use New to get the error instead.
func Middleware(p Beginner, opts ...inbox.Option) message.HandlerMiddleware {
	i, err := New(p, opts...)
	if err != nil {
		panic(err)
	}
	return i.Middleware
}

// TxFromContext returns the pgx transaction that holds this message's inbox row, for the handler to run its side
// effect on. The inbox commits it after the handler returns without error, and rolls it back otherwise; the handler
// must not end it. In batch mode (inbox.WithBatch) its Commit and Rollback return inbox.ErrTxShared and leave the
// batch's transaction as it was.
//
// ok is false, and the pgx.Tx nil, in exactly these cases:
//   - ctx is not the context the middleware gave the handler, nor derived from it: the code runs outside the
//     middleware (a handler the middleware does not wrap, a test that calls the handler itself, a goroutine with
//     context.Background), or a middleware between the inbox and the handler replaced the message's context;
//   - lease mode (inbox.WithLease), which runs the handler outside any transaction: use inbox.LeaseFromContext;
//   - the transaction is not pgx's: the inbox runs over database/sql (inbox.Middleware, or inbox.On with
//     driver.StdSQL); inbox.TxFromContext returns it. (An inbox over pgx never joins watermill-sql v4's subscriber
//     over its database/sql adapter: it holds such a message back, before the handler runs, with an error wrapping
//     inbox.ErrInvalidOption.)
//
// A handler that uses the pgx.Tx without checking ok panics on nil; Handler checks for it and returns an error
// that says which case it met.
func TxFromContext(ctx context.Context) (pgx.Tx, bool) {
	tx, ok := inbox.NativeTxFromContext(ctx).(pgx.Tx)
	return tx, ok
}
