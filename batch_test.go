package inbox_test

import (
	"context"
	"database/sql"
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
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// runOneBatch delivers one message per ID to h at once, each from its own goroutine, while no batch may begin;
// once all of them wait, they form one batch. It returns each delivery's error, or the value it panicked with, by ID.
type batchRun struct {
	errs     map[string]error
	panics   map[string]any
	produced map[string][]*message.Message // what each delivery returned
}

func runOneBatch(t *testing.T, ib *inbox.Inbox, b *testBundle, h message.HandlerFunc, ids []string) batchRun {
	t.Helper()
	release := inbox.HoldBatches(ib, "wallet-credits")
	mw := ib.Middleware(h)

	run := batchRun{errs: map[string]error{}, panics: map[string]any{}, produced: map[string][]*message.Message{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					mu.Lock()
					run.panics[id] = p
					mu.Unlock()
				}
			}()
			out, err := mw(newMsg(id))
			mu.Lock()
			run.errs[id], run.produced[id] = err, out
			mu.Unlock()
		}()
	}
	require.Eventually(t, func() bool { return inbox.BatchPending(ib, "wallet-credits") == len(ids) },
		10*time.Second, time.Millisecond, "every message waits for the batch")
	release()
	wg.Wait()
	return run
}

// batchCredit credits account 1 on the transaction and records, per ID, the transaction it ran in.
func (b *testBundle) batchCredit(txids *sync.Map, fail func(id string) error) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		id := msg.Metadata.Get(inbox.DefaultIDMetadataKey)
		tx, ok := inbox.TxFromContext(ctx)
		if !ok {
			return nil, errors.New("no transaction")
		}
		var txid int64
		if err := tx.QueryRowContext(ctx, `SELECT txid_current()`).Scan(&txid); err != nil {
			return nil, err
		}
		txids.Store(id, txid)
		if _, err := tx.ExecContext(ctx, `UPDATE `+b.Accounts+` SET balance = balance + 1 WHERE id = 1`); err != nil {
			return nil, err
		}
		return nil, fail(id)
	}
}

func batchIDs(n int) []string { return testkit.EventIDs("evt", n) }

func TestBatch_AFailingHandlerNacksOnlyItsMessage(t *testing.T) {
	t.Parallel()
	for name, fail := range map[string]func(id string) error{
		"Error": func(id string) error {
			if id == "evt-13" {
				return errors.New("this one fails after its write")
			}
			return nil
		},
		"Panic": func(id string) error {
			if id == "evt-13" {
				panic("this one panics after its write")
			}
			return nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ib, b := setup(t, inbox.WithBatch(0, inbox.MaxBatchSize), inbox.WithBatchConcurrency(1))
			var txids sync.Map
			ids := batchIDs(inbox.MaxBatchSize)
			run := runOneBatch(t, ib, b, b.batchCredit(&txids, fail), ids)

			failedTx, _ := txids.Load("evt-13")
			for _, id := range ids {
				tx, _ := txids.Load(id)
				require.Equal(t, failedTx, tx, "%s ran in the same transaction as the failing message", id)
				if id == "evt-13" {
					continue
				}
				require.NoError(t, run.errs[id], id)
				require.Nil(t, run.panics[id], id)
			}
			if name == "Panic" {
				require.Equal(t, "this one panics after its write", run.panics["evt-13"])
			} else {
				require.ErrorContains(t, run.errs["evt-13"], "fails after its write")
			}
			require.Equal(t, len(ids)-1, b.Balance(t), "every effect but the failed one's")
			require.Equal(t, len(ids)-1, b.Rows(t, "wallet-credits"), "every claim but the failed one's")

			// Its redelivery is no duplicate: it applies, once.
			var calls atomic.Int64
			_, err := ib.Middleware(b.Credit(1, &calls))(newMsg("evt-13"))
			require.NoError(t, err)
			require.EqualValues(t, 1, calls.Load())
			require.Equal(t, len(ids), b.Balance(t))
		})
	}
}

