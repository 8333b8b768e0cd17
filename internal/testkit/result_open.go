package testkit

import (
	sqldriver "database/sql/driver"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

// unscannedRowThenProduced: a handler that queries one row on its transaction, never scans it, and returns
// produced messages. The open result keeps the connection busy, so the client library refuses the statement that
// stores the produced messages, and would on every redelivery. In batch mode the inbox closes the result when the
// handler returns, and every message is applied once with its produced messages. In transaction mode the handler
// has its client library's own transaction, whose result the inbox cannot close: the message is dead-lettered at
// its first delivery with ErrResultLeftOpen's reason, its effect rolled back, never run again and again.
func unscannedRowThenProduced(t *testing.T, conn Conn) {
	leaving := func(b *bundle, calls *atomic.Int64) message.HandlerFunc {
		return producing(calls, func(msg *message.Message) ([]*message.Message, error) {
			if _, err := b.Credit(1, nil)(msg); err != nil {
				return nil, err
			}
			return nil, b.Conn.LeaveRowUnscannedInHandler(msg.Context(), `SELECT 1`)
		})
	}
	t.Run("BatchModeClosesTheResult", func(t *testing.T) {
		b := newBundle(t, conn, true)
		var calls atomic.Int64
		ids := EventIDs("evt", 8)
		gather := newBarrier(len(ids))
		inner := leaving(b, &calls)
		h := b.inbox(t, inbox.WithBatch(20*time.Millisecond, 16)).Middleware(func(msg *message.Message) ([]*message.Message, error) {
			gather.wait(10 * time.Second)
			return inner(msg)
		})
		_, errs := DeliverTogether(h, ids)
		for _, id := range ids {
			require.NoError(t, errs[id], "%s is applied with its produced messages", id)
		}
		again, errs := DeliverTogether(h, ids)
		for _, id := range ids {
			require.NoError(t, errs[id])
			require.Len(t, again[id], 2, "the copy of %s returns the produced messages stored with its row", id)
		}
		require.EqualValues(t, len(ids), calls.Load(), "each handler ran once")
		require.EqualValues(t, len(ids), b.Balance(t))
		require.EqualValues(t, len(ids), b.rows(t))
	})
	t.Run("TransactionModeClosesTheResultWhereTheHandlerGetsAView", func(t *testing.T) {
		b := newBundle(t, conn, true)
		if !b.d.ViewsEveryTx {
			t.Skipf("on %s the handler gets its client library's own transaction: TransactionModeDeadLettersWithTheReason", b.d.Name)
		}
		var calls atomic.Int64
		h := b.inbox(t).Middleware(leaving(b, &calls))
		_, err := h(newMsg("evt-1"))
		require.NoError(t, err, "applied with its produced messages")
		again, err := h(newMsg("evt-1"))
		require.NoError(t, err)
		require.Len(t, again, 2, "the copy returns the produced messages stored with its row")
		require.EqualValues(t, 1, calls.Load())
		require.EqualValues(t, 1, b.Balance(t))
		require.EqualValues(t, 1, b.rows(t))
	})
	t.Run("TransactionModeDeadLettersWithTheReason", func(t *testing.T) {
		b := newBundle(t, conn, true)
		if b.d.ViewsEveryTx {
			t.Skipf("on %s the handler gets the inbox's view: TransactionModeClosesTheResultWhereTheHandlerGetsAView", b.d.Name)
		}
		var calls atomic.Int64
		dlq := &RecordingPublisher{}
		h := b.inbox(t, inbox.WithDeadLetter(dlq, "deposits.dlq")).Middleware(leaving(b, &calls))
		_, err := h(newMsg("evt-1"))
		require.EqualValues(t, 1, calls.Load())
		require.Zero(t, b.Balance(t), "its effect is rolled back")
		require.Zero(t, b.rows(t))
		if errors.Is(err, sqldriver.ErrBadConn) {
			// A documented limit (docs/guides/usage.md#handlers): pgx's database/sql driver and
			// go-sql-driver/mysql report the busy connection as a bad one, which a broken connection reports too,
			// so the inbox cannot tell the handler's mistake from a fault that a redelivery survives: the message
			// is nacked, and nothing of it stays.
			require.Empty(t, dlq.Messages("deposits.dlq"))
			return
		}
		require.NoError(t, err, "a dead-lettered message is acked")
		dead := dlq.Messages("deposits.dlq")
		require.Len(t, dead, 1, "dead-lettered at its first delivery")
		require.Contains(t, dead[0].Metadata.Get(middleware.ReasonForPoisonedKey), "neither read to its end nor closed")
	})
}
