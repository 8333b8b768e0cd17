package driver

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"sync"
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
func (p stdPool) BeginShared(ctx context.Context, opts TxOptions) (SharedTx, error) {
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

type ownerKey struct{}

type sharedTx struct {
	owner   stdTx // the inbox's: its statements, Commit and Rollback
	drv     sqldriver.Driver
	conn    *sql.Conn
	dc      sqldriver.Conn // conn's driver connection, held by the Raw call until release closes
	release chan struct{}
	held    chan error
	views   *sql.DB // whose connections are all dc (Connect)

	wire  sync.Mutex // one statement on dc at a time
	ends  func(error) bool
	lost  error // ErrTxEnded with the error that ended the server's transaction; guarded by wire
	mu    sync.Mutex
	real  sqldriver.Tx // the server's transaction, begun by the owner
	open  []*view
	ended bool
	// broken is set, before release is closed, when dc cannot serve another transaction.
	broken bool
}

var (
	_ SharedPool          = stdPool{}
	_ PoolLimit           = stdPool{}
	_ Identifier          = stdPool{}
	_ SharedTx            = (*sharedTx)(nil)
	_ sqldriver.Connector = (*sharedTx)(nil)
)

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

// View begins a view: a transaction of the private DB, which Connect and BeginTx below give the connection and
// a driver transaction that refuses to end anything.
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

type viewKey struct{}

// endViews closes every view, so that no handler's statement runs after the transaction's end.
func (s *sharedTx) endViews() {
	s.mu.Lock()
	open := s.open
	s.open, s.ended = nil, true
	s.mu.Unlock()
	for _, v := range open {
		v.finish()
	}
}

// end lets the connection go back to database/sql's pool once the transaction has ended.
func (s *sharedTx) end(err error) error {
	s.close()
	return txDone(err)
}

func (s *sharedTx) close() {
	_ = s.views.Close()
	if v, ok := s.dc.(sqldriver.Validator); ok && !v.IsValid() {
		s.broken = true // a statement cancelled on the wire, say
	}
	select {
	case <-s.release:
	default:
		close(s.release)
	}
	<-s.held
	s.held <- nil // a second close finds it at once
	_ = s.conn.Close()
}

// Connect gives the private DB a connection: dc, through a wrapper that knows which view uses it.
func (s *sharedTx) Connect(context.Context) (sqldriver.Conn, error) { return &viewConn{s: s}, nil }
func (s *sharedTx) Driver() sqldriver.Driver                        { return s.drv }

// view is one handler's *sql.Tx over the shared transaction (View).
type view struct {
	s      *sharedTx
	tx     *sql.Tx
	mu     sync.Mutex
	failed error
	closed bool        // its handler returned (Close): its statements are refused, its Rollback is the inbox's
	rows   []*viewRows // its results not yet closed
}

func (v *view) Native() any { return v.tx }

func (v *view) Failed() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.failed
}

func (v *view) fail(err error) {
	if err == nil || errors.Is(err, sqldriver.ErrSkip) {
		return
	}
	v.mu.Lock()
	if v.failed == nil {
		v.failed = err
	}
	v.mu.Unlock()
}

// Close ends the view when its handler returns. Its statements check closed with the wire held, so once Close has
// taken the wire no statement of the view runs again; the results the handler left open are closed, so that the
// next statement on the connection (a produced message's, another member's) does not meet an unread result.
// The view's *sql.Tx is rolled back, which ends nothing on the server (viewTx), when the shared transaction ends.
func (v *view) Close() {
	v.mu.Lock()
	v.closed = true
	v.mu.Unlock()
	if v.s == nil {
		return
	}
	v.s.wire.Lock()
	defer v.s.wire.Unlock()
	v.mu.Lock()
	open := v.rows
	v.rows = nil
	v.mu.Unlock()
	for _, r := range open {
		r.closeDriver()
	}
}

// finish ends the view's *sql.Tx with the shared transaction.
func (v *view) finish() {
	v.Close()
	if v.tx != nil {
		_ = v.tx.Rollback()
	}
}

