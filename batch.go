package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/batch"
	"github.com/effectively-once/watermill-inbox/internal/store"
	"github.com/effectively-once/watermill-inbox/observe"
)

// Batch mode (WithBatch) is group commit: messages of one consumer whose handler calls are in flight together
// share one transaction, one statement claims all their IDs, each handler runs in a savepoint of its own, and one
// commit makes them all durable before any of them is acked. The engine in internal/batch forms and runs the
// batches (its doc.go follows one message through them); this file builds it from the options and gives it what it
// needs of the inbox: the store (internal/store, as batchStore in inbox_store.go) and, for each message, a batchMessage.

// newBatches returns the batch engine of an Inbox with config c over d, or nil when batch mode is off.
func newBatches(d *Database, c config, s *store.Store) *batch.Engine {
	if c.batchSize == 0 {
		return nil
	}
	return batch.New(batch.Config{Size: c.batchSize, Wait: c.batchWait, Concurrency: c.batchRunning,
		Pool: d.pool, Begin: func(ctx context.Context) (driver.Tx, error) {
			tx, _, err := d.beginHandlerTx(ctx, true)
			return tx, err
		}, Store: batchStore{s}, Logger: c.logger})
}

// applyBatched applies msg in the batch that claims it, or alone when none does.
func (i *core) applyBatched(msg *message.Message, consumer, id string, h message.HandlerFunc) ([]*message.Message, error) {
	return i.batches.Apply(msg.Context(), consumer, id, &batchMessage{i: i, msg: msg, consumer: consumer, id: id, h: h})
}

// batchMessage is one message in the batch engine: its handler, and the inbox's ways to end it.
type batchMessage struct {
	i            *core
	msg          *message.Message
	consumer, id string
	h            message.HandlerFunc
	ob           observed   // from Claiming on; a message that goes alone has its own
	claim        claimValue // what its handler's context holds, from Run on
}

var _ batch.Message = (*batchMessage)(nil)

func (m *batchMessage) Claiming() {
	m.ob = observed{obs: m.i.cfg.observer, msg: m.msg, consumer: m.consumer, id: m.id, mode: observe.ModeTransaction}
	m.ob.claiming()
}

func (m *batchMessage) Run(tx driver.Tx) ([]*message.Message, error) {
	ctx := m.msg.Context()
	if err := m.i.store.SaveFingerprint(ctx, tx, m.consumer, m.id, m.i.fingerprintOf(m.msg)); err != nil {
		return nil, err
	}
	m.claim = claimValue{tx: tx, id: m.id}
	m.msg.SetContext(withClaim(m.ob.claimed(1), &m.claim))
	defer m.msg.SetContext(ctx) // the member's part ends with the handler; nothing after it may reach tx
	return refusedStmtOfAnotherDB(m.ob.run(m.h, m.msg))
}

func (m *batchMessage) Encode(produced []*message.Message) ([]byte, error) {
	stampProduced(produced, m.consumer, m.id, m.i.cfg.idKey)
	raw, err := store.EncodeProduced(m.consumer, m.id, produced)
	if errors.Is(err, ErrProducedUnstorable) {
		return nil, unusable{err}
	}
	return raw, err
}

func (m *batchMessage) Failed(err error) error {
	err = m.i.settle(m.msg, m.consumer, err)
	m.ob.finish(err)
	return err
}

func (m *batchMessage) CommitEnded(start time.Time, err error, produced []*message.Message) ([]*message.Message, error) {
	m.ob.commitDone(start, err)
	if err != nil {
		err = fmt.Errorf("inbox: commit the batch of %s/%s: %w", m.consumer, m.id, err)
		produced = nil
	}
	m.ob.finish(err)
	return produced, err
}

func (m *batchMessage) Alone() ([]*message.Message, error) {
	return m.i.applyOwn(m.msg, m.consumer, m.id, m.h)
}

func (m *batchMessage) Skip(row dialect.StoredRow) ([]*message.Message, error) {
	produced, err := store.DecodeProduced(m.consumer, m.id, row.Produced)
	if err != nil {
		return m.Alone()
	}
	if _, err = m.i.skipped(m.msg, m.consumer, m.id, row.State, &m.ob, m.i.committedFingerprint(m.msg.Context(), m.consumer, m.id)); err != nil {
		return nil, m.i.settle(m.msg, m.consumer, err)
	}
	return produced, nil
}

func (m *batchMessage) LogFields() watermill.LogFields { return logFields(m.msg, m.consumer, m.id) }
