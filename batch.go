package inbox

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

// Batch mode (WithBatch) is group commit. Messages of one consumer whose handler calls are in flight together
// share one transaction: one statement claims all their IDs, each handler runs in a savepoint of its own, and one
// commit makes them all durable before any of them is acked. The path of one message:
//
//  1. Join the consumer's queue. A message that finds nothing running and nothing waiting goes alone, as without
//     batching. Otherwise a batch begins as soon as no other batch is claiming its messages (while batches run,
//     after waiting up to the batch wait for it to fill).
//  2. The batch begins its transaction and claims its IDs, sorted (batches sharing IDs lock them in one order).
//     A message whose row was there already leaves the batch: a finished one (a duplicate) ends at once, its row
//     read in the batch's transaction (readFinished); one that lease mode holds or left goes the way of a message
//     without batching, as does every message of a batch whose claim failed.
//  3. Run the handler at once. Its first use of the transaction waits for the batch's turn (WithBatchConcurrency
//     batches at a time, in the order they began) and then for the connection, which one handler holds at a
//     time, and sets its savepoint (on pgx, sent with its first statement); it holds the connection until it
//     returns. Work before that overlaps the other handlers' and the batches' before it. On pgx the members' first
//     statements go to the server together instead, and each handler gets its answer when the members before it
//     are done (see Pipelining below).
//  4. On success, store the produced messages; on an error or a panic, roll back to the savepoint and give the
//     claim back, so that only this message is nacked, at once.
//  5. When every handler has finished, the next batch takes the turn (earlier when this one has held it for
//     turnBound while its members still working do not use the connection), and this one commits once; the
//     handlers that succeeded return, and the router acks. A commit that fails nacks them all, and nothing of the
//     batch is applied.

// beginShared begins a batch's transaction: one that gives each handler a view of its own when the adapter can
// (driver.SharedPool).
func beginShared(ctx context.Context, pool driver.Pool) (driver.Tx, error) {
	if sp, ok := pool.(driver.SharedPool); ok {
		return sp.BeginShared(ctx, driver.TxOptions{})
	}
	return pool.Begin(ctx, driver.TxOptions{})
}

// beginOwn begins a message's own transaction; in batch mode, one whose handler gets a view that refuses Commit and
// Rollback (withOwnView), as a batch member's does.
func (i *Inbox) beginOwn(ctx context.Context) (driver.Tx, error) {
	if i.cfg.batchSize > 0 {
		return beginShared(ctx, i.db.pool)
	}
	return i.db.pool.Begin(ctx, driver.TxOptions{})
}

// applyBatched applies msg in the batch that claims it, or alone when none does.
func (i *Inbox) applyBatched(msg *message.Message, consumer, id string, h message.HandlerFunc) ([]*message.Message, error) {
	q := i.queueOf(consumer)
	q.inFlight.Add(1)
	defer q.inFlight.Add(-1)
	if turn := q.takeAlone(id); turn != nil {
		// A lone message: it goes as without batching, on the slot of a batch, so that what arrives meanwhile
		// forms the next batch. A batch of one would cost the same round trips and more hand-offs.
		defer q.endedAlone(turn)
		return i.applyOwn(msg, consumer, id, h)
	}
	m := &member{msg: msg, id: id, h: h, ob: i.observe(msg, consumer, id, ModeTransaction),
		turn: make(chan *batch, 1), outcome: make(chan commitOutcome, 1)}
	m.ob.claiming()
	q.add(m)
	if b := <-m.turn; b != nil {
		return b.apply(m)
	}
	if m.row != nil {
		// Its row was there, finished, when the batch claimed: it ends as it would alone, without a transaction.
		if produced, err := decodeProduced(consumer, id, m.row.Produced); err == nil {
			_, err = i.skipped(msg, consumer, id, m.row.State, m.ob)
			return produced, err
		}
	}
	return i.applyOwn(msg, consumer, id, h)
}

// member is one message's part in a batch.
type member struct {
	msg     *message.Message
	id      string
	h       message.HandlerFunc
	ob      *observed
	turn    chan *batch        // the batch that claimed the message, or nil: it goes on alone
	outcome chan commitOutcome // the batch's commit, for a member whose handler succeeded
	// row is, for a member that goes on without its batch, the row the batch's claim found there when it is
	// finished ('done': a copy of an applied message; 'failed': dead-lettered in lease mode), read in the batch's
	// transaction (readFinished); set before turn is sent.
	row *dialect.StoredRow
}

// commitOutcome is how a batch's commit ended.
type commitOutcome struct {
	start time.Time
	err   error
}

// batchQueues holds one queue per consumer: a batch claims the IDs of one consumer.
type batchQueues struct{ m sync.Map } // consumer name -> *batchQueue