// refused returns ErrTxEnded once the server ended the transaction, and ErrHandlerReturned once the view is
// closed; called with the wire held.
func (c *viewConn) refused() error {
	if c.s.lost != nil {
		return c.s.lost
	}
	if c.v != nil && c.v.closedByInbox() {
		return ErrHandlerReturned
	}
	return nil
}

// opened records rows as the view's until they are closed.
func (c *viewConn) opened(rows sqldriver.Rows) *viewRows {
	r := &viewRows{Rows: rows, c: c}
	if c.v != nil {
		c.v.mu.Lock()
		c.v.rows = append(c.v.rows, r)
		c.v.mu.Unlock()
	}
	return r
}

func (v *view) closedByInbox() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.closed
}

// viewConn is the private DB's connection: dc, for one transaction at a time, the owner's or a view's.
type viewConn struct {
	s *sharedTx
	v *view // the view whose transaction runs on it, nil for the owner's
}

var (
	_ sqldriver.ConnBeginTx        = (*viewConn)(nil)
	_ sqldriver.ConnPrepareContext = (*viewConn)(nil)
	_ sqldriver.ExecerContext      = (*viewConn)(nil)
	_ sqldriver.QueryerContext     = (*viewConn)(nil)
	_ sqldriver.NamedValueChecker  = (*viewConn)(nil)
)

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

// fail records err as the view's, and as the end of the transaction when the server ended it (TxOptions.Ends);
// called with the wire held, so that no statement runs between the error and the refusal of the next.
func (c *viewConn) fail(err error) error {
	if err == nil {
		return nil
	}
	if c.s.lost == nil && c.s.ends != nil && c.s.ends(err) {
		c.s.lost = fmt.Errorf("%w: %w", ErrTxEnded, err)
	}
	if c.v != nil {
		c.v.fail(err)
	}
	return err
}

func (c *viewConn) Prepare(query string) (sqldriver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *viewConn) PrepareContext(ctx context.Context, query string) (sqldriver.Stmt, error) {
	c.s.wire.Lock()
	defer c.s.wire.Unlock()
	if err := c.refused(); err != nil {
		return nil, err
	}
	var st sqldriver.Stmt
	var err error
	if p, ok := c.s.dc.(sqldriver.ConnPrepareContext); ok {
		st, err = p.PrepareContext(ctx, query)
	} else {
		st, err = c.s.dc.Prepare(query)
	}
	if err != nil {
		return nil, c.fail(err)
	}
	return &viewStmt{Stmt: st, c: c}, nil
}

func (c *viewConn) ExecContext(ctx context.Context, query string, args []sqldriver.NamedValue) (sqldriver.Result, error) {
	e, ok := c.s.dc.(sqldriver.ExecerContext)
	if !ok {
		return nil, sqldriver.ErrSkip
	}
	c.s.wire.Lock()
	defer c.s.wire.Unlock()
	if err := c.refused(); err != nil {
		return nil, err
	}
	res, err := e.ExecContext(ctx, query, args)
	return res, c.fail(err)
}

func (c *viewConn) QueryContext(ctx context.Context, query string, args []sqldriver.NamedValue) (sqldriver.Rows, error) {
	q, ok := c.s.dc.(sqldriver.QueryerContext)
	if !ok {
		return nil, sqldriver.ErrSkip
	}
	c.s.wire.Lock()
	defer c.s.wire.Unlock()
	if err := c.refused(); err != nil {
		return nil, err
	}
	rows, err := q.QueryContext(ctx, query, args)
	if err != nil {
		return nil, c.fail(err)
	}
	return c.opened(rows), nil
}

func (c *viewConn) CheckNamedValue(nv *sqldriver.NamedValue) error {
	if n, ok := c.s.dc.(sqldriver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return sqldriver.ErrSkip
}

// Close leaves dc open: the shared transaction gives it back to database/sql's pool.
func (c *viewConn) Close() error { return nil }

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
