package batch

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/effectively-once/watermill-inbox/driver"
)

// A consumer's queue: admission (which messages go alone, which wait, and when a batch begins with which of
// them), the turns its batches take on the database, and a batch's run. They share a file since they call one
// another: admission begins a batch's run and gives out turns, and a run that forms or ends, or a turn that passes,
// lets admission begin the next batch.

func (q *queue) add(m *member) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pending = append(q.pending, m)
	q.startReady()
}

// takeAlone takes a slot for a message that arrives when nothing runs and nothing waits, and lets it use the
// connection at once; it returns the turn the message holds, or nil when the message must join the queue.
func (q *queue) takeAlone(id string) *heldTurn {
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

// startReady begins a batch when messages wait, no batch is claiming its messages, and fewer than the limit have
// handlers running. A message never waits when no batch runs; while some run, a batch that is not full waits for
// the batch wait to pass, unless the handlers work longer than that before their first statement (lead): the
// batch then begins at once, since its handlers' work overlaps the batches before it, and a fuller batch would only
// start them later: with a few messages in flight and handlers that work before they write, waiting made batch
// mode slower than per-message mode (BenchmarkRouterBatch measures it; docs/results/performance.md has the
// figures). Called with mu held.
//
// A batch is full at maxSize, or at half the messages in flight (recent) when that is EarlyBatch or more: the
// other half are in the batch before it, and come back only once it has committed. Two batches so take turns,
// one filling while the other runs its round trips, where a batch that waited out its wait for the other's
// messages left the machine idle (BenchmarkRouterBatch measures both; docs/results/performance.md has the
// figures).
//
// A message thus waits at most for one claim to start its handler: the handler's work before its first statement
// overlaps the batches before it. Only WithBatchConcurrency batches at a time let their members use the connection
// (formed, passTurn); the others wait for their turn, in the order they began. Batches so never acquire row locks at
// the same time beyond WithBatchConcurrency, unless one holds its turn past turnBound, and a batch that waits for
// its turn holds no lock the handlers of a batch before it could want: only its new claim rows, which no handler
// touches.
func (q *queue) startReady() {
	size, wait := q.e.cfg.Size, q.e.cfg.Wait
	for len(q.pending) > 0 && !q.forming && !q.held && q.running < q.e.cfg.Concurrency+q.e.batchesAhead() && !q.stalled() {
		half := q.recent / 2
		full := len(q.pending) >= size || half >= EarlyBatch && len(q.pending) >= half
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

// EarlyBatch is the fewest messages a batch begins with before its wait to fill is over, at half the messages in
// flight (see startReady). A commit costs the machine several messages' worth of CPU (BenchmarkRouterBatchCost),
// and with few messages in flight a first version without this floor, beginning at half, made smaller batches and
// ran slower (BenchmarkRouterBatch; docs/results/performance.md has the figures).
const EarlyBatch = 16

// fill ends the wait to fill a batch.
func (q *queue) fill(n int) {
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
func (q *queue) take(size int) []*member {
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
func (q *queue) stalled() bool {
	if len(q.gated) == 0 {
		return false
	}
	last := q.gated[len(q.gated)-1]
	return last.atTurn.Load() >= int32(last.members)
}

// formed records that the forming batch has claimed its messages, and lets its members use its connection now if
// fewer than WithBatchConcurrency batches do, or else when an earlier batch's handlers are done. b is nil for a
// batch that claimed nothing.
func (q *queue) formed(b *batch) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.forming = false
	switch {
	case b == nil:
	case q.using < q.e.cfg.Concurrency:
		q.using++
		b.admit()
	default:
		q.gated = append(q.gated, b)
	}
	q.startReady()
}

// ended frees the slot of a batch whose handlers have all returned, or that ended before any ran (nil).
func (q *queue) ended(b *batch) {
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
func (q *queue) endedAlone(turn *heldTurn) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.running--
	q.alone = ""
	q.giveUp(turn)
	q.startReady()
}

// batchesAhead is how many batches may have claimed their messages and started their handlers while the batches
// that WithBatchConcurrency allows run their statements: each holds a transaction, and so a connection, open. With
// few messages in flight and handlers that work before they write, batches hold few messages; with fewer batches
// ahead, messages waited to start their work and batch mode ran slower than with 7 (BenchmarkRouterBatch measures
// it; docs/results/performance.md has the figures).
const batchesAhead = 7

// batchesAhead is batchesAhead, or fewer on a pool whose limit of connections the adapter tells (database/sql's
// SetMaxOpenConns, pgxpool's MaxConns): the batches that run and wait then leave at least two connections free.
// A batch waiting for its turn holds a connection until the batches before it commit, and a handler of those that
// takes a connection from the pool outside the transaction would otherwise wait for one of them for good.
func (e *Engine) batchesAhead() int {
	if e.maxConns == nil {
		return batchesAhead
	}
	limit := e.maxConns()
	if limit <= 0 {
		return batchesAhead
	}
	return min(batchesAhead, max(0, limit-e.cfg.Concurrency-2))
}

// Turn-taking: the batches of a consumer take turns on the database, WithBatchConcurrency at a time, in the order
// they began, so that they do not take row locks at the same time; a turn passes when its holder ends, or earlier
// past turnBound. A batch's members then take its one connection one at a time (member.go), or in a line
// (pipeline.go).

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
// regardless let the next batches meet its row locks, and on hot rows batch mode collapsed in deadlocks (the
// harness's hot-row throughput; docs/results/performance.md has the figures). A lone message's use of its
// transaction is not seen, and it gives the turn up at the bound. A batch let in beside a straggler's may meet the
// locks that batch holds, and PostgreSQL breaks a cycle after deadlock_timeout by failing one statement, whose
// message is nacked, as with WithBatchConcurrency above 1.
func (q *queue) turnBound() time.Duration {
	return max(minTurnBound, 4*time.Duration(q.lead.Load()))
}

// hold starts the bound of a turn that b (nil for a lone message) takes now. Past the bound a lone message gives
// it up at once, and a batch as soon as no member of it uses or waits for the connection: at once, or when the
// last such member releases it (released). Called with mu held.
func (q *queue) hold(b *batch) *heldTurn {
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
func (q *queue) giveUp(t *heldTurn) {
	if t.passed {
		return
	}
	t.passed = true
	t.timer.Stop()
	q.passTurn()
}

// passTurn gives up a turn on the connection, to the oldest batch that waits for one. Called with mu held.
func (q *queue) passTurn() {
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
// second pipeline, a round trip more; now one carries them all (BenchmarkRouterBatch at 64 in flight;
// docs/results/performance.md has the figures).
func (b *batch) admit() {
	b.admitted, b.turnHeld = true, b.q.hold(b)
	b.gather = int(b.atTurn.Load()) // the members that finished without it count themselves in too (arrive)
	if wait := b.e.cfg.Wait; b.pipe && wait > 0 && time.Duration(b.q.lead.Load()) <= wait {
		b.gather, b.gatherBy = b.members, time.Now().Add(wait)
	}
	close(b.ready)
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

// A batch's run: begin, claim, wait for the handlers, commit once, and tell the members.

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
			m.signals <- memberSignal{kind: signalTurn}
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
	b.pipe = e.caps.ExecPipelined != nil && !b.solo
	if len(claimed) == 0 {
		_ = tx.Rollback(ctx)
		goAlone(members)
		return
	}
	formed = true
	q.formed(b)
	for _, m := range members {
		if owned[m.id] {
			m.signals <- memberSignal{kind: signalTurn, b: b}
		} else {
			m.signals <- memberSignal{kind: signalTurn} // its row was there: a duplicate, or a row lease mode holds
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
		m.signals <- memberSignal{kind: signalCommit, out: out}
	}
}