func (i *Inbox) queueOf(consumer string) *batchQueue {
	if q, ok := i.batchQueues.m.Load(consumer); ok {
		return q.(*batchQueue)
	}
	q, _ := i.batchQueues.m.LoadOrStore(consumer, &batchQueue{i: i, consumer: consumer})
	return q.(*batchQueue)
}

// batchQueue forms the batches of one consumer from the messages that wait for one.
type batchQueue struct {
	i        *Inbox
	consumer string

	mu      sync.Mutex
	pending []*member // in no batch yet, oldest first
	running int       // batches (and lone messages) whose handlers have not all returned
	// Batches whose members may use the connection (at most WithBatchConcurrency), and those that wait for that
	// turn, oldest first. See startReady.
	using   int
	gated   []*batch
	forming bool // a batch is claiming its messages: the messages that arrive meanwhile go in the next
	// alone is the ID of the lone message that runs (takeAlone), if one does. Its copies wait for it to end: a
	// batch that claimed one first would hold the row the lone message's claim waits for, while it waits for the
	// turn the lone message holds, and neither would ever go on. IDs are never empty.
	alone  string
	held   bool // no batch begins (tests hold the queue to gather a batch)
	timer  *time.Timer
	timerN int  // which arming of the timer is current, so that a stale firing does nothing
	waited bool // the current wait to fill a batch is over
	// lead is how long members' handlers have been working before their first use of the transaction (or
	// before they returned without one), averaged over the recent members, in nanoseconds; 0 until one is known.
	// See startReady.
	lead atomic.Int64
	// inFlight counts the consumer's messages in the inbox, from applyBatched's start to its return; recent is
	// how many were there when the last batch's handlers had all returned, before its commit. See startReady.
	inFlight atomic.Int32
	recent   int
}

// learn folds into lead how long one member's handler worked before it used the transaction.
func (q *batchQueue) learn(d time.Duration) {
	d = max(d, 1)
	old := q.lead.Load()
	if old != 0 {
		d = time.Duration(old) + (d-time.Duration(old))/4
	}
	q.lead.Store(int64(d)) // a store lost to another member's costs one sample of an average
}

func (q *batchQueue) add(m *member) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pending = append(q.pending, m)
	q.startReady()
}

// takeAlone takes a slot for a message that arrives when nothing runs and nothing waits, and lets it use the
// connection at once; it returns the turn the message holds, or nil when the message must join the queue.
func (q *batchQueue) takeAlone(id string) *heldTurn {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.running > 0 || len(q.pending) > 0 || q.held {
		return nil
	}
	q.running++
	q.using++
	q.alone = id
	return q.hold(nil)
}

// heldTurn is a turn on the connection that a batch or a lone message holds. It is given up once (passed): when
// its holder ends, or earlier when the holder has held it for turnBound and, for a batch, none of its members uses
// or waits for the connection (see hold). Guarded by the queue's mu.
type heldTurn struct {
	timer  *time.Timer
	passed bool
}

// minTurnBound is the least time a batch or a lone message holds the consumer's turn on the connection before
// the next batch may use the database beside it (see turnBound).
const minTurnBound = 10 * time.Millisecond

// turnBound is how long a batch or a lone message holds the turn before the next batch that waits for it may be
// let in beside it: minTurnBound, or four times the handlers' usual work before their first statement (lead) when
// that is longer. The turn keeps batches from taking row locks at the same time, but a holder is done with it
// only when its last handler returns: one handler that works for seconds before it writes (a slow call out, a
// retry's backoff) would hold up every message of the consumer, where per-message mode holds up only its own.
//
// Past the bound a batch gives the turn up once none of its members uses or waits for the connection while some
// still work: such a handler then holds up only its own batch's acks. A batch whose members take the connection one
// after another (database/sql's drivers, handlers that wait for a hot row) keeps it. Giving it up at the bound
// regardless let the next batches meet its row locks: with 100 hot accounts over lib/pq at 64 in flight, batch mode
// fell from 2,170 to 96 msgs/s in deadlocks (the harness's hot-row throughput). A lone message's use of its
// transaction is not seen, and it gives the turn up at the bound. A batch let in beside a straggler's may meet the
// locks that batch holds, and PostgreSQL breaks a cycle after deadlock_timeout by failing one statement, whose
// message is nacked, as with WithBatchConcurrency above 1.
func (q *batchQueue) turnBound() time.Duration {
	return max(minTurnBound, 4*time.Duration(q.lead.Load()))
}

