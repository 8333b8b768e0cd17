package mysqlinbox_test

import (
	"context"
	"database/sql"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/mysqlinbox"
)

// The MySQL snippets of the README and of docs/guides/mariadb.md, verbatim, for the compiler (see the root's
// TestREADME_EverySnippetIsCompiledCode). The functions are compiled, never called.
func readmeMySQL(ctx context.Context, router *message.Router, sub message.Subscriber, amount, id int) error {
	db, _ := sql.Open("mysql", "app@tcp(db:3306)/app")
	if err := mysqlinbox.Database(db).Migrate(ctx); err != nil {
		return err
	}
	router.AddMiddleware(mysqlinbox.Middleware(db)) // or mysqlinbox.New(db, opts...) for the error
	router.AddConsumerHandler("wallet-credits", "deposits", sub, inbox.Handler(
		func(ctx context.Context, tx *sql.Tx, msg *message.Message) error {
			_, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance + ? WHERE id = ?", amount, id)
			return err
		}))
	return nil
}

func readmeMySQLShort(router *message.Router, sub message.Subscriber, credit func(context.Context, *sql.Tx, *message.Message) error) {
	db, _ := sql.Open("mysql", "app@tcp(db:3306)/app")
	router.AddMiddleware(mysqlinbox.Middleware(db))
	router.AddConsumerHandler("wallet-credits", "deposits", sub, inbox.Handler(credit)) // as on PostgreSQL
}

var (
	_ = readmeMySQL
	_ = readmeMySQLShort
)
