package testkit

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

// batchMode: messages in flight together share a transaction (WithBatch). One handler of the batch fails after its
// write and another panics: only their messages are nacked, with nothing of theirs left behind, while the others
// and their duplicates apply once; their redeliveries then apply once too.
func batchMode(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	ib := b.inbox(t, inbox.WithBatch(50*time.Millisecond, 16), inbox.WithBatchConcurrency(1))
	var calls atomic.Int64
	credit := b.Credit(1, &calls)
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
	require.EqualValues(t, len(ids)-2+1, b.Balance(t), "every effect but the two failed ones (and the blocker's)")

	for _, id := range []string{"evt-3", "evt-7"} {
		_, err := ib.Middleware(credit)(newMsg(id))
		require.NoError(t, err, "the redelivery of %s", id)
	}
	require.EqualValues(t, len(ids)+1, b.Balance(t), "each message applied once")
	require.EqualValues(t, len(ids)+1, b.rows(t))
}

// batchSlowHandler: in batch mode, a handler that works long before its write, alone or as a batch member, holds
// up only its own message and its batch's acks, not the consumer's other messages: they are applied one after
// another while it works. Then it is applied once too.
func batchSlowHandler(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	ib := b.inbox(t, inbox.WithBatch(time.Millisecond, 16))
	var calls atomic.Int64
	credit := b.Credit(1, &calls)
	working := map[string]chan struct{}{"slow-alone": make(chan struct{}), "slow-member": make(chan struct{})}
	release := map[string]chan struct{}{"slow-alone": make(chan struct{}), "slow-member": make(chan struct{})}
	var once [2]sync.Once
	let := func(k int, id string) { once[k].Do(func() { close(release[id]) }) }
	t.Cleanup(func() { let(0, "slow-alone"); let(1, "slow-member") }) // before the tables are dropped, should the case fail
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if id := msg.Metadata.Get(inbox.DefaultIDMetadataKey); release[id] != nil {
			close(working[id])
			<-release[id] // works outside the database, and writes after that
		}
		return credit(msg)
	})
	slow := func(id string) chan error {
		done := make(chan error, 1)
		go func() { _, err := h(newMsg(id)); done <- err }()
		select {
		case <-working[id]:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s's handler did not start", id)
		}
		return done
	}
	applyEach := func(ids []string, while string) {
		t.Helper()
		for _, id := range ids {
			done := make(chan error, 1)
			go func() { _, err := h(newMsg(id)); done <- err }()
			select {
			case err := <-done:
				require.NoError(t, err, id)
			case <-time.After(10 * time.Second):
				t.Fatalf("%s was not applied while %s worked: the consumer waits for that handler", id, while)
			}
		}
	}

	// Nothing else runs: the first message goes alone, on the consumer's turn on the connection.
	alone := slow("slow-alone")
	applyEach(EventIDs("while-alone", 5), "slow-alone")
	// While it runs, the next message goes in a batch, which gets the turn when the lone message gives it up.
	member := slow("slow-member")
	let(0, "slow-alone")
	require.NoError(t, <-alone)
	applyEach(EventIDs("while-member", 5), "slow-member")
	let(1, "slow-member")
	require.NoError(t, <-member)

	require.EqualValues(t, 12, calls.Load(), "every handler ran once")
	require.EqualValues(t, 12, b.Balance(t), "every message applied once")
	require.EqualValues(t, 12, b.rows(t))
}

