package batch

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/effectively-once/watermill-inbox/dialect"
)

// A member's part in its batch: run its handler, keep what it produced or give its claim back, free the
// connection, and wait for the batch's commit.

// apply runs m's handler in the batch, settles its part of the transaction, and waits for the commit.
func (b *batch) apply(m *member) ([]*message.Message, error) {
	t := &m.tx
	t.b, t.start = b, time.Now()
	if b.pipe {
		t.wake = m.signals
	}
	panicked := true
	defer func() {
		if panicked { // give back the claim and the effect, then let the panic go on
			t.end()
			b.giveBack(m, t, errPanicked)
		}
	}()
	produced, err := m.msg.Run(t)
	panicked = false
	t.end() // from here on the member's view refuses statements: its part is settled below
	if err == nil {
		err = b.keep(m, t, produced)
	} else {
		b.giveBack(m, t, err)
	}
	if err != nil {
		return nil, m.msg.Failed(b.store.Explain(err)) // the handler's statements meet a pooler as the inbox's do
	}
	out := m.await(signalCommit).out
	return m.msg.CommitEnded(out.start, out.err, produced)
}

// errPanicked is the cause a member whose handler panicked gives its claim back with.
var errPanicked = errors.New("inbox: the handler panicked")

// keep stores what m's handler produced; when the database refuses the produced messages, it gives the claim back
// instead, and reports why.
func (b *batch) keep(m *member, t *memberTx, produced []*message.Message) error {
	raw, err := m.msg.Encode(produced)
	if err == nil && raw == nil && t.unused() {
		b.atTurn.Add(1)
		if b.pipe {
			b.line.arrive()
		}
		b.finished(m) // nothing to write, and the handler wrote nothing: the connection is not needed
		return nil
	}
	failed := t.failed()
	if raw != nil || !t.pipelined || failed != nil {
		t.hold(raw != nil) // a savepoint around the produced messages, should the database refuse them
	}
	if err == nil && t.err != nil {
		err = t.err
	}
	if err == nil && failed != nil {
		err = b.swallowed(m, failed)
	}
	if err == nil {
		err = b.store.SaveProduced(b.ctx, b.tx, b.consumer, m.id, raw)
	}
	if t.settle(); err == nil && t.err != nil {
		err = t.err
	}
	if err != nil {
		b.undo(m, t)
		b.finished(nil)
		return err
	}
	// The savepoint is left as it is, not released: the next member's, of the same name, hides it, and a rollback
	// goes to the newest (a pipelined member's has a name of its own, its seat's). Releasing it would cost a round
	// trip per message and free nothing, since PostgreSQL keeps a released subtransaction's ID with the
	// transaction anyway.
	b.release(t)
	b.finished(m)
	return nil
}

// swallowed finds out, for a member whose handler returned nil although one of its statements failed, whether the
// failure left the transaction unusable: on PostgreSQL a failed statement aborts the transaction unless the handler
// rolled back to a savepoint of its own, and every statement after it fails, the next member's and the commit
// included. A read of the member's claim tells, at a round trip that only such a member pays. An error means the
// member's part is to be rolled back and its message nacked, alone, as per-message mode would: its commit would
// fail. A claim the read does not find means the database rolled back the whole transaction (MariaDB does on a
// deadlock), and the batch fails.
func (b *batch) swallowed(m *member, failed error) error {
	held, err := b.store.Holds(b.ctx, b.tx, b.consumer, m.id)
	switch {
	case err == nil && held:
		return nil // the handler recovered from its statement's failure
	case err == nil:
		err = fmt.Errorf("inbox: the batch's transaction was rolled back by the database after %s/%s's statement failed: %w",
			b.consumer, m.id, failed)
		b.breaks(err)
		return err
	}
	return fmt.Errorf("inbox: the handler of %s/%s returned nil after a statement on its transaction failed (%w), "+
		"which left the transaction unusable (%v): its part of the batch is rolled back and the message nacked; "+
		"return the statement's error, or roll back to a savepoint of the handler's own", b.consumer, m.id, failed, err)
}

// giveBack rolls back m's effect and claim after its handler failed with cause.
func (b *batch) giveBack(m *member, t *memberTx, cause error) {
	t.hold(false)
	b.undo(m, t)
	b.finished(nil)
	b.e.cfg.Logger.Debug("Inbox gave back a failed message's claim in its batch", m.msg.LogFields().
		Add(watermill.LogFields{"error": cause.Error()}))
}

// undo rolls back to m's savepoint and deletes its claim, then frees the connection. Called with the connection
// held. A statement that fails here leaves the transaction unusable, and the whole batch is rolled back.
func (b *batch) undo(m *member, t *memberTx) {
	defer b.release(t)
	t.settle()
	if b.solo {
		return // the batch rolls back, having no member that succeeded
	}
	if t.pipelined {
		if err := b.rewind(t); err != nil {
			b.breaks(fmt.Errorf("inbox: roll back to the savepoint of %s/%s: %w", b.consumer, m.id, err))
			return
		}
	} else if t.savepoint {
		if err := b.store.Savepoint(b.ctx, b.tx, dialect.RollbackSavepoint); err != nil {
			b.breaks(fmt.Errorf("inbox: roll back to the savepoint of %s/%s: %w", b.consumer, m.id, err))
			return
		}
	} else if t.err != nil {
		b.breaks(t.err)
		return
	}
	if err := b.store.Unclaim(b.ctx, b.tx, b.consumer, m.id); err != nil {
		b.breaks(err)
	}
}

// release frees the connection once t's part is settled; with a pipe, t leaves the line and the next member heads it.
// Its view is closed first, so that its handler, done, cannot use the transaction after it.
func (b *batch) release(t *memberTx) {
	defer b.released()
	t.end()
	if !b.pipe {
		b.conn.Unlock()
		return
	}
	l := &b.line
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holder == t {
		l.holder, l.busy = nil, false
	}
	l.order = slices.DeleteFunc(l.order, func(u *memberTx) bool { return u == t })
	if l.failed == t {
		l.failed = nil
	}
	l.next()
}

// finished counts a member's handler out, adding it to the ones waiting for the commit when it succeeded (m not
// nil); the last one lets the batch end.
func (b *batch) finished(m *member) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if m != nil {
		b.ok = append(b.ok, m)
	}
	if b.left--; b.left == 0 {
		close(b.done)
	}
}
