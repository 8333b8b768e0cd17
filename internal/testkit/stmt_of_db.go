package testkit

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

// stmtOfTheApplicationsPool: a handler that keeps its statement prepared on the application's pool and runs it
// through its transaction (tx.StmtContext). In transaction mode that transaction is the application pool's, and
// the message is applied once. In batch mode it is the inbox's view of the batch, on the inbox's own pool, and
// database/sql refuses the statement, as it would on every redelivery: each message, in a batch or alone, is
// dead-lettered at its first delivery with a reason that names batch mode and the way out, and its handler never
// runs again.
func stmtOfTheApplicationsPool(t *testing.T, conn Conn) {
	sc, ok := conn.(StmtConn)
	if !ok {
		t.Skipf("%T prepares statements on a connection, not on its pool", conn)
	}
	credit := func(b *bundle, calls *atomic.Int64) message.HandlerFunc {
		return producing(calls, func(msg *message.Message) ([]*message.Message, error) {
			return nil, sc.ExecPreparedInHandler(msg.Context(), `UPDATE `+b.Accounts+` SET balance = balance + `+b.p(1)+` WHERE id = 1`, 1)
		})
	}
	t.Run("TransactionModeAppliesIt", func(t *testing.T) {
		b := newBundle(t, conn, true)
		if b.d.ViewsEveryTx {
			t.Skipf("on %s the handler gets the inbox's view in transaction mode too: TransactionModeDeadLettersItOnce", b.d.Name)
		}
		var calls atomic.Int64
		h := b.inbox(t).Middleware(credit(b, &calls))
		for range 2 {
			_, err := h(newMsg("evt-1"))
			require.NoError(t, err)
		}
		require.EqualValues(t, 1, calls.Load(), "the copy is skipped")
		require.EqualValues(t, 1, b.Balance(t))
		require.EqualValues(t, 1, b.rows(t))
	})
	t.Run("TransactionModeDeadLettersItOnceWhereTheHandlerGetsAView", func(t *testing.T) {
		b := newBundle(t, conn, true)
		if !b.d.ViewsEveryTx {
			t.Skipf("on %s the handler gets a transaction of the application's pool: TransactionModeAppliesIt", b.d.Name)
		}
		var calls atomic.Int64
		dlq := &RecordingPublisher{}
		h := b.inbox(t, inbox.WithDeadLetter(dlq, "deposits.dlq")).Middleware(credit(b, &calls))
		_, err := h(newMsg("evt-1"))
		require.NoError(t, err, "a dead-lettered message is acked")
		dead := dlq.Messages("deposits.dlq")
		require.Len(t, dead, 1, "dead-lettered at its first delivery")
		require.Contains(t, dead[0].Metadata.Get(middleware.ReasonForPoisonedKey), "tx.PrepareContext")
		require.EqualValues(t, 1, calls.Load())
		require.Zero(t, b.Balance(t))
	})
	t.Run("BatchModeDeadLettersItOnceWithTheWayOut", func(t *testing.T) {
		b := newBundle(t, conn, true)
		var calls atomic.Int64
		dlq := &RecordingPublisher{}
		ids := EventIDs("evt", 6)
		gather := newBarrier(len(ids) - 1)
		inner := credit(b, &calls)
		var together atomic.Bool
		h := b.inbox(t, inbox.WithBatch(20*time.Millisecond, 16), inbox.WithDeadLetter(dlq, "deposits.dlq")).
			Middleware(func(msg *message.Message) ([]*message.Message, error) {
				if together.Load() {
					gather.wait(10 * time.Second)
				}
				return inner(msg)
			})
		_, err := h(newMsg(ids[0]))
		require.NoError(t, err, "a dead-lettered message is acked")
		together.Store(true)
		_, errs := DeliverTogether(h, ids[1:])
		for _, id := range ids[1:] {
			require.NoError(t, errs[id], "a dead-lettered message is acked")
		}
		dead := dlq.Messages("deposits.dlq")
		require.Len(t, dead, len(ids), "each message is dead-lettered at its first delivery")
		for _, m := range dead {
			reason := m.Metadata.Get(middleware.ReasonForPoisonedKey)
			require.Contains(t, reason, "batch mode")
			require.Contains(t, reason, "tx.PrepareContext")
		}
		require.EqualValues(t, len(ids), calls.Load(), "each handler ran once")
		require.Zero(t, b.Balance(t))
		require.Zero(t, b.rows(t))
	})
}
