package mysqlinbox_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/mysqlinbox"
)

// A burst of copies meets in one batch while another message of the consumer is in flight beside it, its claim
// not yet committed. The copies end with the batch's claim, each returning what its first application produced:
// the batch's read of their rows must not wait for the locks of the message in flight.
func TestBatch_CopiesEndWithTheirBatchsClaimBesideAMessageInFlight(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	pool := &inboxtest.BeginCounter{Pool: driver.StdSQL(b.db)}
	const n = 16
	ib, err := inbox.OnDialect(mysqlinbox.Dialect, pool).New(b.options(inbox.WithBatch(time.Minute, n),
		inbox.WithBatchConcurrency(1))...)
	require.NoError(t, err)
	var calls atomic.Int64
	credit := b.credit(1, &calls)
	release, blocking := make(chan struct{}), make(chan struct{})
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if _, err := credit(msg); err != nil {
			return nil, err
		}
		if msg.Metadata.Get(inbox.DefaultIDMetadataKey) == "blocker" {
			close(blocking)
			<-release
			return nil, nil
		}
		return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte("credited"))}, nil
	})
	ids := inboxtest.EventIDs("evt", n)
	first := map[string]string{} // event ID -> the UUID of the message its first application produced
	for _, id := range ids {
		out, err := h(newMsg(id)) // alone: nothing else runs
		require.NoError(t, err)
		require.Len(t, out, 1)
		first[id] = out[0].UUID
	}

	// A message that holds the consumer's turn with its claim and its write uncommitted, so that the copies queue
	// and form one batch of n beside it.
	blocker := make(chan error, 1)
	go func() { _, err := h(newMsg("blocker")); blocker <- err }()
	<-blocking
	before := pool.Begun.Load()
	outs := make([][]*message.Message, n)
	errs := make([]error, n)
	done := make(chan struct{})
	for k, id := range ids {
		go func() {
			outs[k], errs[k] = h(newMsg(id))
			done <- struct{}{}
		}()
	}
	for range ids {
		<-done
	}
	begun := pool.Begun.Load() - before
	close(release)
	require.NoError(t, <-blocker)

	for k, id := range ids {
		require.NoError(t, errs[k], id)
		require.Len(t, outs[k], 1, "%s's produced message goes out again", id)
		require.Equal(t, first[id], outs[k][0].UUID, id)
	}
	require.EqualValues(t, n+1, calls.Load(), "no copy's handler runs")
	require.EqualValues(t, 1, begun, "the copies cost the batch's transaction only")
	require.Equal(t, n+1, b.balance(t))
	require.Equal(t, n+1, b.rows(t, "wallet-credits"))
}
