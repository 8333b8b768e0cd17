package driver

import (
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"sync"
)

// The state of a shared transaction (stdsql_shared.go): the driver connection it holds, the server's transaction,
// its views and the results they left open, and what ends them.

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

// viewRows are the rows of a view's query, whose error while reading counts as its view's. The column type
// interfaces are passed on when the driver's rows have them.
type viewRows struct {
	sqldriver.Rows
	c      *viewConn
	closed bool // guarded by the wire
}

// closeDriver closes the driver's rows once; called with the wire held.
func (r *viewRows) closeDriver() error {
	if r.closed {
		return nil
	}
	r.closed = true
	return r.Rows.Close()
}
