// Package readiness keeps what an inbox knows of its schema: the outcome of the last check, and whether a
// statement has found the table missing since. The first message checks, and so does the first message after a
// statement found the table missing; the others read the outcome. No goroutine is involved.
package readiness

import (
	"context"
	"sync/atomic"
)

// Gate runs one check at a time and remembers its outcome, a value of T (the table's ID type) or an error.
type Gate[T any] struct {
	turn   chan struct{}          // one check at a time; a channel, so that a waiting message can give up
	last   atomic.Pointer[run[T]] // the outcome of the last check, nil before the first
	losses *atomic.Uint64         // the table's count of statements that found it missing
}

// run is the outcome of one check.
type run[T any] struct {
	value  T
	err    error
	losses uint64 // the table's loss count when the check began
}

// New returns the gate of an inbox whose statements count in losses those that found the table missing. The
// gate compares the count with the one its last check began at, so a table dropped while the process runs is
// checked again by the next message instead of failing every claim alike.
func New[T any](losses *atomic.Uint64) *Gate[T] {
	return &Gate[T]{turn: make(chan struct{}, 1), losses: losses}
}

// Ready returns the outcome of the last check unless it failed or the table was found missing since; otherwise it
// runs check, one caller at a time, or gives up when ctx ends while it waits its turn.
func (g *Gate[T]) Ready(ctx context.Context, check func(context.Context) (T, error)) (T, error) {
	var zero T
	seen := g.last.Load()
	if seen != nil && seen.err == nil && seen.losses == g.losses.Load() {
		return seen.value, nil
	}
	select {
	case g.turn <- struct{}{}:
	case <-ctx.Done():
		return zero, ctx.Err()
	}
	defer func() { <-g.turn }()
	// A check that ended while this caller waited for its turn answers for it too, so that messages arriving
	// together make one check, not one each.
	if cur := g.last.Load(); cur != seen && (cur.err != nil || cur.losses == g.losses.Load()) {
		return cur.value, cur.err
	}
	n := g.losses.Load()
	value, err := check(ctx)
	if err != nil && ctx.Err() != nil {
		return zero, err // this caller ended, which says nothing about the schema: leave the next one to check
	}
	g.last.Store(&run[T]{value: value, err: err, losses: n})
	return value, err
}

// Passed returns the value of the last check when it passed.
func (g *Gate[T]) Passed() (T, bool) {
	if r := g.last.Load(); r != nil && r.err == nil {
		return r.value, true
	}
	var zero T
	return zero, false
}
