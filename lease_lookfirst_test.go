package inbox_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

// TestLease_ACopyOfAFinishedMessageTakesNoRowLock proves that lease mode's claim looks at the row before it tries
// to take it: a copy of a message that is done is skipped even while another transaction holds the row's lock.
// A claim that went straight to ON CONFLICT DO UPDATE would lock the row, even though its WHERE then leaves the
// row as it is, and so wait here for the other transaction (and write WAL and commit for nothing once it got it).
func TestLease_ACopyOfAFinishedMessageTakesNoRowLock(t *testing.T) {
	t.Parallel()
	ib, b := setup(t, inbox.WithLease(time.Minute))
	var calls atomic.Int64
	h := ib.Middleware(func(*message.Message) ([]*message.Message, error) { calls.Add(1); return nil, nil })
	_, err := h(newMsg("evt-1"))
	require.NoError(t, err)
	require.EqualValues(t, 1, calls.Load())

	holder, err := b.db.Begin()
	require.NoError(t, err)
	defer func() { _ = holder.Rollback() }()
	var state string
	require.NoError(t, holder.QueryRow(`SELECT state::text FROM `+b.Table+` WHERE message_id = 'evt-1' FOR UPDATE`).Scan(&state))
	require.Equal(t, "d", state)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	copyMsg := newMsg("evt-1")
	copyMsg.SetContext(ctx)
	start := time.Now()
	_, err = h(copyMsg)
	require.NoError(t, err, "the copy is skipped without waiting for the row's lock")
	require.Less(t, time.Since(start), 2*time.Second)
	require.EqualValues(t, 1, calls.Load(), "and its handler does not run")
}
