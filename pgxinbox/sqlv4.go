package pgxinbox

import (
	"context"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"

	"github.com/effectively-once/watermill-inbox/driver"
)

// SQLv4Joiner finds the transaction of watermill-sql v4's subscriber in a message's context, for the inbox to join
// instead of beginning its own, over either of v4's adapters: database/sql (BeginnerFromStdSQL) or pgx
// (BeginnerFromPgx). Database joins it already; a database/sql user of v4 passes it to inbox.On:
//
//	db := inbox.On(driver.StdSQL(sqlDB), pgxinbox.SQLv4Joiner())
//
// The handler then reaches the subscriber's transaction as its adapter has it: a *sql.Tx from inbox.TxFromContext,
// or a pgx.Tx from TxFromContext. The adapter must be of the inbox's own client library (BeginnerFromStdSQL under an
// inbox over database/sql, BeginnerFromPgx under one over pgx): the inbox holds a message whose transaction its
// handlers could not reach back, with an error wrapping inbox.ErrInvalidOption, instead of running the handler
// without one. The subscriber commits it after the ack, or on its own terms (see WithSubscriberTx in the inbox
// package for how the inbox guards against that).
func SQLv4Joiner() driver.Joiner { return driver.JoinerFunc(joinV4) }

// joinV4 unwraps the transaction of either adapter, by value or by pointer, and finds none in a nil one.
func joinV4(ctx context.Context) (driver.Tx, bool) {
	tx, _ := wsql.TxFromContext(ctx)
	switch t := tx.(type) {
	case *wsql.StdSQLTx:
		if t != nil && t.Tx != nil {
			return driver.StdSQLTx(t.Tx), true
		}
	case wsql.StdSQLTx:
		if t.Tx != nil {
			return driver.StdSQLTx(t.Tx), true
		}
	case *wsql.PgxTx:
		if t != nil && t.Tx != nil {
			return Tx(t.Tx), true
		}
	case wsql.PgxTx:
		if t.Tx != nil {
			return Tx(t.Tx), true
		}
	}
	return nil, false
}