// hold starts the bound of a turn that b (nil for a lone message) takes now. Past the bound a lone message gives
// it up at once, and a batch as soon as no member of it uses or waits for the connection: at once, or when the
// last such member releases it (released). Called with mu held.
func (q *batchQueue) hold(b *batch) *heldTurn {
	t := &heldTurn{}
	t.timer = time.AfterFunc(q.turnBound(), func() {
		if b != nil {
			b.late.Store(true)
			if b.asked.Load() > 0 {
				return // released gives it up: it reads late after its own count, as this reads asked after late
			}
		}
		q.mu.Lock()
		defer q.mu.Unlock()
		q.giveUp(t)
		q.startReady()
	})
	return t
}

// giveUp passes the turn t, unless it was passed before. Called with mu held.
func (q *batchQueue) giveUp(t *heldTurn) {
	if t.passed {
		return
	}
	t.passed = true
	t.timer.Stop()
	q.passTurn()
}

// batchesAhead is how many batches may have claimed their messages and started their handlers while the batches
// that WithBatchConcurrency allows run their statements: each holds a transaction, and so a connection, open. At 8
// in flight with 10 ms handlers batches hold under 2 messages, and with 3 ahead messages waited to start their
// work: batch mode ran at 0.86 to 0.90 of per-message mode, against 0.87 to 1.05 with 7 (BenchmarkRouterBatch).
const batchesAhead = 7

// batchesAhead is batchesAhead, or fewer on a pool whose limit of connections the adapter tells (database/sql's
// SetMaxOpenConns, pgxpool's MaxConns): the batches that run and wait then leave at least two connections free.
// A batch waiting for its turn holds a connection until the batches before it commit, and a handler of those that
// takes a connection from the pool outside the transaction would otherwise wait for one of them for good.
func (i *Inbox) batchesAhead() int {
	limited, ok := i.db.pool.(driver.PoolLimit)
	if !ok || limited.MaxConns() <= 0 {
		return batchesAhead
	}
	return min(batchesAhead, max(0, limited.MaxConns()-i.cfg.batchRunning-2))
}

// startReady begins a batch when messages wait, no batch is claiming its messages, and fewer than the limit have
// handlers running. A message never waits when no batch runs; while some run, a batch that is not full waits for
// the batch wait to pass, unless the handlers work longer than that before their first statement (lead): the
// batch then begins at once, since its handlers' work overlaps the batches before it, and a fuller batch would only
// start them later (at 8 messages in flight with 10 ms handlers, a wait of 1 ms made batch mode 0.94 to 0.97 of
// per-message mode's rate; BenchmarkRouterBatch). Called with mu held.
//
// A batch is full at maxSize, or at half the messages in flight (recent) when that is earlyBatch or more: the
// other half are in the batch before it, and come back only once it has committed. Two batches so take turns,
// one filling while the other runs its round trips, where a batch that waited out its wait for the other's
// messages left the machine idle: at 64 in flight with zero-work handlers batch mode ran 4.19 to 4.42 times
// per-message mode, against 3.63 to 4.05 (three runs of each, in turn; BenchmarkRouterBatch).
//
// A message thus waits at most for one claim to start its handler: the handler's work before its first statement
// overlaps the batches before it. Only WithBatchConcurrency batches at a time let their members use the connection
// (formed, passTurn); the others wait for their turn, in the order they began. Batches so never acquire row locks at
// the same time beyond WithBatchConcurrency, unless one holds its turn past turnBound, and a batch that waits for
// its turn holds no lock the handlers of a batch before it could want: only its new claim rows, which no handler
// touches.
func (q *batchQueue) startReady() {
	size, wait := q.i.cfg.batchSize, q.i.cfg.batchWait
	for len(q.pending) > 0 && !q.forming && !q.held && q.running < q.i.cfg.batchRunning+q.i.batchesAhead() && !q.stalled() {
		half := q.recent / 2
		full := len(q.pending) >= size || half >= earlyBatch && len(q.pending) >= half
		if q.running > 0 && !full && wait > 0 && !q.waited && time.Duration(q.lead.Load()) <= wait {
			if q.timer == nil {
				q.timerN++
				n := q.timerN
				q.timer = time.AfterFunc(wait, func() { q.fill(n) })
			}
			return
		}
		if q.timer != nil {
			q.timer.Stop()
			q.timer = nil
		}
		members := q.take(size)
		if len(members) == 0 {
			return // only copies of the lone message's ID wait: they go when it has ended
		}
		q.waited = false
		q.running++
		q.forming = true
		go q.run(members)
	}
}

// earlyBatch is the fewest messages a batch begins with before its wait to fill is over, at half the messages in
// flight (see startReady). A commit costs the machine about what seven messages cost (BenchmarkRouterBatchCost),
// and at 8 in flight a first version without this floor, beginning at half, made batches of 3.1 where they had
// held 3.5, and ran 0.91 to 0.99 times as fast.
const earlyBatch = 16

