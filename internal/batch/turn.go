package batch

import (
	"slices"
	"time"
)

// Turn-taking: the batches of a consumer take turns on the database, WithBatchConcurrency at a time, in the order
// they began, so that they do not take row locks at the same time; a turn passes when its holder ends, or earlier
// past turnBound. A batch's members then take its one connection one at a time (member.go), or in a line
// (pipeline.go).

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
	if wait := b.e.cfg.Wait; b.pipe != nil && wait > 0 && time.Duration(b.q.lead.Load()) <= wait {
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
