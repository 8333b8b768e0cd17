// Package mysqlinbox runs the inbox on MySQL 8 or MariaDB 10.11 and later, over database/sql with
// github.com/go-sql-driver/mysql: the same transaction mode, lease mode, dead letters, produced messages, cleanup,
// stats, forget and migrations as on PostgreSQL, with the handler's transaction a *sql.Tx.
//
//	db, err := sql.Open("mysql", "app@tcp(db:3306)/app")
//	router.AddMiddleware(mysqlinbox.Middleware(db, inbox.WithConsumer("wallet-credits")))
//	router.AddConsumerHandler("wallet-credits", "deposits", sub, func(msg *message.Message) error {
//		tx, _ := inbox.TxFromContext(msg.Context())
//		_, err := tx.ExecContext(msg.Context(), "UPDATE accounts SET balance = balance + ? WHERE id = ?", amount, id)
//		return err
//	})
//
// The inbox's times are DATETIME values in UTC, read and written as such whatever the connection string's
// parseTime and loc. Everything else
// the inbox offers (Migrate, Cleanup, NewCleaner, ReadStats, Forget, Remembers) is a method of the
// *inbox.Database that Database returns.
//
// What differs from PostgreSQL:
//
//   - The inbox cannot join a subscriber's transaction (watermill-sql's MySQL subscriber): on PostgreSQL a claim
//     made in a transaction someone else commits is guarded by a deferred constraint trigger, which MySQL does not
//     have. New refuses WithSubscriberTx(true) and an inbox.OnDialect with joiners, with an error wrapping
//     inbox.ErrInvalidOption; the inbox then begins its own transaction for each message, as it does under any
//     other subscriber.
//   - Event IDs and consumer names are VARBINARY and compare byte for byte, as PostgreSQL's text does: at most
//     2000 bytes of ID and 512 of consumer name, the inbox's own limits. WithIDType(inbox.IDTypeUUID) is refused.
//   - The inbox's own short transactions run at READ COMMITTED; the handler's transaction runs at the level the
//     application chose (InnoDB's default is REPEATABLE READ), and the claim works under either.
//   - Deadlocks (1213) and lock wait timeouts (1205) of the inbox's short transactions are retried.
//   - MySQL cannot undo DDL: Migrate takes turns with a named lock (GET_LOCK) instead of a transaction, and its
//     statements are safe to run again after a failure half-way.
package mysqlinbox

import (
	"database/sql"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
)

// Database returns the MySQL database db reaches, for the inbox's operations.
func Database(db *sql.DB) *inbox.Database { return inbox.OnDialect(Dialect(), driver.StdSQL(db)) }

// New checks the options and returns an Inbox over db, as inbox.New does on PostgreSQL.
func New(db *sql.DB, opts ...inbox.Option) (*inbox.Inbox, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: db is nil", inbox.ErrInvalidOption)
	}
	return Database(db).New(opts...)
}

// Middleware returns a router middleware that applies each message at most once per consumer over db, as
// inbox.Middleware does on PostgreSQL. It panics, once and at construction, with an error wrapping
// inbox.ErrInvalidOption if an option is invalid; use New to get the error instead.
func Middleware(db *sql.DB, opts ...inbox.Option) message.HandlerMiddleware {
	i, err := New(db, opts...)
	if err != nil {
		panic(err)
	}
	return i.Middleware
}
