package batch

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// A member's view of the batch's transaction: what its handler finds in its context, the savepoint that lets its
// part roll back alone, and its hold on the batch's one connection.

// deferring is a transaction whose statements without arguments its pool holds back (driver.TxCaps.DeferExec):
// the store's savepoint statement, given this, waits for the member's first statement.
type deferring struct {
	driver.Tx
	deferExec func(tx driver.Tx, query string)
}

func (e deferring) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	if len(args) > 0 {
		return e.Tx.Exec(ctx, query, args...)
	}
	e.deferExec(e.Tx, query)
	return 0, nil
}

// hold takes the connection, once, setting the savepoint if withSavepoint. The connection stays taken until the
// member's part is settled (keep, undo). A member whose first statement was pipelined takes it on its next use,
// rolling back the statements of the members after it (see seize).
func (t *memberTx) hold(withSavepoint bool) {
	if t.pipelined {
		if err := t.b.seize(t, false); err != nil {
			t.b.breaks(fmt.Errorf("inbox: roll back the batch members after %s: %w", t.b.consumer, err))
		}
		return
	}
	t.once.Do(func() {
		t.b.q.learn(time.Since(t.start))
		t.b.atTurn.Add(1)
		t.b.asked.Add(1)
		<-t.b.ready
		t.b.acquire(t)
		if withSavepoint && !t.b.solo {
			if d := t.b.e.caps.DeferExec; d != nil {
				t.err = t.b.store.Savepoint(t.b.ctx, deferring{t.b.tx, d}, dialect.SetSavepoint)
				t.deferred = t.err == nil
			} else {
				t.err = t.b.store.Savepoint(t.b.ctx, t.b.tx, dialect.SetSavepoint)
			}
			t.savepoint = t.err == nil
		}
	})
}

// settle learns what became of a savepoint held back for the member's first statement: one that never went (the
// member ran no statement) marks nothing, and there is nothing to roll back; one the server refused is an error.
// Called with the connection held, before it is freed.
func (t *memberTx) settle() {
	if !t.deferred {
		return
	}
	t.deferred = false
	ran, err := t.b.e.caps.EndDeferred(t.b.tx)
	switch {
	case !ran:
		t.savepoint = false
	case err != nil:
		t.savepoint, t.err = false, fmt.Errorf("inbox: set a batch member's savepoint: %w", err)
	}
}

// unused reports whether the handler never used the transaction, and makes sure it no longer can take it.
func (t *memberTx) unused() bool {
	t.once.Do(func() {
		t.untouched = true
		t.b.q.learn(time.Since(t.start))
	})
	return t.untouched
}

// Native is what the member's handler gets from TxFromContext: a view of the batch's transaction whose Commit and
// Rollback return driver.ErrTxShared, when the adapter gives views (database/sql's and pgx's do). Once the handler
// has returned, a goroutine of its that asks gets a view that refuses every statement (driver.ErrHandlerReturned).
//
// A member view (driver.TxCaps.MemberView) takes the connection on its first use, through take; a view of a
// shared transaction (driver.TxCaps.View) is made with the connection taken.
func (t *memberTx) Native() any {
	caps := &t.b.e.caps
	if caps.MemberView == nil {
		if caps.View == nil {
			if t.hasReturned() {
				return nil // no view to refuse its statements: the goroutine finds no transaction
			}
			t.hold(true)
			return t.b.tx.Native()
		}
		if !t.hasReturned() {
			t.hold(true)
		}
	}
	t.vmu.Lock()
	defer t.vmu.Unlock()
	if t.view == nil {
		// A view made after the handler returned takes nothing; a batch of one pipelines nothing.
		t.takes, t.pipes = !t.returned, !t.returned && t.b.pipe
		if t.view = openView(t.b.ctx, caps, t.b.tx, t, t.returned); t.view == nil {
			return nil // the handler finds no transaction, and fails
		}
	}
	return t.view.Native()
}

var _ driver.Member = (*memberTx)(nil)

// First is the member's first statement, as its view (driver.TxCaps.MemberView) runs it: pipelined with the other
// members' in a batch with a pipe, and not at all (ran false) otherwise.
func (t *memberTx) First(ctx context.Context, sql string, args []any) (res any, ran bool, err error) {
	if !t.pipes {
		return nil, false, nil
	}
	return t.first(ctx, sql, args)
}

// Take is the view's use of the transaction other than a first statement with arguments: it takes the connection.
func (t *memberTx) Take() {
	if t.takes {
		t.hold(true)
	}
}