// fill ends the wait to fill a batch.
func (q *batchQueue) fill(n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if n != q.timerN || q.timer == nil {
		return // a batch began meanwhile
	}
	q.timer, q.waited = nil, true
	q.startReady()
}

// take removes up to size members with distinct IDs from pending, oldest first. A second copy of an ID stays for
// a later batch: within one transaction it would only find its own copy's claim. So does a copy of the lone
// message's ID (see alone).
func (q *batchQueue) take(size int) []*member {
	taken := make([]*member, 0, min(size, len(q.pending)))
	seen := make(map[string]bool, cap(taken))
	rest := q.pending[:0]
	for _, m := range q.pending {
		if len(taken) < size && !seen[m.id] && m.id != q.alone {
			seen[m.id] = true
			taken = append(taken, m)
			continue
		}
		rest = append(rest, m)
	}
	clear(q.pending[len(rest):])
	q.pending = rest
	return taken
}

// stalled reports whether the newest batch waiting for its turn has no member still working: a batch begun now
// would overlap nothing, and the messages that wait do better to gather into one batch when that one's turn comes
// (with zero-work handlers, batches of many messages instead of many batches of few). Called with mu held.
func (q *batchQueue) stalled() bool {
	if len(q.gated) == 0 {
		return false
	}
	last := q.gated[len(q.gated)-1]
	return last.atTurn.Load() >= int32(last.members)
}

// formed records that the forming batch has claimed its messages, and lets its members use its connection now if
// fewer than WithBatchConcurrency batches do, or else when an earlier batch's handlers are done. b is nil for a
// batch that claimed nothing.
func (q *batchQueue) formed(b *batch) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.forming = false
	switch {
	case b == nil:
	case q.using < q.i.cfg.batchRunning:
		q.using++
		b.admit()
	default:
		q.gated = append(q.gated, b)
	}
	q.startReady()
}

// ended frees the slot of a batch whose handlers have all returned, or that ended before any ran (nil).
func (q *batchQueue) ended(b *batch) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.running--
	if b != nil {
		q.recent = int(q.inFlight.Load())
	}
	switch {
	case b == nil:
	case b.admitted:
		q.giveUp(b.turnHeld)
	default: // its handlers all returned without needing the connection
		q.gated = slices.DeleteFunc(q.gated, func(g *batch) bool { return g == b })
	}
	q.startReady()
}

// endedAlone frees the slot, and the turn on the connection unless it passed already, of a lone message
// (takeAlone).
func (q *batchQueue) endedAlone(turn *heldTurn) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.running--
	q.alone = ""
	q.giveUp(turn)
	q.startReady()
}

// passTurn gives up a turn on the connection, to the oldest batch that waits for one. Called with mu held.
func (q *batchQueue) passTurn() {
	q.using--
	if len(q.gated) > 0 {
		next := q.gated[0]
		q.gated = slices.Delete(q.gated, 0, 1)
		q.using++
		next.admit()
	}
}

// admit lets the members of b use the connection. Called with the queue's mu held.
//
// Its first pipeline waits for the members that waited for the turn (see send), and when the handlers reach the
// transaction within the batch wait (lead), for every member, up to the batch wait: a batch often gets the turn
// while its handlers still work, and the members that reach the connection after the first would otherwise go in a
// second pipeline, a round trip more. At 64 messages in flight with zero-work handlers the first pipeline carried 5
// members and the second 24; now one carries them all (BenchmarkRouterBatch).
func (b *batch) admit() {
	b.admitted, b.turnHeld = true, b.q.hold(b)
	b.gather = int(b.atTurn.Load()) // the members that finished without it count themselves in too (arrive)
	if wait := b.i.cfg.batchWait; b.pipe != nil && wait > 0 && time.Duration(b.q.lead.Load()) <= wait {
		b.gather, b.gatherBy = b.members, time.Now().Add(wait)
	}
	close(b.ready)
}

