package testkit

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

// barrier lets the handlers of n messages go on once all of them have started, so that they are in flight
// together and the inbox batches them; after wait it lets them go regardless, and the test then proves less but
// does not hang.
type barrier struct {
	n, arrived atomic.Int32
	all        chan struct{}
	once       sync.Once
}

func newBarrier(n int) *barrier {
	b := &barrier{all: make(chan struct{})}
	b.n.Store(int32(n))
	return b
}

func (b *barrier) wait(limit time.Duration) {
	if b.arrived.Add(1) >= b.n.Load() {
		b.once.Do(func() { close(b.all) })
	}
	select {
	case <-b.all:
	case <-time.After(limit):
	}
}

// batchSwallowedFailure: in batch mode, a handler that ignores the error of a statement that failed on its
// transaction and returns nil costs its own message only, as in per-message mode. On PostgreSQL the failed
// statement aborts the transaction: the message is nacked, its effect and claim rolled back to its savepoint, and
// the other members of its batch commit. Every other message is applied once, at its first delivery, while four
// copies of the swallowing message are redelivered as fast as they are nacked.
func batchSwallowedFailure(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	ib := b.inbox(t, inbox.WithBatch(time.Millisecond, 16))
	var calls atomic.Int64
	credit := b.Credit(1, &calls)
	var swallowed atomic.Int64
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if msg.Metadata.Get(inbox.DefaultIDMetadataKey) != "swallower" {
			return credit(msg)
		}
		if _, err := credit(msg); err != nil {
			return nil, err
		}
		// Account 1 exists: the insert fails, and the handler carries on as if it had not.
		if err := b.Conn.ExecInHandler(msg.Context(), `INSERT INTO `+b.Accounts+` (id, balance) VALUES (1, 0)`); err != nil {
			swallowed.Add(1)
		}
		return nil, nil
	})

	stopCopies := RedeliverWhile(h, "swallower", 4)
	ids := EventIDs("evt", 120)
	_, errs := DeliverTogether(h, ids)
	accepted, swallowerErr := stopCopies()

	for _, id := range ids {
		require.NoError(t, errs[id], "%s is applied at its first delivery, whatever the swallowing message does", id)
	}
	require.Positive(t, swallowed.Load(), "the swallowing handler ran its failing statement")
	if accepted == 0 {
		// PostgreSQL: the statement aborted the transaction. The message is nacked with the error it swallowed,
		// and nothing of it stays.
		require.Error(t, swallowerErr)
		require.ErrorContains(t, swallowerErr, "returned nil after a statement on its transaction failed")
		require.EqualValues(t, len(ids), b.Balance(t), "the swallowing message's effect is rolled back")
		require.EqualValues(t, len(ids), b.rows(t))
	} else {
		// MariaDB: a failed statement is undone alone and the transaction goes on; the message applies once.
		require.EqualValues(t, len(ids)+1, b.Balance(t))
		require.EqualValues(t, len(ids)+1, b.rows(t))
	}
}

// batchHandlerEndsTheTx: in batch mode, a handler that commits or rolls back the transaction it got refuses to be
// obeyed: the call fails with ErrTxShared, saying why, and the batch goes on unharmed. Every message, the
// misbehaving ones included, is applied exactly once.
func batchHandlerEndsTheTx(t *testing.T, conn Conn) {
	for _, commit := range []bool{true, false} {
		name := "Rollback"
		if commit {
			name = "Commit"
		}
		t.Run(name, func(t *testing.T) {
			b := newBundle(t, conn, true)
			ib := b.inbox(t, inbox.WithBatch(50*time.Millisecond, 16), inbox.WithBatchConcurrency(1))
			var calls atomic.Int64
			credit := b.Credit(1, &calls)
			ids := EventIDs("evt", 12)
			gather := newBarrier(len(ids))
			var refused atomic.Int64
			var unexpected atomic.Value
			h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
				gather.wait(10 * time.Second)
				if _, err := credit(msg); err != nil {
					return nil, err
				}
				switch msg.Metadata.Get(inbox.DefaultIDMetadataKey) {
				case "evt-2", "evt-5", "evt-9":
					err := b.Conn.EndInHandler(msg.Context(), commit)
					if errors.Is(err, inbox.ErrTxShared) {
						refused.Add(1)
					} else if err != nil {
						unexpected.Store(err)
					}
				}
				return nil, nil // the handler ignores what its Commit or Rollback said
			})
			errs := DeliverCopies(t, h, ids, 1)
			require.Empty(t, errs)
			if err, ok := unexpected.Load().(error); ok {
				t.Fatalf("a handler's %s failed with %v, not with inbox.ErrTxShared", name, err)
			}
			require.EqualValues(t, len(ids), b.Balance(t), "every message is applied exactly once")
			require.EqualValues(t, len(ids), b.rows(t))
		})
	}
}
