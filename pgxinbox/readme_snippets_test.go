package pgxinbox_test

import (
	"context"
	stdsql "database/sql"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql" // named sql, as in the README
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
)

// The pgx snippets of the README and of docs/guides/pgx.md, verbatim, for the compiler (see the root's TestREADME_EverySnippetIsCompiledCode).
// The functions are compiled, never called.

func readmePgx(ctx context.Context, dsn string, router *message.Router, sub message.Subscriber, amount, id int) error {
	pool, _ := pgxpool.New(ctx, dsn)
	db := pgxinbox.Database(pool) // Migrate, Cleanup, NewCleaner, ReadStats, Forget, Remembers
	if err := db.Migrate(ctx); err != nil {
		return err
	}

	router.AddMiddleware(pgxinbox.Middleware(pool)) // or pgxinbox.New(pool, opts...) for the error
	router.AddConsumerHandler("wallet-credits", "deposits", sub, func(msg *message.Message) error {
		tx, _ := pgxinbox.TxFromContext(msg.Context()) // a pgx.Tx
		_, err := tx.Exec(msg.Context(), "UPDATE accounts SET balance = balance + $1 WHERE id = $2", amount, id)
		return err
	})
	return nil
}

func readmeSQLv4(router *message.Router, db *stdsql.DB, subscriberConfig sql.SubscriberConfig, logger watermill.LoggerAdapter,
	opts ...inbox.Option) error {
	sub, _ := sql.NewSubscriber(sql.BeginnerFromStdSQL(db), subscriberConfig, logger) // watermill-sql/v4
	ib, err := inbox.On(driver.StdSQL(db), pgxinbox.SQLv4Joiner()).New(opts...)
	if err != nil {
		return err
	}
	router.AddMiddleware(ib.Middleware)
	router.AddConsumerHandler("wallet-credits", "deposits", sub, func(*message.Message) error { return nil })
	return nil
}

func readmePgxShort(ctx context.Context, dsn string, router *message.Router, msg *message.Message) {
	pool, _ := pgxpool.New(ctx, dsn)
	router.AddMiddleware(pgxinbox.Middleware(pool))
	// in the handler:
	tx, _ := pgxinbox.TxFromContext(msg.Context()) // a pgx.Tx
	_ = tx
}

var (
	_ = readmePgx
	_ = readmePgxShort
	_ = readmeSQLv4
)