// batch is one transaction that the messages it claimed share.
type batch struct {
	i        *Inbox
	q        *batchQueue
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
func (q *batchQueue) run(members []*member) {
	formed, slotHeld := false, true
	defer func() {
		if !formed {
			q.formed(nil)
		}
		if slotHeld {
			q.ended(nil)
		}
	}()
	i := q.i
	ctx := context.WithoutCancel(members[0].msg.Context())
	goAlone := func(ms []*member) {
		for _, m := range ms {
			m.turn <- nil
		}
	}
	tx, err := beginShared(ctx, i.db.pool)
	if err != nil {
		goAlone(members) // each finds out for itself, and is nacked with its own error
		return
	}
	slices.SortFunc(members, func(a, b *member) int { return strings.Compare(a.id, b.id) })
	ids := make([]string, len(members))
	for n, m := range members {
		ids[n] = m.id
	}
	claimed, err := i.store.claimBatch(ctx, tx, q.consumer, ids)
	if err != nil {
		i.cfg.logger.Debug("Inbox batch claim failed; its messages go on one by one", watermill.LogFields{
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
			i.cfg.logger.Debug("Inbox batch could not read the rows its claim found; its messages go on one by one",
				watermill.LogFields{"consumer": q.consumer, "messages": len(members), "error": err.Error()})
			_ = tx.Rollback(ctx)
			goAlone(members)
			return
		}
	}
	b := &batch{i: i, q: q, consumer: q.consumer, tx: tx, ctx: ctx, left: len(claimed), members: len(claimed), solo: len(claimed) == 1,
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
// lease mode holds or left) goes on alone, as does every member when the dialect cannot read many rows at once.
// An error leaves the transaction unusable: the caller rolls it back.
func (q *batchQueue) readFinished(ctx context.Context, tx driver.Tx, members []*member, owned map[string]bool) error {
	ids := make([]string, 0, len(members)-len(owned))
	for _, m := range members {
		if !owned[m.id] {
			ids = append(ids, m.id)
		}
	}
	rows, ok, err := q.i.store.readRows(ctx, tx, q.consumer, ids)
	if !ok || err != nil {
		return err
	}
	for _, m := range members {
		if row, found := rows[m.id]; found && (row.State == stateDone || row.State == stateFailed) { // only unowned IDs were read
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
	msg, ctx := m.msg, m.msg.Context()
	t := &memberTx{b: b, start: time.Now()}
	if b.pipe != nil {
		t.wake = make(chan struct{}, 1)
	}
	msg.SetContext(withClaim(m.ob.claimed(1), t, m.id))
	panicked := true
	defer func() {
		if panicked { // give back the claim and the effect, then let the panic go on
			msg.SetContext(ctx)
			b.giveBack(m, t, errHandlerPanicked)
		}
	}()
	produced, err := m.ob.run(m.h, msg)
	panicked = false
	msg.SetContext(ctx)
	if err == nil {
		err = b.keep(m, t, produced)
	} else {
		b.giveBack(m, t, err)
	}
	if err != nil {
		err = b.i.settle(msg, b.consumer, err)
		m.ob.finish(err)
		return nil, err
	}
	out := <-m.outcome
	m.ob.commitDone(out.start, out.err)
	if out.err != nil {
		err = fmt.Errorf("inbox: commit the batch of %s/%s: %w", b.consumer, m.id, out.err)
		produced = nil
	}
	m.ob.finish(err)
	return produced, err
}

// keep stores what m's handler produced; when the database refuses the produced messages, it gives the claim back
// instead, and reports why.
func (b *batch) keep(m *member, t *memberTx, produced []*message.Message) error {
	stampProduced(produced, b.consumer, m.id, b.i.cfg.idKey)
	raw, err := encodeProduced(b.consumer, m.id, produced)
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
		err = b.i.store.saveProduced(b.ctx, b.tx, b.consumer, m.id, raw)
	}
	if t.settle(); err == nil && t.err != nil {
		err = t.err
	}
	if errors.Is(err, ErrProducedUnstorable) {
		err = unusable{err}
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
	held, err := b.i.store.holds(b.ctx, b.tx, b.consumer, m.id)
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
	b.i.cfg.logger.Debug("Inbox gave back a failed message's claim in its batch", logFields(m.msg, b.consumer, m.id).
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
		if err := b.i.store.savepoint(b.ctx, b.tx, dialect.RollbackSavepoint); err != nil {
			b.breaks(fmt.Errorf("inbox: roll back to the savepoint of %s/%s: %w", b.consumer, m.id, err))
			return
		}
	} else if t.err != nil {
		b.breaks(t.err)
		return
	}
	if err := b.i.store.unclaim(b.ctx, b.tx, b.consumer, m.id); err != nil {
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

// memberTx is a member's view of the batch's transaction, in its handler's context: the first use takes the
// connection and sets the member's savepoint, so that the handler's time before it overlaps the others'.
type memberTx struct {
	b         *batch
	start     time.Time // the handler's start
	once      sync.Once
	savepoint bool  // set: its effect can be rolled back alone
	deferred  bool  // the savepoint waits to go with the member's first statement (see driver.Deferrer)
	err       error // setting it failed
	untouched bool  // the member finished without taking the connection

	// In a batch with a pipe: pipelined is set when the member's first statement went in a pipeline; the other
	// fields are the line's (guarded by its mu).
	pipelined bool
	view      driver.View // the native transaction its handler gets, when the batch's transaction gives views
	seat      int         // names the savepoint of its pipelined statement
	wake      chan struct{}
	sql       string // its first statement, while it waits in the line's queue
	args      []any
	alone     bool // it waits in the queue to have the connection to itself, not to pipeline a statement
	sends     bool // it is to send the next pipeline
	ran       bool // its savepoint and statement ran (spSet: the savepoint is there), with res and resErr
	spSet     bool
	res       any
	resErr    error
	told      bool // it heads the line and has its answer
}

// deferring is a transaction whose statements without arguments are held back by its driver.Deferrer: the dialect's
// savepoint statement, given this, waits for the member's first statement.
type deferring struct {
	driver.Tx
	d driver.Deferrer
}

func (e deferring) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	if len(args) > 0 {
		return e.Tx.Exec(ctx, query, args...)
	}
	e.d.DeferExec(query)
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
			if d, ok := t.b.tx.(driver.Deferrer); ok {
				t.err = t.b.i.store.savepoint(t.b.ctx, deferring{t.b.tx, d}, dialect.SetSavepoint)
				t.deferred = t.err == nil
			} else {
				t.err = t.b.i.store.savepoint(t.b.ctx, t.b.tx, dialect.SetSavepoint)
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
	ran, err := t.b.tx.(driver.Deferrer).EndDeferred()
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
// Rollback return ErrTxShared, when the adapter gives views (database/sql's and pgx's do).
func (t *memberTx) Native() any {
	if p, ok := t.b.tx.(driver.Pipeliner); ok {
		if t.view == nil {
			first := noFirst // a batch of one pipelines nothing
			if t.b.pipe != nil {
				first = t.first
			}
			t.view = p.MemberView(first, func() { t.hold(true) })
		}
		return t.view.Native()
	}
	t.hold(true)
	if t.b.shared == nil {
		return t.b.tx.Native()
	}
	if t.view == nil {
		v, err := t.b.shared.View(t.b.ctx)
		if err != nil {
			return nil // the handler finds no transaction, and fails
		}
		t.view = v
	}
	return t.view.Native()
}

// noFirst is the first of a view whose statements are never pipelined: a batch of one member's.
func noFirst(context.Context, string, []any) (any, bool, error) { return nil, false, nil }

// failed returns the first error of the member's statements, if one failed: its first pipelined statement's, or
// one its view recorded. nil when none failed or the adapter gives no views.
func (t *memberTx) failed() error {
	if t.pipelined && t.resErr != nil {
		return t.resErr
	}
	if t.view != nil {
		return t.view.Failed()
	}
	return nil
}

// closeView ends the member's view, so that its handler can no longer use the batch's transaction.
func (t *memberTx) closeView() {
	if t.view != nil {
		t.view.Close()
	}
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

func (t *memberTx) Commit(context.Context) error   { return ErrTxShared }
func (t *memberTx) Rollback(context.Context) error { return ErrTxShared }

// Pipelining (over pgx): the members' first statements, each behind a savepoint of its own, go to the server
// together, in one round trip, whenever the connection frees and several wait; a batch of zero-work handlers so
// costs about three round trips (BEGIN and the claim; the members' statements; COMMIT) instead of one per member.
// The members take their places in the transaction in the order their statements ran (the line's order). The rules
// that keep every handler seeing what it would have seen with the members one after another:
//
//   - A member's answer is withheld until it heads the line: every member before it has returned from its handler
//     and settled its part. No handler so acts on the effect of a member that may still roll back.
//   - A statement of the head after its first (a second statement, its produced messages, any use that is not a
//     statement with arguments), and the rollback of a head that failed, first rolls back to the savepoint of the
//     member after it: the later members' statements, which ran before this one, are undone before their handlers
//     saw anything, and are sent again after it. The head so never sees or builds on the effect of a later member.
//     The head then has the connection to itself until it leaves the line, and nothing is pipelined meanwhile.
//   - A pipelined statement that fails aborts the transaction and the statements after it in the pipeline, which
//     did not run and wait to be sent again. Nothing is sent until the member whose statement failed has left the
//     line, rolled back to its savepoint (or not: then the transaction stays failed, as without pipelining).
//   - A first use other than a statement with arguments waits to head the line with no member after it, and then
//     takes the connection to itself, as without pipelining; the members behind it in the queue wait for it.
//   - Once a head's later statement has rolled back the members behind it, the batch stops pipelining: its
//     handlers run more than one statement, or produce messages, and each head would otherwise undo and re-send
//     all the members behind it. The members then go one after another, as without pipelining.
//
// A member whose handler never runs a statement takes no place in the line. The pipeline runs on the batch's
// context, as its commit does: a member's own context does not cancel the statements of the others.

// line orders the members of a pipelining batch on its connection.
type line struct {
	mu       sync.Mutex
	order    []*memberTx // members whose statements ran or are running, in that order; the first is the head
	queue    []*memberTx // members that wait to send their first statement or to take the connection, in order
	busy     bool        // a pipeline is on the connection, or holder has it
	holder   *memberTx   // the head, which has the connection to itself until it leaves the line
	claimant *memberTx   // the head, waiting for a pipeline to end to take the connection
	failed   *memberTx   // its pipelined statement failed: nothing is sent until it leaves the line
	joined   int         // members that joined the queue, or finished without the connection (arrive)
	gathered bool        // the batch's first pipeline went, or is going
	gatherer *memberTx   // the sender of the first pipeline, while it waits for the members to gather
	// serial: a head's later statement rolled back the members behind it. Its handlers are of the kind that runs
	// more than one statement (or produces messages): the members now go one after another, each sent when the
	// line is empty, so that the batch pays for that rollback, and the statements run again, once only.
	serial bool

	// What the sender of a pipeline hands the transaction, reused: only one pipeline is on the connection.
	seats   []int
	sqls    []string
	args    [][]any
	results []any
	errs    []error
}

func (t *memberTx) signal() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// join puts t at the end of the queue. Called with the line's mu held.
func (l *line) join(t *memberTx) {
	l.queue = append(l.queue, t)
	l.count()
	l.next()
}

// arrive counts in a member that finished without needing the connection: the first pipeline no longer waits for
// it.
func (l *line) arrive() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count()
}

// count counts a member in, and wakes the sender of the first pipeline, which may be waiting for it. Called with
// mu held.
func (l *line) count() {
	if l.joined++; l.gatherer != nil {
		l.gatherer.signal()
	}
}

// waitUntil waits, with the line's mu held, until done reports true; it also sends a pipeline when t is told to.
func (b *batch) waitUntil(t *memberTx, done func() bool) {
	for !done() {
		if t.sends {
			t.sends = false
			b.send(t)
			continue
		}
		b.line.mu.Unlock()
		<-t.wake
		b.line.mu.Lock()
	}
}

// next lets whoever may go on: the head, once its answer is in; then, when nothing is on the connection, the head
// that waits for it, or the first of the queue. Called with the line's mu held.
func (l *line) next() {
	if len(l.order) > 0 {
		if h := l.order[0]; h.ran && !h.told {
			h.told = true
			h.signal()
		}
	}
	if l.busy {
		return
	}
	if c := l.claimant; c != nil {
		l.claimant, l.busy, l.holder = nil, true, c
		c.signal()
		return
	}
	if l.failed != nil || len(l.queue) == 0 {
		return
	}
	switch t := l.queue[0]; {
	case !t.alone && (!l.serial || len(l.order) == 0):
		l.busy, t.sends = true, true
		t.signal()
	case len(l.order) == 0:
		l.queue = slices.Delete(l.queue, 0, 1)
		l.order = append(l.order, t)
		l.busy, l.holder = true, t
		t.signal()
	}
}

// first runs sql as the member's first statement, in a pipeline with the others' (ran), and returns its outcome
// once the member heads the line. It does nothing when the member already used the transaction.
func (t *memberTx) first(_ context.Context, sql string, args []any) (res any, ran bool, err error) {
	t.once.Do(func() { ran, t.pipelined = true, true })
	if !ran {
		return nil, false, nil
	}
	b := t.b
	b.q.learn(time.Since(t.start))
	b.atTurn.Add(1)
	b.asked.Add(1)
	<-b.ready
	t.seat = int(b.seats.Add(1))
	l := &b.line
	l.mu.Lock()
	defer l.mu.Unlock()
	t.sql, t.args = sql, args
	l.join(t)
	b.waitUntil(t, func() bool { return t.told })
	return t.res, true, t.resErr
}

// send sends the statements of the members first in the queue, up to one that waits to take the connection, in
// one pipeline, and records how each went. Called by t with the line's mu held and busy set for it; it unlocks mu
// while it waits and while the pipeline is on the connection.
//
// The batch's first pipeline waits for the members that waited for the batch's turn: they all wake when it
// comes, and the first to join the line would otherwise send its statement alone, the others theirs in a second
// round trip. At 64 messages in flight the first pipeline so carried 11 members instead of 1 (BenchmarkRouterBatch).
// It may also wait for members still working, until gatherBy (see admit).
func (b *batch) send(t *memberTx) {
	l := &b.line
	if !l.gathered {
		l.gathered, l.gatherer = true, t
		over := false
		if l.joined < b.gather && !b.gatherBy.IsZero() {
			timer := time.AfterFunc(time.Until(b.gatherBy), func() {
				l.mu.Lock()
				defer l.mu.Unlock()
				over = true
				t.signal()
			})
			defer timer.Stop()
		}
		for l.joined < b.gather && !over {
			l.mu.Unlock()
			<-t.wake
			l.mu.Lock()
		}
		l.gatherer = nil
	}
	n := 0
	for n < len(l.queue) && !l.queue[n].alone && (n == 0 || !l.serial) {
		n++
	}
	sent := slices.Clone(l.queue[:n])
	l.queue = slices.Delete(l.queue, 0, n)
	l.order = append(l.order, sent...)
	l.seats, l.sqls, l.args = l.seats[:0], l.sqls[:0], l.args[:0]
	for _, t := range sent {
		l.seats, l.sqls, l.args = append(l.seats, t.seat), append(l.sqls, t.sql), append(l.args, t.args)
	}
	l.results, l.errs = slices.Grow(l.results[:0], n)[:n], slices.Grow(l.errs[:0], n)[:n]
	l.mu.Unlock()
	set, err := b.pipe.ExecPipelined(b.ctx, l.seats, l.sqls, l.args, l.results, l.errs)
	l.mu.Lock()
	l.busy = false
	if err != nil {
		err = fmt.Errorf("inbox: pipeline the statements of %d members of a batch of %s: %w", n, b.consumer, poolerHint(b.i.store.d, err))
		b.breaks(err)
	}
	for k, t := range sent {
		switch {
		case err != nil:
			t.ran, t.resErr = true, err
		case k < set:
			t.ran, t.spSet, t.res, t.resErr = true, true, l.results[k], l.errs[k]
			if t.resErr != nil {
				l.failed = t
			}
		}
	}
	if err == nil {
		l.requeue(sent[set:])
	}
	clear(l.args)
	clear(l.results)
	clear(l.errs)
	l.next()
}

// requeue puts members whose statements were rolled back, or never ran, first in the queue again, in their order.
// Called with mu held.
func (l *line) requeue(ms []*memberTx) {
	if len(ms) == 0 {
		return
	}
	for _, t := range ms {
		t.ran, t.spSet, t.res, t.resErr = false, false, nil, nil
		if l.failed == t {
			l.failed = nil
		}
	}
	l.order = slices.DeleteFunc(l.order, func(t *memberTx) bool { return slices.Contains(ms, t) })
	l.queue = slices.Insert(l.queue, 0, ms...)
}

// seize gives the head t the connection to itself, until it leaves the line, and rolls back the statements of the
// members after it (with self, its own too), which go to the queue again.
func (b *batch) seize(t *memberTx, self bool) error {
	l := &b.line
	l.mu.Lock()
	switch {
	case l.holder == t:
	case l.busy:
		l.claimant = t
		b.waitUntil(t, func() bool { return l.holder == t })
	default:
		l.busy, l.holder = true, t
	}
	var undone []*memberTx
	if from := slices.Index(l.order, t); from >= 0 {
		if !self {
			from++
		}
		undone = slices.Clone(l.order[from:])
	}
	l.mu.Unlock()
	if len(undone) == 0 || !undone[0].spSet {
		return nil // nothing after it ran, or its pipeline broke the transaction: the batch rolls back
	}
	err := b.pipe.RollbackToSeat(b.ctx, undone[0].seat)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.serial = l.serial || !self
	l.requeue(slices.DeleteFunc(undone, func(u *memberTx) bool { return u == t }))
	return err
}

// rewind rolls the pipelined member t back to its savepoint, with the members after it, whose statements are sent
// again. Called when t holds the connection.
func (b *batch) rewind(t *memberTx) error {
	if !t.spSet {
		return t.resErr // its pipeline broke the transaction: the batch rolls back
	}
	return b.seize(t, true)
}

// acquire takes the connection for t, the member's first use of the transaction that is not pipelined.
func (b *batch) acquire(t *memberTx) {
	if b.pipe == nil {
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

// release frees the connection once t's part is settled; with a pipe, t leaves the line and the next member heads it.
// Its view is closed first, so that its handler, done, cannot use the transaction after it.
func (b *batch) release(t *memberTx) {
	defer b.released()
	t.closeView()
	if b.pipe == nil {
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

// released counts a member off the connection, once it freed it; the last one of a batch that has held its turn
// for turnBound gives the turn up, since the members still working have not asked for the connection (see hold).
func (b *batch) released() {
	if b.asked.Add(-1) == 0 && b.late.Load() {
		b.q.mu.Lock()
		defer b.q.mu.Unlock()
		b.q.giveUp(b.turnHeld)
		b.q.startReady()
	}
}