func TestBatch_ACommitThatFailsNacksTheWholeBatchAndAppliesNothing(t *testing.T) {
	t.Parallel()
	ib, b := setup(t, inbox.WithBatch(0, 16), inbox.WithBatchConcurrency(1))
	// A deferred unique constraint is checked at commit: two members writing the same key pass their statements
	// and fail the batch's commit.
	_, err := b.db.Exec(`CREATE TABLE ` + b.Table + `_keys (k int, UNIQUE (k) DEFERRABLE INITIALLY DEFERRED)`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = b.db.Exec(`DROP TABLE ` + b.Table + `_keys`) })
	var txids sync.Map
	ids := batchIDs(16)
	run := runOneBatch(t, ib, b, b.batchCredit(&txids, func(id string) error { return nil }), ids[:14])
	for _, id := range ids[:14] {
		require.NoError(t, run.errs[id], "a batch without the clash commits")
	}

	clash := func(msg *message.Message) ([]*message.Message, error) {
		if _, err := b.Credit(1, nil)(msg); err != nil {
			return nil, err
		}
		tx, _ := inbox.TxFromContext(msg.Context())
		id := msg.Metadata.Get(inbox.DefaultIDMetadataKey)
		if id == "x-3" || id == "x-9" {
			_, err := tx.ExecContext(msg.Context(), `INSERT INTO `+b.Table+`_keys VALUES (1)`)
			return nil, err
		}
		return nil, nil
	}
	before := b.Balance(t)
	run = runOneBatch(t, ib, b, clash, testkit.EventIDs("x", 16))
	for id, err := range run.errs {
		require.Error(t, err, "%s: the commit failed, so its ack must not happen", id)
	}
	require.Len(t, run.errs, 16)
	require.Equal(t, before, b.Balance(t), "nothing of the batch is applied")
	require.Equal(t, 14, b.Rows(t, "wallet-credits"), "no claim of the batch stays (beside the first batch's)")
}

func TestBatch_CopiesOfOneIDApplyOnce(t *testing.T) {
	t.Parallel()
	t.Run("InOneBatch", func(t *testing.T) {
		t.Parallel()
		ib, b := setup(t, inbox.WithBatch(0, inbox.MaxBatchSize), inbox.WithBatchConcurrency(1))
		var calls atomic.Int64
		ids := append(batchIDs(32), batchIDs(32)...) // every ID twice, all waiting at once
		mw := ib.Middleware(b.Credit(1, &calls))
		var wg sync.WaitGroup
		errs := make(chan error, len(ids))
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := mw(newMsg(id))
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.EqualValues(t, 32, calls.Load())
		require.Equal(t, 32, b.Balance(t))
	})
	t.Run("InRacingBatches", func(t *testing.T) {
		t.Parallel()
		ib, b := setup(t, inbox.WithBatch(time.Millisecond, 16), inbox.WithBatchConcurrency(4))
		calls := &testkit.CallCounter{}
		ids := batchIDs(60)
		errs := testkit.DeliverCopies(t, ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			calls.Call(msg.Metadata.Get(inbox.DefaultIDMetadataKey))
			return b.Credit(1, nil)(msg)
		}), ids, 4)
		requireNoErrors(t, errs)
		calls.RequireOnceEach(t, ids)
		require.Equal(t, len(ids), b.Balance(t))
	})
}

