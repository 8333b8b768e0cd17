package batch

import (
	"context"
	"fmt"
	"slices"
	"time"
)

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

func (t *memberTx) signal() {
	select {
	case t.wake <- memberSignal{}:
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
// round trip (BenchmarkRouterBatch at 64 in flight; docs/results/performance.md has the figures).
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
	var set int
	// A transaction that something left unusable (a member's failed rollback, or its claim's) would refuse every
	// statement with "current transaction is aborted": the members get the error that broke it instead.
	err := b.brokenBy()
	if err != nil {
		err = fmt.Errorf("inbox: the statements of %d members of a batch of %s were not sent: %w", n, b.consumer, err)
	} else if set, err = b.e.caps.ExecPipelined(b.ctx, b.tx, l.seats, l.sqls, l.args, l.results, l.errs); err != nil {
		err = fmt.Errorf("inbox: pipeline the statements of %d members of a batch of %s: %w", n, b.consumer, b.store.Explain(err))
		b.breaks(err)
	}
	l.mu.Lock()
	l.busy = false
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
	err := b.e.caps.RollbackToSeat(b.ctx, b.tx, undone[0].seat)
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
