// Package sqlv3inbox joins the inbox to the subscriber transaction of watermill-sql v3: a message read by that
// subscriber is applied in the transaction that also moves the subscriber's offset, so the offset, the inbox row
// and the handler's effect commit together.
//
//	router.AddMiddleware(sqlv3inbox.Middleware(db)) // instead of inbox.Middleware(db)
//
// It is a package of its own so that importing the inbox does not bring watermill-sql v3, and through its tests
// its database drivers, to a program that does not read from that subscriber. Messages from other subscribers go
// through the same middleware unchanged: the inbox begins its own transaction for them.
package sqlv3inbox

import (
	"context"
	"database/sql"
	"fmt"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
)

// Joiner finds watermill-sql v3's subscriber transaction in a message's context, for inbox.On. Give it with other
// joiners (pgxinbox's, for watermill-sql v4) when messages may come from either.
func Joiner() driver.Joiner { return joiner{} }

type joiner struct{}

func (joiner) Joined(ctx context.Context) (driver.Tx, bool) {
	tx, ok := wsql.TxFromContext(ctx)
	if !ok || tx == nil {
		return nil, false
	}
	return driver.StdSQLTx(tx), true
}

// Database returns the PostgreSQL database db reaches, joining watermill-sql v3's subscriber transaction, for the
// inbox's operations (Migrate, Cleanup, ReadStats ...), which behave as the package-level functions of inbox do.
func Database(db *sql.DB) *inbox.Database { return inbox.On(driver.StdSQL(db), Joiner()) }

// New checks the options and returns an Inbox over db that joins watermill-sql v3's subscriber transaction.
func New(db *sql.DB, opts ...inbox.Option) (*inbox.Inbox, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: the database is nil", inbox.ErrInvalidOption)
	}
	return Database(db).New(opts...)
}

// Middleware is inbox.Middleware joining watermill-sql v3's subscriber transaction. It panics, once and at
// construction, with an error wrapping inbox.ErrInvalidOption if an option is invalid; use New to get the error.
func Middleware(db *sql.DB, opts ...inbox.Option) message.HandlerMiddleware {
	i, err := New(db, opts...)
	if err != nil {
		panic(err)
	}
	return i.Middleware
}
