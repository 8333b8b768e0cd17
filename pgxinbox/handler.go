package pgxinbox

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	inbox "github.com/effectively-once/watermill-inbox"
)

// Handler adapts fn to a Watermill handler that runs fn on the inbox's pgx transaction, as TxFromContext returns it,
// so that fn's side effect commits with the message's inbox row:
//
//	router.AddMiddleware(pgxinbox.Middleware(pool))
//	router.AddConsumerHandler("wallet-credits", "deposits", sub, pgxinbox.Handler(credit))
//
// fn is never called without a transaction: when the context holds no pgx.Tx (the handler runs outside the inbox's
// middleware, in lease mode, or under a transaction of database/sql's), the handler returns an error wrapping
// inbox.ErrNoTx, which says why, and the router nacks the message. In batch mode (inbox.WithBatch) fn gets the
// batch's transaction as TxFromContext gives it, which in a batch of more than one message waits for its turn at
// fn's first statement. Handler panics if fn is nil.
func Handler(fn func(ctx context.Context, tx pgx.Tx, msg *message.Message) error) message.NoPublishHandlerFunc {
	return inbox.HandlerOf("pgxinbox.Handler", fn)
}

// ProducingHandler is Handler for a function that returns messages for the router to publish. The inbox stores
// them with the message's row, and a duplicate gets them again, each with the same UUID (see
// inbox.ProducedMessageUUID).
func ProducingHandler(fn func(ctx context.Context, tx pgx.Tx, msg *message.Message) ([]*message.Message, error)) message.HandlerFunc {
	return inbox.ProducingHandlerOf("pgxinbox.ProducingHandler", fn)
}
