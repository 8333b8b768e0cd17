package driver

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
)

// A shared transaction over database/sql is batch mode's, and every mode's on a server that can end a transaction
// under a failed statement (TxOptions.Ends): one transaction that the handlers of one or several messages
// use, each through a *sql.Tx of its own (a view) whose Commit and Rollback return ErrTxShared and leave the
// transaction as it was. A *sql.Tx cannot be told to refuse its Commit, and once Commit is called it is done
// whatever its driver answered; so each view is a transaction of a private *sql.DB whose every connection is the
// one driver connection the shared transaction runs on, and whose transactions begin nothing on the server.
//
// The driver connection is taken from the pool with sql.Conn.Raw, whose callback holds it until the shared
// transaction ends. The inbox's own statements go through the owner, a *sql.Tx of the same private DB whose Commit
// and Rollback are the server's. The inbox lets one view use the connection at a time (internal/batch); the private DB
// adds a lock of its own so that a handler that goes on using its view after it returned cannot interleave with
// another's statement on the wire.

// BeginShared begins a shared transaction on a connection of p's (SharedPool).
func (p stdPool) BeginShared(ctx context.Context, opts TxOptions) (Tx, error) {
	if p.db == nil {
		return nil, errNilDB
	}
	conn, err := p.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	s := &sharedTx{drv: p.db.Driver(), conn: conn, release: make(chan struct{}), held: make(chan error, 1), ends: opts.Ends}
	got := make(chan any, 1)
	go func() {
		s.held <- conn.Raw(func(dc any) error {
			got <- dc
			<-s.release
			if s.broken {
				return sqldriver.ErrBadConn // database/sql's pool closes it instead of handing it out again
			}
			return nil
		})
	}()
	select {
	case dc := <-got:
		s.dc = dc.(sqldriver.Conn)
	case err := <-s.held:
		_ = conn.Close()
		return nil, err
	}
	s.views = sql.OpenDB(s)
	o := &sql.TxOptions{ReadOnly: opts.ReadOnly}
	if opts.ReadCommitted {
		o.Isolation = sql.LevelReadCommitted
	}
	// The owner's *sql.Tx ignores ctx's end, which would have database/sql roll it back from a goroutine of its
	// own while the inbox may be running a statement on the one connection; the inbox ends it itself, and BEGIN
	// runs with ctx (ownerKey's value).
	tx, err := s.views.BeginTx(context.WithValue(context.WithoutCancel(ctx), ownerKey{}, ctx), o)
	if err != nil {
		s.close()
		return nil, err
	}
	s.owner.tx = tx
	return s, nil
}

var (
	_ SharedPool          = stdPool{}
	_ TxCapser            = stdPool{}
	_ PoolLimit           = stdPool{}
	_ Identifier          = stdPool{}
	_ sqldriver.Connector = (*sharedTx)(nil)
)

// TxCaps tells what p's transactions can do beyond Tx (TxCapser): those BeginShared begins give each handler a
// view of its own.
func (stdPool) TxCaps() TxCaps { return TxCaps{View: viewOf} }

// errNotShared is what viewOf answers for a transaction that BeginShared did not begin.
var errNotShared = errors.New("driver: a view is only of a transaction that BeginShared began")

// viewOf is the View of a stdPool's TxCaps.
func viewOf(ctx context.Context, tx Tx) (View, error) {
	s, ok := tx.(*sharedTx)
	if !ok {
		return nil, errNotShared
	}
	return s.View(ctx)
}

func (s *sharedTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	return s.owner.Exec(ctx, query, args...)
}
func (s *sharedTx) QueryRow(ctx context.Context, query string, args ...any) Row {
	return s.owner.QueryRow(ctx, query, args...)
}
func (s *sharedTx) Query(ctx context.Context, query string, args ...any) (Rows, error) {
	return s.owner.Query(ctx, query, args...)
}
func (s *sharedTx) Native() any { return s.owner.tx }

// Commit commits, unless ctx has ended: the transaction is then rolled back, as database/sql's own are.
func (s *sharedTx) Commit(ctx context.Context) error {
	s.endViews()
	if err := ctx.Err(); err != nil {
		_ = s.end(s.owner.tx.Rollback())
		return err
	}
	return s.end(s.owner.tx.Commit())
}
func (s *sharedTx) Rollback(context.Context) error {
	s.endViews()
	return s.end(s.owner.tx.Rollback())
}

// View begins a view: a transaction of the private DB, which Connect below and viewConn's BeginTx
// (stdsql_shared_tx.go) give the connection and a driver transaction that refuses to end anything.
func (s *sharedTx) View(ctx context.Context) (View, error) {
	v := &view{s: s}
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return nil, ErrTxDone
	}
	s.open = append(s.open, v)
	s.mu.Unlock()
	tx, err := s.views.BeginTx(context.WithValue(context.WithoutCancel(ctx), viewKey{}, v), nil)
	if err != nil {
		return nil, err
	}
	v.tx = tx
	return v, nil
}

// Connect gives the private DB a connection: dc, through a wrapper that knows which view uses it.
func (s *sharedTx) Connect(context.Context) (sqldriver.Conn, error) { return &viewConn{s: s}, nil }
func (s *sharedTx) Driver() sqldriver.Driver                        { return s.drv }