func TestBatch_ACancelledContextMidBatchLosesNothing(t *testing.T) {
	t.Parallel()
	// A router closing cancels the messages' contexts while a batch runs: every message is either acked and
	// applied once, or nacked and not applied, and a redelivery of the nacked ones applies each once.
	ib, b := setup(t, inbox.WithBatch(0, 32), inbox.WithBatchConcurrency(2))
	ctx, cancel := context.WithCancel(context.Background())
	var started atomic.Int64
	mw := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if started.Add(1) == 20 {
			cancel()
		}
		select {
		case <-msg.Context().Done():
			return nil, msg.Context().Err()
		case <-time.After(time.Duration(started.Load()%3) * time.Millisecond):
		}
		return b.Credit(1, nil)(msg)
	})
	ids := batchIDs(100)
	var mu sync.Mutex
	acked := map[string]bool{}
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := newMsg(id)
			msg.SetContext(ctx)
			if _, err := mw(msg); err == nil {
				mu.Lock()
				acked[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Equal(t, len(acked), b.Balance(t), "exactly the acked messages are applied")
	require.Equal(t, len(acked), b.Rows(t, "wallet-credits"))
	require.Less(t, len(acked), len(ids), "the cancellation reached some messages")

	var redelivered []string
	for _, id := range ids {
		if !acked[id] {
			redelivered = append(redelivered, id)
		}
	}
	requireNoErrors(t, testkit.DeliverCopies(t, ib.Middleware(b.Credit(1, nil)), redelivered, 1))
	require.Equal(t, len(ids), b.Balance(t), "after the redelivery, every message once")
}

func TestBatch_HandlersOverlapTheirWorkBeforeTheTransaction(t *testing.T) {
	t.Parallel()
	// 64 handlers that work before their first statement must do that work side by side, not one after another:
	// the transaction is taken at its first use, not for the whole handler.
	ib, b := setup(t, inbox.WithBatch(0, inbox.MaxBatchSize), inbox.WithBatchConcurrency(1))
	var working, most atomic.Int64
	gate := make(chan struct{})
	var once sync.Once
	h := func(msg *message.Message) ([]*message.Message, error) {
		n := working.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if n == inbox.MaxBatchSize {
			once.Do(func() { close(gate) })
		}
		select { // the work outside the database: it ends when all are at it, or after a while
		case <-gate:
		case <-time.After(5 * time.Second):
		}
		working.Add(-1)
		return b.Credit(1, nil)(msg)
	}
	run := runOneBatch(t, ib, b, h, batchIDs(inbox.MaxBatchSize))
	for id, err := range run.errs {
		require.NoError(t, err, id)
	}
	require.EqualValues(t, inbox.MaxBatchSize, most.Load(), "all the batch's handlers worked at once")
	require.Equal(t, inbox.MaxBatchSize, b.Balance(t))
}

func TestBatch_HandlersThatWorkLongerThanTheWaitAreNotHeldToFillABatch(t *testing.T) {
	t.Parallel()
	// While a batch runs, a new one that is not full waits up to maxWait for more messages. Handlers that work
	// longer than that before their first statement gain nothing from a fuller batch and lose the wait: once the
	// inbox has seen such handlers, a message that arrives while others run starts its handler at once.
	const wait = 500 * time.Millisecond
	// Two turns on the connection: the message that runs alone holds one until the test ends.
	ib, b := setup(t, inbox.WithBatch(wait, inbox.MaxBatchSize), inbox.WithBatchConcurrency(2))
	var started sync.Map // ID -> when its handler started
	hold := make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release) // a failed assertion must not leave a handler waiting, and the test hanging
	mw := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		id := msg.Metadata.Get(inbox.DefaultIDMetadataKey)
		started.Store(id, time.Now())
		if id == "running" {
			<-hold // keeps a message running, so that the others find one running
		} else {
			time.Sleep(2 * wait) // the work before the handler's statement
		}
		return b.Credit(1, nil)(msg)
	})
	deliver := func(id string) <-chan error {
		done := make(chan error, 1)
		go func() { _, err := mw(newMsg(id)); done <- err }()
		return done
	}
	startedAt := func(id string) func() bool {
		return func() bool { _, ok := started.Load(id); return ok }
	}

	running := deliver("running") // nothing runs: it goes alone, at once
	require.Eventually(t, startedAt("running"), 10*time.Second, time.Millisecond)
	require.NoError(t, <-deliver("slow")) // its handler's 1 s before its statement is what the inbox learns

	arrived := time.Now()
	last := deliver("last")
	require.Eventually(t, startedAt("last"), 10*time.Second, time.Millisecond)
	s, _ := started.Load("last")
	require.Less(t, s.(time.Time).Sub(arrived), wait/2, "the message waited to fill a batch")
	require.NoError(t, <-last)
	release()
	require.NoError(t, <-running)
	require.Equal(t, 3, b.Balance(t))
}