// batchKeepsItsTurn: a batch whose handlers work while they hold its connection keeps the consumer's turn past the
// bound a handler working outside the database gets, until they have all returned: the batch after it writes only
// then, and so never meets its row locks (here it writes another row, and would not wait for them).
func batchKeepsItsTurn(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	b.mustExec(t, `INSERT INTO `+b.Accounts+` (id, balance) VALUES (2, 0)`)
	ib := b.inbox(t, inbox.WithBatch(time.Millisecond, 16), inbox.WithBatchConcurrency(1))
	var calls atomic.Int64
	credit := b.Credit(1, &calls)
	first := EventIDs("first", 4)
	inFirst := map[string]bool{}
	for _, id := range first {
		inFirst[id] = true
	}
	var mu sync.Mutex
	var firstReturned, secondWrote []time.Time
	var started atomic.Int64
	blocking, let, wrote := make(chan struct{}), make(chan struct{}), make(chan struct{}, len(first))
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		id := msg.Metadata.Get(inbox.DefaultIDMetadataKey)
		switch {
		case id == "blocker": // goes alone, and holds the turn while the first messages gather in a batch
			close(blocking)
			<-let
			return nil, nil
		case inFirst[id]:
			started.Add(1)
			if _, err := credit(msg); err != nil {
				return nil, err
			}
			wrote <- struct{}{}
			time.Sleep(30 * time.Millisecond) // holding the connection: three times the least bound
			mu.Lock()
			firstReturned = append(firstReturned, time.Now())
			mu.Unlock()
			return nil, nil
		}
		err := b.Conn.ExecInHandler(msg.Context(), `UPDATE `+b.Accounts+` SET balance = balance + `+b.p(1)+` WHERE id = 2`, 1)
		mu.Lock()
		secondWrote = append(secondWrote, time.Now())
		mu.Unlock()
		return nil, err
	})
	var wg sync.WaitGroup
	deliver := func(ids ...string) {
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := h(newMsg(id)); err != nil {
					t.Errorf("%s: %v", id, err)
				}
			}()
		}
	}
	deliver("blocker")
	<-blocking
	deliver(first...)
	require.Eventually(t, func() bool { return started.Load() == int64(len(first)) }, 10*time.Second, time.Millisecond,
		"the first messages' handlers started")
	close(let)
	<-wrote
	deliver(EventIDs("second", 4)...) // they claim, in a batch after the first, while it works
	wg.Wait()

	require.Len(t, secondWrote, 4)
	require.Len(t, firstReturned, len(first))
	last := slices.MaxFunc(firstReturned, time.Time.Compare)
	for _, w := range secondWrote {
		require.True(t, w.After(last), "the second batch wrote %v before the first batch's last handler returned",
			last.Sub(w))
	}
	require.EqualValues(t, len(first), b.Balance(t))
	require.EqualValues(t, 1+len(first)+4, b.rows(t), "the blocker's, the first's and the second's")
}

// batchStragglersUnderLoad: many messages in flight, each of them twice at once, one in ten with a handler that
// works 20 to 40 ms before it writes, so that batches give their turn up while others run: every message is
// applied once, each to an account of its own.
func batchStragglersUnderLoad(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	const n = 120
	for k := 2; k <= n+1; k++ { // accounts 2 to n+1: message load-k credits account k+2
		b.mustExec(t, `INSERT INTO `+b.Accounts+` (id, balance) VALUES (`+b.p(1)+`, 0)`, k)
	}
	ib := b.inbox(t, inbox.WithBatch(time.Millisecond, 16))
	var calls atomic.Int64
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		calls.Add(1)
		var k int
		_, err := fmt.Sscanf(msg.Metadata.Get(inbox.DefaultIDMetadataKey), "load-%d", &k)
		if err != nil {
			return nil, err
		}
		if k%10 == 0 {
			time.Sleep(time.Duration(20+k%21) * time.Millisecond)
		}
		return nil, b.Conn.ExecInHandler(msg.Context(), `UPDATE `+b.Accounts+` SET balance = balance + 1 WHERE id = `+b.p(1), k+2)
	})
	require.Empty(t, DeliverCopies(t, h, EventIDs("load", n), 2))
	var total, credited int64
	b.queryRow(t, `SELECT coalesce(sum(balance), 0), count(*) FROM `+b.Accounts+` WHERE id > 1 AND balance > 0`, nil, &total, &credited)
	require.EqualValues(t, n, total, "every message applied once")
	require.EqualValues(t, n, credited, "each to its own account")
	require.EqualValues(t, n, b.rows(t))
	require.LessOrEqual(t, calls.Load(), int64(2*n))
}

// batchCopies: in batch mode, copies of applied messages that arrive together, beside new messages, are acked
// without running their handlers, each with the messages its first application produced, while the new messages
// apply once: the batch's claim finds the copies' rows and they end beside it.
func batchCopies(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	ib := b.inbox(t, inbox.WithBatch(50*time.Millisecond, 32), inbox.WithBatchConcurrency(1))
	var calls atomic.Int64
	credit := b.Credit(1, &calls)
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if _, err := credit(msg); err != nil {
			return nil, err
		}
		return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte("credited"))}, nil
	})
	applied := EventIDs("evt", 12)
	first := map[string]string{} // event ID -> the UUID of its produced message
	for _, id := range applied {
		out, err := h(newMsg(id))
		require.NoError(t, err, id)
		require.Len(t, out, 1, id)
		first[id] = out[0].UUID
	}

	ids := append(slices.Clone(applied), EventIDs("new", 6)...)
	got, errs := DeliverTogether(h, ids)
	for _, id := range ids {
		require.NoError(t, errs[id], id)
		require.Len(t, got[id], 1, "%s returns one produced message", id)
		if uuid, ok := first[id]; ok {
			require.Equal(t, uuid, got[id][0].UUID, "%s, a copy, returns what its first application produced", id)
		}
	}
	require.EqualValues(t, len(ids), calls.Load(), "no copy's handler runs")
	require.EqualValues(t, len(ids), b.Balance(t), "each message applied once")
	require.EqualValues(t, len(ids), b.rows(t))
}
