package batch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// A batch's life: begin, claim, run the handlers, commit once, and tell the members.

// batch is one transaction that the messages it claimed share.
type batch struct {
	e        *Engine
	store    Store
	q        *queue
	consumer string
	tx       driver.Tx
	ctx      context.Context // the batch's own: no member's context ends it

	conn sync.Mutex // the transaction's one connection: one member at a time (without pipe)
	// solo is a batch of one: its member needs no savepoint, since a failure rolls back the whole transaction,
	// which holds nothing else. A lone message so costs what it costs without batching.
	solo bool
	// pipe, when the transaction can pipeline (pgx's) and the batch has more than one member, sends the members'
	// first statements together, and line orders the members on the connection instead of conn.
	pipe driver.Pipeliner
	line line
	// shared, over database/sql, gives each member a *sql.Tx of its own over the transaction (driver.SharedTx),
	// which refuses the handler's Commit and Rollback, as pgx's member views do.
	shared driver.SharedTx
	seats  atomic.Int32 // members that asked for their native transaction, numbering their savepoints

	ready   chan struct{} // closed when the members may use the connection (formed, passTurn)
	members int           // claimed members
	atTurn  atomic.Int32  // members that wait for the turn, or finished without needing it
	// gather is how many members the batch's first pipeline waits for (see admit and send), until gatherBy
	// when that is set. Set before ready closes.
	gather   int
	gatherBy time.Time
	admitted bool         // ready is closed; guarded by the queue's mu
	turnHeld *heldTurn    // the turn it was admitted with; guarded by the queue's mu
	asked    atomic.Int32 // members that asked for the connection and have not released it
	late     atomic.Bool  // it has held its turn for turnBound (see hold)

	mu     sync.Mutex
	left   int       // claimed members still running their handler
	ok     []*member // members whose handler succeeded, waiting for the commit
	broken error     // what left the transaction unusable, if anything did
	done   chan struct{}
}

// run begins the batch's transaction, claims its members' IDs, waits for their handlers, and commits. The slot
// frees when the last handler is done, before the commit: the next batch forms and begins while this one commits.
// That cannot deadlock, since a committing batch waits for no lock: the next batch may wait for this one's rows and
// claims (a copy of an ID it claimed then finds the row there, and goes on as a duplicate), never the reverse.
func (q *queue) run(members []*member) {
	formed, slotHeld := false, true
	defer func() {
		if !formed {
			q.formed(nil)
		}
		if slotHeld {
			q.ended(nil)
		}
	}()
	e := q.e
	ctx := context.WithoutCancel(members[0].ctx)
	goAlone := func(ms []*member) {
		for _, m := range ms {
			m.turn <- nil
		}
	}
	tx, err := e.cfg.Begin(ctx)
	if err != nil {
		goAlone(members) // each finds out for itself, and is nacked with its own error
		return
	}
	slices.SortFunc(members, func(a, b *member) int { return strings.Compare(a.id, b.id) })
	ids := make([]string, len(members))
	for n, m := range members {
		ids[n] = m.id
	}
	claimed, err := e.cfg.Store.ClaimBatch(ctx, tx, q.consumer, ids)
	if err != nil {
		e.cfg.Logger.Debug("Inbox batch claim failed; its messages go on one by one", watermill.LogFields{
			"consumer": q.consumer, "messages": len(members), "error": err.Error()})
		_ = tx.Rollback(ctx)
		goAlone(members)
		return
	}
	owned := make(map[string]bool, len(claimed))
	for _, id := range claimed {
		owned[id] = true
	}
	if len(claimed) < len(members) {
		if err := q.readFinished(ctx, tx, members, owned); err != nil {
			e.cfg.Logger.Debug("Inbox batch could not read the rows its claim found; its messages go on one by one",
				watermill.LogFields{"consumer": q.consumer, "messages": len(members), "error": err.Error()})
			_ = tx.Rollback(ctx)
			goAlone(members)
			return
		}
	}
	b := &batch{e: e, store: e.cfg.Store, q: q, consumer: q.consumer, tx: tx, ctx: ctx, left: len(claimed), members: len(claimed), solo: len(claimed) == 1,
		done: make(chan struct{}), ready: make(chan struct{})}
	if p, ok := tx.(driver.Pipeliner); ok && !b.solo {
		b.pipe = p
	}
	b.shared, _ = tx.(driver.SharedTx)
	if len(claimed) == 0 {
		_ = tx.Rollback(ctx)
		goAlone(members)
		return
	}
	formed = true
	q.formed(b)
	for _, m := range members {
		if owned[m.id] {
			m.turn <- b
		} else {
			m.turn <- nil // its row was there: a duplicate, or a row lease mode holds
		}
	}
	<-b.done
	slotHeld = false
	q.ended(b)
	b.end()
}

// readFinished reads, in the batch's transaction, the rows that its claim found there already (those of the
// members not owned), and gives each member whose row is finished that row, so that it ends without a transaction
// of its own: alone, a copy would begin one, claim again, read its row and roll back, three round trips, where a
// burst of copies after a rebalance or a crash costs the batch this one statement. A row in another state (one that
// lease mode holds or left) goes on alone, as does every member when the database cannot read many rows at once.
// An error leaves the transaction unusable: the caller rolls it back.
func (q *queue) readFinished(ctx context.Context, tx driver.Tx, members []*member, owned map[string]bool) error {
	ids := make([]string, 0, len(members)-len(owned))
	for _, m := range members {
		if !owned[m.id] {
			ids = append(ids, m.id)
		}
	}
	rows, ok, err := q.e.cfg.Store.ReadFinished(ctx, tx, q.consumer, ids)
	if !ok || err != nil {
		return err
	}
	for _, m := range members {
		if row, found := rows[m.id]; found { // only unowned IDs were read
			m.row = &row
		}
	}
	return nil
}

// end commits the batch once every handler has finished, and tells the members that succeeded how it went.
func (b *batch) end() {
	out := commitOutcome{start: time.Now()}
	switch {
	case b.broken != nil:
		out.err = b.broken
		_ = b.tx.Rollback(b.ctx)
	case len(b.ok) == 0:
		_ = b.tx.Rollback(b.ctx) // every handler failed: nothing to commit
	default:
		out.err = b.tx.Commit(b.ctx)
	}
	for _, m := range b.ok {
		m.outcome <- out
	}
}

// apply runs m's handler in the batch, settles its part of the transaction, and waits for the commit.
func (b *batch) apply(m *member) ([]*message.Message, error) {
	t := &memberTx{b: b, start: time.Now()}
	if b.pipe != nil {
		t.wake = make(chan struct{}, 1)
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
	out := <-m.outcome
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
		if b.pipe != nil {
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

// breaks records that the transaction can no longer commit.
func (b *batch) breaks(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.broken == nil {
		b.broken = err
	}
}

// brokenBy returns what left the transaction unusable, nil if nothing did.
func (b *batch) brokenBy() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.broken
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