func TestBatch_ABatchHoldingHalfTheMessagesInFlightDoesNotWaitToFill(t *testing.T) {
	t.Parallel()
	// While a batch runs, a new one waits up to maxWait to fill, but not once it holds half the messages in flight
	// (as many as were in the inbox when the last batch's handlers had all returned), EarlyBatch or more: the
	// others are in the batch before it. The wait here is an hour.
	ib, b := setup(t, inbox.WithBatch(time.Hour, inbox.MaxBatchSize), inbox.WithBatchConcurrency(2))
	hold := make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release) // a failed assertion must not leave a handler waiting, and the test hanging
	var started atomic.Bool
	mw := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if msg.Metadata.Get(inbox.DefaultIDMetadataKey) == "running" {
			started.Store(true)
			<-hold
		}
		return b.Credit(1, nil)(msg)
	})
	deliver := func(ids ...string) <-chan error {
		errs := make(chan error, len(ids))
		for _, id := range ids {
			go func() { _, err := mw(newMsg(id)); errs <- err }()
		}
		return errs
	}
	in := 2 * inbox.EarlyBatch

	// One batch of them all: the inbox learns that many are in flight.
	gathered := inbox.HoldBatches(ib, "wallet-credits")
	first := deliver(testkit.EventIDs("first", in)...)
	require.Eventually(t, func() bool { return inbox.BatchPending(ib, "wallet-credits") == in },
		10*time.Second, time.Millisecond, "the first batch gathers")
	gathered()
	for range in {
		require.NoError(t, <-first)
	}

	// One message runs alone and stays; as many as before arrive, and a half goes without waiting for the rest.
	running := deliver("running")
	require.Eventually(t, started.Load, 10*time.Second, time.Millisecond)
	second := deliver(testkit.EventIDs("second", in)...)
	var secondErrs []error
	timeout := time.After(10 * time.Second)
collect:
	for len(secondErrs) < in {
		select {
		case err := <-second:
			secondErrs = append(secondErrs, err)
		case <-timeout:
			break collect
		}
	}
	whileRunning := len(secondErrs)
	release() // and let whatever waits go on, so that a failure leaves nothing running
	require.NoError(t, <-running)
	for len(secondErrs) < in {
		secondErrs = append(secondErrs, <-second)
	}
	require.Equal(t, in, whileRunning, "the messages waited to fill a batch while half those in flight were there")
	for _, err := range secondErrs {
		require.NoError(t, err)
	}
	require.Equal(t, 2*in+1, b.Balance(t))
}

func TestBatch_DuplicatesAndProducedMessagesBehaveAsWithoutBatching(t *testing.T) {
	t.Parallel()
	ib, b := setup(t, inbox.WithBatch(0, 8))
	var calls atomic.Int64
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if _, err := b.Credit(1, &calls)(msg); err != nil {
			return nil, err
		}
		return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte("credited"))}, nil
	})
	first, err := h(newMsg("evt-1"))
	require.NoError(t, err, "a lone message")
	require.Len(t, first, 1)
	again, err := h(newMsg("evt-1"))
	require.NoError(t, err)
	require.EqualValues(t, 1, calls.Load(), "the duplicate is skipped")
	require.Len(t, again, 1, "and its produced message goes out again")
	require.Equal(t, first[0].UUID, again[0].UUID)
	require.Equal(t, 1, b.Balance(t))
}

func TestBatch_OptionsAreChecked(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("postgres", testDSN()) // New does not connect
	require.NoError(t, err)
	defer db.Close()
	for _, opts := range [][]inbox.Option{
		{inbox.WithBatch(0, 0)},
		{inbox.WithBatch(0, inbox.MaxBatchSize+1)},
		{inbox.WithBatch(-time.Millisecond, 8)},
		{inbox.WithBatch(0, 8), inbox.WithLease(time.Second)},
		{inbox.WithBatch(0, 8), inbox.WithBatchConcurrency(0)},
	} {
		_, err := inbox.New(db, opts...)
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
		require.ErrorContains(t, err, "WithBatch")
	}
}

func TestBatch_ALoneMessageThatFailsLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	// A batch of one sets no savepoint: its failure rolls back the whole transaction instead.
	ib, b := setup(t, inbox.WithBatch(0, 8))
	var calls atomic.Int64
	credit := b.Credit(1, &calls)
	failing := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if _, err := credit(msg); err != nil {
			return nil, err
		}
		tx, _ := inbox.TxFromContext(msg.Context())
		_, err := tx.ExecContext(msg.Context(), `SELECT 1/0`) // a failed statement, after the write
		return nil, err
	})
	_, err := failing(newMsg("evt-1"))
	require.Error(t, err)
	require.Zero(t, b.Balance(t))
	require.Zero(t, b.Rows(t, "wallet-credits"))
	require.Panics(t, func() {
		_, _ = ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			_, _ = credit(msg)
			panic("after its write")
		})(newMsg("evt-1"))
	})
	require.Zero(t, b.Balance(t))
	require.Zero(t, b.Rows(t, "wallet-credits"))
	_, err = ib.Middleware(credit)(newMsg("evt-1"))
	require.NoError(t, err)
	require.Equal(t, 1, b.Balance(t))
	require.EqualValues(t, 3, calls.Load())
}