// openView makes the view of tx that a handler gets, as caps can: a member view (MemberView) whose statements go
// through member, or else a view of a shared transaction (View). It returns nil when caps give no view, or the view
// could not begin. A view made after its handler returned (returned) is closed at once: it refuses every statement.
func openView(ctx context.Context, caps *driver.TxCaps, tx driver.Tx, member driver.Member, returned bool) driver.View {
	var v driver.View
	switch {
	case caps.MemberView != nil:
		v = caps.MemberView(tx, member)
	case caps.View != nil:
		var err error
		if v, err = caps.View(ctx, tx); err != nil {
			return nil
		}
	default:
		return nil
	}
	if returned {
		v.Close()
	}
	return v
}

func (t *memberTx) hasReturned() bool {
	t.vmu.Lock()
	defer t.vmu.Unlock()
	return t.returned
}

// end marks the handler returned, and closes its view: it waits for a statement that a goroutine of the handler's
// runs on it, refuses every later one, and closes the results the handler left open. The batch settles the
// member's part after this, so no statement of the handler's lands after its savepoint was rolled back, or in
// another member's part.
func (t *memberTx) end() {
	t.vmu.Lock()
	t.returned = true
	v := t.view
	t.vmu.Unlock()
	if v != nil {
		v.Close()
	}
}

// lone is the member of a view whose statements are never pipelined and that takes nothing: the view of a message
// that goes alone in batch mode.
type lone struct{}

func (lone) First(context.Context, string, []any) (any, bool, error) { return nil, false, nil }
func (lone) Take()                                                   {}

// failed returns the first error of the member's statements, if one failed: its first pipelined statement's, or
// one its view recorded. nil when none failed or the adapter gives no views.
func (t *memberTx) failed() error {
	if t.pipelined && t.resErr != nil {
		return t.resErr
	}
	t.vmu.Lock()
	defer t.vmu.Unlock()
	if t.view != nil {
		return t.view.Failed()
	}
	return nil
}

func (t *memberTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	t.hold(true)
	return t.b.tx.Exec(ctx, query, args...)
}

func (t *memberTx) QueryRow(ctx context.Context, query string, args ...any) driver.Row {
	t.hold(true)
	return t.b.tx.QueryRow(ctx, query, args...)
}

func (t *memberTx) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	t.hold(true)
	return t.b.tx.Query(ctx, query, args...)
}

func (t *memberTx) Commit(context.Context) error   { return driver.ErrTxShared }
func (t *memberTx) Rollback(context.Context) error { return driver.ErrTxShared }

// acquire takes the connection for t, the member's first use of the transaction that is not pipelined.
func (b *batch) acquire(t *memberTx) {
	if !b.pipe {
		b.conn.Lock()
		return
	}
	l := &b.line
	l.mu.Lock()
	defer l.mu.Unlock()
	t.alone = true
	l.join(t)
	b.waitUntil(t, func() bool { return l.holder == t })
}

// AloneView is, in batch mode, what the handler of a message that goes alone gets from the inbox's TxFromContext
// instead of its transaction's own native one: a view that refuses Commit and Rollback, as a batch member's does,
// so that a handler meets the same rule whether its message was batched or not; and that, as a member's, refuses
// every statement once the handler returned (End).
type AloneView struct {
	caps   *driver.TxCaps
	tx     driver.Tx
	mu     sync.Mutex
	made   bool
	view   driver.View
	native any
	ended  bool
}

// NewAloneView returns the view of tx, a transaction of the pool whose caps these are, or nil when the pool's
// transactions give none: database/sql's shared ones (driver.TxCaps.View) and pgx's (MemberView) do. caps are
// the Database's, found once; the view keeps the pointer.
func NewAloneView(caps *driver.TxCaps, tx driver.Tx) *AloneView {
	if caps.MemberView == nil && caps.View == nil {
		return nil
	}
	return &AloneView{caps: caps, tx: tx}
}

// Tx returns the transaction v views.
func (v *AloneView) Tx() driver.Tx { return v.tx }

// Native returns the view's native transaction, made on the first call; nil when the adapter could not make one.
func (v *AloneView) Native(ctx context.Context) any {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.made {
		v.made = true
		if v.view = openView(ctx, v.caps, v.tx, lone{}, v.ended); v.view != nil {
			v.native = v.view.Native()
		}
	}
	return v.native
}

// End is called when the handler returns: the view closes the results the handler left open and refuses every
// later statement (driver.ErrHandlerReturned), before the inbox writes the produced messages and commits.
func (v *AloneView) End() {
	v.mu.Lock()
	v.ended = true
	view := v.view
	v.mu.Unlock()
	if view != nil {
		view.Close()
	}
}
