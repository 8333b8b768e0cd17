package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/effectively-once/watermill-inbox/driver"
)

// ErrNoTx reports a handler built with Handler or ProducingHandler (or pgxinbox's) that found no transaction of its
// kind in its message's context, so its function was not called: the error says why and what to do. It is a fault
// of the wiring, so retrying the message cannot mend it: under the inbox's middleware the message is held back for
// the reject delay, as for other configuration faults, and IsPermanent reports true.
var ErrNoTx = errors.New("inbox: no inbox transaction in the message's context")

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
	if fn == nil {
		panic("inbox: Handler: the function is nil")
	}
	return func(msg *message.Message) error {
		ctx := msg.Context()
		tx, err := handlerTx(ctx, "inbox.Handler")
		if err != nil {
			return err
		}
		return fn(ctx, tx, msg)
	}
}

// ProducingHandler is Handler for a function that returns messages for the router to publish. The inbox stores
// them with the message's row, and a duplicate gets them again, each with the same UUID (see ProducedMessageUUID).
func ProducingHandler(fn func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error)) message.HandlerFunc {
	if fn == nil {
		panic("inbox: ProducingHandler: the function is nil")
	}
	return func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		tx, err := handlerTx(ctx, "inbox.ProducingHandler")
		if err != nil {
			return nil, err
		}
		return fn(ctx, tx, msg)
	}
}

func handlerTx(ctx context.Context, helper string) (*sql.Tx, error) {
	native := NativeTxFromContext(ctx)
	if tx, ok := native.(*sql.Tx); ok {
		return tx, nil
	}
	return nil, NoTxError(ctx, helper, "*sql.Tx", native)
}

// NoTxError returns the error, wrapping ErrNoTx, that a handler helper named helper returns when ctx holds no
// transaction of the type want (its name, such as "pgx.Tx"). native is what NativeTxFromContext(ctx) returned.
// Adapter packages give it to their own helpers, as pgxinbox does, so that every helper explains the same way.
func NoTxError(ctx context.Context, helper, want string, native any) error {
	var why string
	_, claimed := ctx.Value(txKey).(driver.Tx)
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