func TestBatch_HandlersThatTakeAPoolConnectionBesideTheirTransactionNeverStarveOnASmallPool(t *testing.T) {
	t.Parallel()
	// Batches that wait for their turn hold a transaction open. On a pool of 4 they must leave connections for
	// handlers that read through the pool outside their transaction; if the batches held all 4, the running
	// batch's handlers would wait for a connection that only their own commit could free.
	ib, b := setup(t, inbox.WithBatch(time.Millisecond, 4))
	b.db.SetMaxOpenConns(4)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		time.Sleep(20 * time.Millisecond)
		var one int
		if err := b.db.QueryRowContext(msg.Context(), `SELECT 1`).Scan(&one); err != nil {
			return nil, err
		}
		return b.Credit(1, nil)(msg)
	})
	const n = 32
	errs := make(chan error, n)
	for k := range n {
		go func() {
			msg := newMsg(fmt.Sprintf("evt-%d", k))
			msg.SetContext(ctx)
			_, err := h(msg)
			errs <- err
		}()
	}
	for range n {
		require.NoError(t, <-errs)
	}
	require.Equal(t, n, b.Balance(t))
}

func TestBatch_CopiesOfAppliedMessagesEndWithTheirBatchsClaim(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	pool := &testkit.BeginCounter{Pool: driver.StdSQL(b.db)}
	obs := &testkit.EventRecorder{}
	ib, err := inbox.On(pool).New(inbox.WithTable(b.Table), inbox.WithConsumer("wallet-credits"),
		inbox.WithLogger(b.Logs), inbox.WithObserver(obs), inbox.WithBatch(time.Hour, inbox.MaxBatchSize))
	require.NoError(t, err)
	var calls atomic.Int64
	credit := b.Credit(1, &calls)
	produced := sync.Map{} // event ID -> the UUID of the message its first application produced
	h := func(msg *message.Message) ([]*message.Message, error) {
		if _, err := credit(msg); err != nil {
			return nil, err
		}
		return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte("credited"))}, nil
	}
	deliver := func(ids []string) map[string][]*message.Message {
		t.Helper()
		run := runOneBatch(t, ib, b, h, ids)
		for _, id := range ids {
			require.NoError(t, run.errs[id], id)
		}
		return run.produced
	}

	applied := testkit.EventIDs("evt", 16)
	for id, msgs := range deliver(applied) {
		require.Len(t, msgs, 1, id)
		produced.Store(id, msgs[0].UUID)
	}
	require.EqualValues(t, 16, calls.Load())
	before := pool.Begun.Load()

	// A burst of copies only: the batch's claim finds every row, and no copy begins a transaction of its own.
	for id, msgs := range deliver(applied) {
		uuid, _ := produced.Load(id)
		require.Len(t, msgs, 1, "%s's produced message goes out again", id)
		require.Equal(t, uuid, msgs[0].UUID, id)
	}
	require.EqualValues(t, 16, calls.Load(), "no copy's handler runs")
	require.EqualValues(t, 16, obs.Count("DuplicateSkipped"), "each copy is reported a duplicate")
	require.EqualValues(t, 1, pool.Begun.Load()-before, "the burst costs the batch's transaction only")

	// Copies among new messages: the new ones apply in the batch, the copies end beside it.
	fresh := testkit.EventIDs("new", 8)
	before = pool.Begun.Load()
	out := deliver(append(slices.Clone(applied[:8]), fresh...))
	for _, id := range applied[:8] {
		uuid, _ := produced.Load(id)
		require.Len(t, out[id], 1, id)
		require.Equal(t, uuid, out[id][0].UUID, id)
	}
	for _, id := range fresh {
		require.Len(t, out[id], 1, id)
	}
	require.EqualValues(t, 24, calls.Load(), "only the new messages' handlers run")
	require.EqualValues(t, 24, obs.Count("DuplicateSkipped"))
	require.EqualValues(t, 1, pool.Begun.Load()-before, "one transaction for the new messages and the copies")
	require.Equal(t, 24, b.Balance(t), "each message applied once")
	require.Equal(t, 24, b.Rows(t, "wallet-credits"))
}
