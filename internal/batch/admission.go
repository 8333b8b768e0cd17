package batch

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/effectively-once/watermill-inbox/driver"
)

// Admission: which messages go alone, which wait, and when a batch begins with which of them.

// queue forms the batches of one consumer from the messages that wait for one.
type queue struct {
	e        *Engine
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
	// inFlight counts the consumer's messages in the inbox, from Apply's start to its return; recent is
	// how many were there when the last batch's handlers had all returned, before its commit. See startReady.
	inFlight atomic.Int32
	recent   int
}

// learn folds into lead how long one member's handler worked before it used the transaction.
func (q *queue) learn(d time.Duration) {
	d = max(d, 1)
	old := q.lead.Load()
	if old != 0 {
		d = time.Duration(old) + (d-time.Duration(old))/4
	}
	q.lead.Store(int64(d)) // a store lost to another member's costs one sample of an average
}

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
	limited, ok := e.cfg.Pool.(driver.PoolLimit)
	if !ok || limited.MaxConns() <= 0 {
		return batchesAhead
	}
	return min(batchesAhead, max(0, limited.MaxConns()-e.cfg.Concurrency-2))
}
