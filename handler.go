package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Handler adapts fn to a Watermill handler that runs fn on the inbox's transaction: the transaction that holds
// the message's inbox row, which fn writes its side effect on so that the two commit together, as TxFromContext
// returns it.
//
//	router.AddMiddleware(inbox.Middleware(db))
//	router.AddConsumerHandler("wallet-credits", "deposits", sub, inbox.Handler(credit))
//
// fn is never called without a transaction: when the context holds none (the handler runs outside the inbox's
// middleware, in lease mode, or under an inbox over pgx), the handler returns an error wrapping ErrNoTx, which says
// why, and the message is nacked (after the reject delay, under the middleware). In batch mode (WithBatch) the
// handler takes the batch's transaction before fn runs and holds it until fn returns; a handler that works long
// outside the database before it writes should call TxFromContext itself once that work is done, so that the
// work overlaps the batch's other handlers. Handler panics if fn is nil.
func Handler(fn func(ctx context.Context, tx *sql.Tx, msg *message.Message) error) message.NoPublishHandlerFunc {
	return HandlerOf("inbox.Handler", fn)
}

// ProducingHandler is Handler for a function that returns messages for the router to publish. The inbox stores
// them with the message's row, and a duplicate gets them again, each with the same UUID (see ProducedMessageUUID).
func ProducingHandler(fn func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error)) message.HandlerFunc {
	return ProducingHandlerOf("inbox.ProducingHandler", fn)
}

// HandlerOf is Handler for the transaction type T of a client library's adapter (pgx.Tx for pgxinbox): adapter
// packages build their helpers with it. helper names the helper in its errors and its panic.
func HandlerOf[T any](helper string, fn func(ctx context.Context, tx T, msg *message.Message) error) message.NoPublishHandlerFunc {
	if fn == nil {
		panic(helper + ": the function is nil")
	}
	produce := ProducingHandlerOf(helper, func(ctx context.Context, tx T, msg *message.Message) ([]*message.Message, error) {
		return nil, fn(ctx, tx, msg)
	})
	return func(msg *message.Message) error {
		_, err := produce(msg)
		return err
	}
}

// ProducingHandlerOf is ProducingHandler for the transaction type T of a client library's adapter, as HandlerOf
// is Handler.
func ProducingHandlerOf[T any](helper string, fn func(ctx context.Context, tx T, msg *message.Message) ([]*message.Message, error)) message.HandlerFunc {
	if fn == nil {
		panic(helper + ": the function is nil")
	}
	return func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		native := NativeTxFromContext(ctx)
		tx, ok := native.(T)
		if !ok {
			return nil, NoTxError(ctx, helper, reflect.TypeFor[T]().String(), native)
		}
		return fn(ctx, tx, msg)
	}
}

// NoTxError returns the error, wrapping ErrNoTx, that a handler helper named helper returns when ctx holds no
// transaction of the type want (its name, such as "pgx.Tx"). native is what NativeTxFromContext(ctx) returned.
// Adapter packages give it to their own helpers, as pgxinbox does, so that every helper explains the same way.
func NoTxError(ctx context.Context, helper, want string, native any) error {
	var why string
	c := claimOf(ctx)
	claimed := c != nil && c.tx != nil
	_, leased := LeaseFromContext(ctx)
	switch {
	case leased:
		why = "lease mode (WithLease) runs the handler outside any transaction: call the provider with " +
			"inbox.LeaseFromContext(ctx).IdempotencyKey() in a plain handler instead, or drop WithLease to write " +
			"the effect on the inbox's transaction"
	case native != nil:
		why = fmt.Sprintf("the inbox's transaction here is a %T, not a %s: use the helper of its package "+
			"(inbox.Handler for a *sql.Tx, pgxinbox.Handler for a pgx.Tx)", native, want)
	case claimed:
		why = "the inbox could not give the handler a view of the batch's transaction: it had ended (the handler ran " +
			"after its message was settled?) or the database refused to begin the view"
	default:
		why = "the handler runs outside the inbox's middleware: add inbox.Middleware (or pgxinbox.Middleware) to the " +
			"router or to this handler, inside any middleware that replaces the message's context"
	}
	return fmt.Errorf("%w: %s found no %s: %s", ErrNoTx, helper, want, why)
}
