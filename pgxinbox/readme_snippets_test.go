package pgxinbox_test

import (
	"context"
	stdsql "database/sql"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql" // named sql, as in the README
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
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
	router.AddConsumerHandler("wallet-credits", "deposits", sub, pgxinbox.Handler(
		func(ctx context.Context, tx pgx.Tx, msg *message.Message) error {
			_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + $1 WHERE id = $2", amount, id)
			return err
		}))
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

func readmePgxShort(ctx context.Context, dsn string, router *message.Router, sub message.Subscriber,
	credit func(context.Context, pgx.Tx, *message.Message) error) {
	pool, _ := pgxpool.New(ctx, dsn)
	router.AddMiddleware(pgxinbox.Middleware(pool))
	router.AddConsumerHandler("wallet-credits", "deposits", sub, pgxinbox.Handler(credit)) // credit gets a pgx.Tx
}

var (
	_ = readmePgx
	_ = readmePgxShort
	_ = readmeSQLv4
)
