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
	router.AddConsumerHandler("wallet-credits", "deposits", sub, func(msg *message.Message) error {
		tx, _ := inbox.TxFromContext(msg.Context())
		_, err := tx.ExecContext(msg.Context(), "UPDATE accounts SET balance = balance + ? WHERE id = ?", amount, id)
		return err
	})
	return nil
}

func readmeMySQLShort(router *message.Router, msg *message.Message) {
	db, _ := sql.Open("mysql", "app@tcp(db:3306)/app")
	router.AddMiddleware(mysqlinbox.Middleware(db))
	// in the handler, as on PostgreSQL:
	tx, _ := inbox.TxFromContext(msg.Context())
	_ = tx
}

var (
	_ = readmeMySQL
	_ = readmeMySQLShort
)
