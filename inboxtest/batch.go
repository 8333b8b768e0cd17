package inboxtest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
)

// batchMode: messages in flight together share a transaction (WithBatch). One handler of the batch fails after its
// write and another panics: only their messages are nacked, with nothing of theirs left behind, while the others
// and their duplicates apply once; their redeliveries then apply once too.
func batchMode(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	ib := b.inbox(t, inbox.WithBatch(50*time.Millisecond, 16), inbox.WithBatchConcurrency(1))
	var calls atomic.Int64
	credit := b.credit(1, &calls)
	release := make(chan struct{})
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		switch msg.Metadata.Get(inbox.DefaultIDMetadataKey) {
		case "blocker": // holds the only batch slot until every other message waits for one
			<-release
		case "evt-3":
			if _, err := credit(msg); err != nil {
				return nil, err
			}
			return nil, errors.New("fails after its write")
		case "evt-7":
			if _, err := credit(msg); err != nil {
				return nil, err
			}
			panic("panics after its write")
		}
		return credit(msg)
	})
	deliver := func(id string) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic: %v", p)
			}
		}()
		_, err = h(newMsg(id))
		return err
	}
	blocker := make(chan error, 1)
	go func() { blocker <- deliver("blocker") }()

	ids := EventIDs("evt", 12)
	var mu sync.Mutex
	failed := map[string]error{}
	var wg sync.WaitGroup
	for _, id := range append(ids, ids[:4]...) { // four of them twice
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := deliver(id); err != nil {
				mu.Lock()
				failed[id] = err
				mu.Unlock()
			}
		}()
	}
	time.Sleep(100 * time.Millisecond) // let them queue behind the blocker's batch
	close(release)
	require.NoError(t, <-blocker)
	wg.Wait()

	require.Len(t, failed, 2, "only the failing and the panicking message are nacked: %v", failed)
	require.ErrorContains(t, failed["evt-3"], "fails after its write")
	require.ErrorContains(t, failed["evt-7"], "panics after its write")
	require.EqualValues(t, len(ids)-2+1, b.rows(t), "every claim but the two failed ones (and the blocker's)")
	require.EqualValues(t, len(ids)-2+1, b.balance(t), "every effect but the two failed ones (and the blocker's)")

	for _, id := range []string{"evt-3", "evt-7"} {
		_, err := ib.Middleware(credit)(newMsg(id))
		require.NoError(t, err, "the redelivery of %s", id)
	}
	require.EqualValues(t, len(ids)+1, b.balance(t), "each message applied once")
	require.EqualValues(t, len(ids)+1, b.rows(t))
}
