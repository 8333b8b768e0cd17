package testkit

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

// batchGoroutineOutlivesHandler: in batch mode, a goroutine that a handler starts and that writes on the handler's
// transaction after the handler returned (a fire-and-forget audit write) is refused with ErrHandlerReturned, on
// every driver: its write would land in the commit of the batch's other members. Half the messages fail at their
// first delivery, each leaving a goroutine that credits the account once the inbox has returned the failure (some
// of those handlers used the transaction before they failed, some never did); the other half wait, in the same
// batch, until every goroutine has written or been refused, then credit the account and commit. The failed messages are delivered
// again and applied: every event is applied once.
func batchGoroutineOutlivesHandler(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	ib := b.inbox(t, inbox.WithBatch(50*time.Millisecond, 16), inbox.WithBatchConcurrency(1))
	var calls atomic.Int64
	credit := b.Credit(1, &calls)
	ids := EventIDs("evt", 16)
	failing, touches := map[string]bool{}, map[string]bool{}
	returned := map[string]chan struct{}{}
	for k, id := range ids {
		if k%2 == 1 {
			failing[id] = true
			touches[id] = k%4 == 1 // some handlers use the transaction before they fail
			returned[id] = make(chan struct{})
		}
	}
	gather := newBarrier(len(ids))
	var outlived sync.WaitGroup
	outlived.Add(len(failing))
	allWritten := make(chan struct{})
	go func() { outlived.Wait(); close(allWritten) }()
	var mu sync.Mutex
	goroutineErrs := map[string]error{}
	var redelivery atomic.Bool

	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		id := msg.Metadata.Get(inbox.DefaultIDMetadataKey)
		if redelivery.Load() {
			return credit(msg)
		}
		gather.wait(10 * time.Second)
		if !failing[id] {
			select { // the batch commits after the goroutines wrote, or were refused
			case <-allWritten:
			case <-time.After(20 * time.Second):
			}
			return credit(msg) // the connection only now: the failing members need it to give their claims back
		}
		if touches[id] {
			if err := b.Conn.ExecInHandler(msg.Context(), `SELECT 1`); err != nil {
				return nil, err
			}
		}
		ctx := msg.Context() // the handler's context, as a goroutine it starts captures it
		go func() {
			defer outlived.Done()
			<-returned[id]
			err := b.Conn.ExecInHandler(ctx, `UPDATE `+b.Accounts+` SET balance = balance + `+b.p(1)+` WHERE id = 1`, 1)
			mu.Lock()
			goroutineErrs[id] = err
			mu.Unlock()
		}()
		return nil, errors.New("the handler fails, leaving its goroutine behind")
	})

	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := h(newMsg(id))
			if failing[id] {
				close(returned[id])
				if err == nil {
					t.Errorf("%s's handler failed, and the inbox returned no error", id)
				}
			} else if err != nil {
				t.Errorf("%s is applied at its first delivery: %v", id, err)
			}
		}()
	}
	wg.Wait()
	<-allWritten

	// A message that went alone, as batch mode sends some, had a transaction of its own, which ended with the
	// handler: its goroutine finds no transaction to write on. Every other goroutine is refused, saying why.
	refused := 0
	for id := range failing {
		require.Error(t, goroutineErrs[id], "the write of %s's goroutine after its handler returned fails", id)
		if errors.Is(goroutineErrs[id], inbox.ErrHandlerReturned) {
			refused++
		}
	}
	require.GreaterOrEqual(t, refused, len(failing)/2, "the batch members' goroutines are refused with ErrHandlerReturned: %v", goroutineErrs)
	require.EqualValues(t, len(ids)-len(failing), b.Balance(t), "no goroutine's write committed")

	redelivery.Store(true)
	var again []string
	for id := range failing {
		again = append(again, id)
	}
	DeliverCopies(t, h, again, 1)
	require.EqualValues(t, len(ids), b.Balance(t), "every event applied once")
	require.EqualValues(t, len(ids), b.rows(t), fmt.Sprintf("%d inbox rows", len(ids)))
}
