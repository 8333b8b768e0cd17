package inbox

import (
	"context"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"

	"github.com/effectively-once/watermill-inbox/driver"
)

// SQLv3Joiner finds watermill-sql v3's subscriber transaction in a message's context, so that the inbox applies
// the message in the transaction that also moves the subscriber's offset: the offset, the inbox row and the
// handler's effect commit together. The inbox over database/sql (New, Middleware and OnSQL) joins it by
// default; give it to On beside other joiners (pgxinbox.SQLv4Joiner for v4) when building a Database
// by hand.
func SQLv3Joiner() driver.Joiner {
	return driver.JoinerFunc(func(ctx context.Context) (driver.Tx, bool) {
		if tx, ok := wsql.TxFromContext(ctx); ok && tx != nil {
			return driver.StdSQLTx(tx), true
		}
		return nil, false
	})
}
