package driver

import (
	"context"
	sqldriver "database/sql/driver"
	"errors"
)

// The transactions of a shared transaction's private DB (stdsql_shared.go): the owner's is the server's, which the
// inbox ends; a view's begins and ends nothing on the server.

// ownerKey is the context key of the owner's BeginTx: its value is the context BEGIN runs with.
type ownerKey struct{}

// viewKey is the context key of a view's BeginTx: its value is the view.
type viewKey struct{}

var _ sqldriver.ConnBeginTx = (*viewConn)(nil)

func (c *viewConn) Begin() (sqldriver.Tx, error) {
	return c.BeginTx(context.Background(), sqldriver.TxOptions{})
}

// BeginTx begins the server's transaction for the owner, and nothing for a view.
func (c *viewConn) BeginTx(ctx context.Context, opts sqldriver.TxOptions) (sqldriver.Tx, error) {
	if v, ok := ctx.Value(viewKey{}).(*view); ok {
		c.v = v
		return viewTx{v}, nil
	}
	begin, ok := ctx.Value(ownerKey{}).(context.Context)
	if !ok {
		return nil, errors.New("driver: a shared transaction's connection begins only its owner and its views")
	}
	c.v = nil
	c.s.wire.Lock()
	defer c.s.wire.Unlock()
	var tx sqldriver.Tx
	var err error
	if b, ok := c.s.dc.(sqldriver.ConnBeginTx); ok {
		tx, err = b.BeginTx(begin, opts)
	} else {
		//lint:ignore SA1019 a driver without BeginTx has only Begin
		tx, err = c.s.dc.Begin()
	}
	if err != nil {
		return nil, err
	}
	c.s.real = tx
	return ownerTx{c.s}, nil
}

// ownerTx is the server's transaction, which the inbox commits or rolls back.
type ownerTx struct{ s *sharedTx }

// Commit commits the server's transaction, unless the server ended it: COMMIT would then succeed on nothing, and
// the inbox would ack a message whose claim is gone, so it rolls back what ran since (nothing in autocommit) and
// returns ErrTxEnded.
func (t ownerTx) Commit() error {
	t.s.wire.Lock()
	defer t.s.wire.Unlock()
	if t.s.lost != nil {
		_ = t.s.real.Rollback()
		return t.s.lost
	}
	return t.s.real.Commit()
}

func (t ownerTx) Rollback() error {
	t.s.wire.Lock()
	defer t.s.wire.Unlock()
	return t.s.real.Rollback()
}

// viewTx is a view's transaction: ending it ends nothing on the server.
type viewTx struct{ v *view }

func (t viewTx) Commit() error { return ErrTxShared }

func (t viewTx) Rollback() error {
	if t.v.closedByInbox() {
		return nil
	}
	return ErrTxShared
}
