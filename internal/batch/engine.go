package batch

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"
)

// The engine's entry points: a message's way in (Apply), and Hold and Pending, with which tests gather a batch.

// Apply applies m, a message of consumer with event ID id and context ctx, in the batch that claims it, or alone
// when none does.
func (e *Engine) Apply(ctx context.Context, consumer, id string, m Message) ([]*message.Message, error) {
	q := e.queueOf(consumer)
	q.inFlight.Add(1)
	defer q.inFlight.Add(-1)
	if turn := q.takeAlone(id); turn != nil {
		// A lone message: it goes as without batching, on the slot of a batch, so that what arrives meanwhile
		// forms the next batch. A batch of one would cost the same round trips and more hand-offs.
		defer q.endedAlone(turn)
		return m.Alone()
	}
	mb := &member{msg: m, ctx: ctx, id: id, signals: make(chan memberSignal, 1)}
	m.Claiming()
	q.add(mb)
	if b := mb.await(signalTurn).b; b != nil {
		return b.apply(mb)
	}
	if mb.row != nil {
		return m.Skip(*mb.row) // its row was there, finished, when the batch claimed
	}
	return m.Alone()
}

// Hold keeps any batch of consumer from beginning until release is called, so that a test can gather the messages
// of one batch.
func (e *Engine) Hold(consumer string) (release func()) {
	q := e.queueOf(consumer)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.held = true
	return func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		q.held = false
		q.startReady()
	}
}

// Pending reports how many messages of consumer wait for a batch, for tests that must know a batch is full before
// they let it begin.
func (e *Engine) Pending(consumer string) int {
	q := e.queueOf(consumer)
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}

func (e *Engine) queueOf(consumer string) *queue {
	if q, ok := e.queues.Load(consumer); ok {
		return q.(*queue)
	}
	q, _ := e.queues.LoadOrStore(consumer, &queue{e: e, consumer: consumer})
	return q.(*queue)
}
