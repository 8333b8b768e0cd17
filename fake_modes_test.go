package inbox_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/fakedb"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

// The modes' logic over the in-memory database of internal/fakedb: no database, so these run under -short too.

const fakeConsumer = "wallet-credits"

// fakeInbox returns a fake database and an inbox over it, with opts.
func fakeInbox(t *testing.T, opts ...inbox.Option) (*fakedb.DB, *inbox.Inbox) {
	t.Helper()
	db := fakedb.New()
	ib, err := inbox.OnDialect(fakedb.Dialect(), db, fakedb.Joiner()).New(append([]inbox.Option{
		inbox.WithConsumer(fakeConsumer), inbox.WithLogger(watermill.NopLogger{}), inbox.WithRejectDelay(time.Millisecond)},
		opts...)...)
	require.NoError(t, err)
	return db, ib
}

// fakeCredit is a handler that adds amount to the account "wallet" in the inbox's transaction, and counts its runs.
func fakeCredit(amount int64, calls *atomic.Int64) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		calls.Add(1)
		tx, ok := inbox.NativeTxFromContext(msg.Context()).(*fakedb.Tx)
		if !ok {
			return nil, errors.New("the handler's context holds no fakedb transaction")
		}
		return nil, tx.Credit("wallet", amount)
	}
}

// fakeMsg is a message of eventID.
func fakeMsg(eventID string) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte("{}"))
	msg.Metadata.Set(inbox.DefaultIDMetadataKey, eventID)
	msg.SetContext(context.Background())
	return msg
}

func TestFake_TransactionModeAppliesOnceSkipsCopiesAndRollsBackAFailure(t *testing.T) {
	t.Parallel()
	db, ib := fakeInbox(t)
	var calls atomic.Int64
	h := ib.Middleware(fakeCredit(100, &calls))
	for range 3 {
		_, err := h(fakeMsg("evt-1"))
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, calls.Load(), "copies are skipped")
	require.EqualValues(t, 100, db.Balance("wallet"))
	require.Equal(t, "done", db.State(fakeConsumer, "evt-1"))

	failing := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if _, err := fakeCredit(100, &calls)(msg); err != nil {
			return nil, err
		}
		return nil, errors.New("fails after its write")
	})
	_, err := failing(fakeMsg("evt-2"))
	require.ErrorContains(t, err, "fails after its write")
	require.EqualValues(t, 100, db.Balance("wallet"), "the effect is rolled back")
	require.Empty(t, db.State(fakeConsumer, "evt-2"), "and the claim with it")
	_, err = h(fakeMsg("evt-2"))
	require.NoError(t, err)
	require.EqualValues(t, 200, db.Balance("wallet"), "the redelivery applies it once")
}

func TestFake_RacingCopiesApplyOnce(t *testing.T) {
	t.Parallel()
	db, ib := fakeInbox(t)
	var calls atomic.Int64
	entered, release := make(chan struct{}), make(chan struct{})
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if calls.Load() == 0 {
			close(entered) // the first copy holds its claim's row lock until it commits
			<-release
		}
		return fakeCredit(100, &calls)(msg)
	})
	errs := make(chan error, 4)
	go func() { _, err := h(fakeMsg("evt-1")); errs <- err }()
	<-entered
	for range 3 {
		go func() { _, err := h(fakeMsg("evt-1")); errs <- err }()
	}
	close(release)
	for range 4 {
		require.NoError(t, <-errs)
	}
	require.EqualValues(t, 1, calls.Load())
	require.EqualValues(t, 100, db.Balance("wallet"))
}

func TestFake_AFailedCommitIsReportedAndItsRedeliveryAppliedOnce(t *testing.T) {
	t.Parallel()
	db, ib := fakeInbox(t)
	var calls atomic.Int64
	h := ib.Middleware(fakeCredit(100, &calls))
	_, err := h(fakeMsg("evt-0")) // registers the consumer, whose own commit must not be the one that fails
	require.NoError(t, err)
	lost := errors.New("connection lost before COMMIT")
	db.FailNextCommit(lost)
	_, err = h(fakeMsg("evt-1"))
	require.ErrorIs(t, err, lost, "the router nacks the message")
	require.EqualValues(t, 100, db.Balance("wallet"))
	require.Empty(t, db.State(fakeConsumer, "evt-1"))
	_, err = h(fakeMsg("evt-1"))
	require.NoError(t, err)
	require.EqualValues(t, 200, db.Balance("wallet"))
	require.EqualValues(t, 3, calls.Load())
}

func TestFake_AConsumersTableMadeAnewIsRegisteredAgainAndNoCopyIsTakenForNew(t *testing.T) {
	t.Parallel()
	db, ib := fakeInbox(t)
	var calls atomic.Int64
	h := ib.Middleware(fakeCredit(100, &calls))
	_, err := h(fakeMsg("evt-1"))
	require.NoError(t, err)
	db.RenumberConsumers() // the cached id now names no consumer
	_, err = h(fakeMsg("evt-2"))
	require.NoError(t, err, "the claim fails on the stale id, and goes again with the id the name has now")
	_, err = h(fakeMsg("evt-1"))
	require.NoError(t, err)
	require.EqualValues(t, 2, calls.Load())
	require.EqualValues(t, 200, db.Balance("wallet"))
}

func TestFake_LeaseModeCompletesSkipsCopiesWaitsForAHolderAndFencesALateOne(t *testing.T) {
	t.Parallel()
	db, ib := fakeInbox(t, inbox.WithLease(time.Minute))
	var calls atomic.Int64
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if calls.Add(1) == 1 {
			once.Do(func() { close(entered) })
			<-release // the first holder hangs past its lease
		}
		return nil, nil
	})
	first := make(chan error, 1)
	go func() { _, err := h(fakeMsg("evt-1")); first <- err }()
	<-entered
	require.Equal(t, "processing", db.State(fakeConsumer, "evt-1"), "the claim committed before the call out")

	_, err := h(fakeMsg("evt-1"))
	require.ErrorIs(t, err, inbox.ErrLeaseHeld, "a copy waits while the lease is live")

	db.Advance(2 * time.Minute) // the first holder's lease runs out
	_, err = h(fakeMsg("evt-1"))
	require.NoError(t, err, "a copy takes the expired lease over and completes")
	require.Equal(t, "done", db.State(fakeConsumer, "evt-1"))

	close(release)
	require.ErrorIs(t, <-first, inbox.ErrLeaseLost, "the late holder's completion is refused")
	require.Equal(t, "done", db.State(fakeConsumer, "evt-1"))
	_, err = h(fakeMsg("evt-1"))
	require.NoError(t, err)
	require.EqualValues(t, 2, calls.Load(), "the copy after completion is skipped")
}

func TestFake_TheClaimAtCommitFindsACopyAtCommitAndTheCopyIsSkipped(t *testing.T) {
	t.Parallel()
	db, ib := fakeInbox(t, inbox.WithClaimAtCommit())
	var calls atomic.Int64
	h := ib.Middleware(fakeCredit(100, &calls))
	_, err := h(fakeMsg("evt-1"))
	require.NoError(t, err)
	require.Equal(t, "done", db.State(fakeConsumer, "evt-1"))
	_, err = h(fakeMsg("evt-1"))
	require.NoError(t, err)
	require.EqualValues(t, 2, calls.Load(), "the copy's handler ran before its claim met the row at COMMIT")
	require.EqualValues(t, 100, db.Balance("wallet"), "and its effect was rolled back with it")
}

func TestFake_AJoinedSubscriberTransactionHoldsTheClaimAndEffectUntilTheSubscriberCommits(t *testing.T) {
	t.Parallel()
	db, ib := fakeInbox(t)
	var calls atomic.Int64
	fails := true
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if _, err := fakeCredit(100, &calls)(msg); err != nil {
			return nil, err
		}
		if fails {
			fails = false
			return nil, errors.New("fails after its write")
		}
		return nil, nil
	})
	sub, err := db.Begin(context.Background(), driver.TxOptions{})
	require.NoError(t, err)
	deliver := func(id string) error {
		msg := fakeMsg(id)
		msg.SetContext(fakedb.Subscribe(context.Background(), sub))
		_, err := h(msg)
		return err
	}
	require.ErrorContains(t, deliver("evt-1"), "fails after its write")
	require.NoError(t, deliver("evt-1"), "the redelivery in the same transaction finds the failed attempt rolled back")
	require.NoError(t, deliver("evt-1"), "a copy in the same transaction is skipped")
	require.Zero(t, db.Balance("wallet"), "nothing is visible before the subscriber commits")
	require.Empty(t, db.State(fakeConsumer, "evt-1"))

	require.NoError(t, sub.Commit(context.Background()), "the inbox left the subscriber's transaction to the subscriber")
	require.EqualValues(t, 100, db.Balance("wallet"))
	require.Equal(t, "done", db.State(fakeConsumer, "evt-1"))
	require.EqualValues(t, 2, calls.Load())
}

func TestFake_BatchModeAppliesEachMessageOnceAndRollsBackOnlyAFailingMember(t *testing.T) {
	t.Parallel()
	db, ib := fakeInbox(t, inbox.WithBatch(20*time.Millisecond, 8))
	var calls atomic.Int64
	var failed atomic.Bool
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if _, err := fakeCredit(100, &calls)(msg); err != nil {
			return nil, err
		}
		if msg.Metadata.Get(inbox.DefaultIDMetadataKey) == "evt-3" && failed.CompareAndSwap(false, true) {
			return nil, errors.New("fails after its write")
		}
		return nil, nil
	})
	ids := []string{"evt-0", "evt-1", "evt-2", "evt-3", "evt-4", "evt-5", "evt-6", "evt-7", "evt-0", "evt-1"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for { // a nacked message is delivered again
				_, err := h(fakeMsg(id))
				if err == nil {
					return
				}
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, errs, 1, "only the failing member is nacked: %v", errs)
	require.ErrorContains(t, errs[0], "fails after its write")
	require.EqualValues(t, 800, db.Balance("wallet"), "each of the eight IDs once")
	require.Equal(t, 8, db.Rows())
}

func TestFake_AClaimThatLosesALockConflictIsTriedAgainBeforeTheHandlerRuns(t *testing.T) {
	t.Parallel()
	db, ib := fakeInbox(t)
	var calls atomic.Int64
	h := ib.Middleware(fakeCredit(100, &calls))
	db.FailNextClaims(2, dialect.LockConflict) // a deadlock between waiting inserts, twice
	_, err := h(fakeMsg("evt-1"))
	require.NoError(t, err, "the third claim wins; the router never sees the conflicts")
	require.EqualValues(t, 1, calls.Load())
	require.EqualValues(t, 100, db.Balance("wallet"))

	db.FailNextClaims(3, dialect.LockConflict)
	_, err = h(fakeMsg("evt-2"))
	require.ErrorContains(t, err, "lost a lock conflict", "three lost claims nack the message for a redelivery")
	require.EqualValues(t, 1, calls.Load(), "the handler never ran")
	_, err = h(fakeMsg("evt-2"))
	require.NoError(t, err)
	require.EqualValues(t, 200, db.Balance("wallet"))
}

// A handler whose own statement failed because a transaction-pooling proxy gave its prepared statement another
// server connection gets the advice the inbox gives for its own statements, in transaction and batch mode.
func TestFake_AHandlersStatementMissingItsPreparedStatementIsExplained(t *testing.T) {
	t.Parallel()
	missing := &fakedb.Error{Kind: dialect.StatementMissing, Msg: `prepared statement "stmt_1" does not exist`}
	plain := errors.New("the provider said no")
	handler := func(msg *message.Message) ([]*message.Message, error) {
		switch msg.Metadata.Get(inbox.DefaultIDMetadataKey) {
		case "evt-missing":
			return nil, missing
		case "evt-plain":
			return nil, plain
		}
		return nil, nil
	}
	check := func(t *testing.T, errs map[string]error) {
		t.Helper()
		require.ErrorIs(t, errs["evt-missing"], missing, "the handler's error, wrapped")
		require.ErrorContains(t, errs["evt-missing"], "default_query_exec_mode=cache_describe")
		require.Equal(t, plain.Error(), errs["evt-plain"].Error(), "any other error is the handler's as it returned it")
	}

	t.Run("transaction", func(t *testing.T) {
		t.Parallel()
		_, ib := fakeInbox(t)
		errs := map[string]error{}
		for _, id := range []string{"evt-missing", "evt-plain"} {
			_, errs[id] = ib.Middleware(handler)(fakeMsg(id))
		}
		check(t, errs)
	})
	t.Run("batch", func(t *testing.T) {
		t.Parallel()
		_, ib := fakeInbox(t, inbox.WithBatch(time.Millisecond, 8))
		release := inbox.HoldBatches(ib, fakeConsumer) // the three wait, then go as one batch
		var mu sync.Mutex
		var wg sync.WaitGroup
		errs := map[string]error{}
		for _, id := range []string{"evt-missing", "evt-plain", "evt-ok"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := ib.Middleware(handler)(fakeMsg(id))
				mu.Lock()
				defer mu.Unlock()
				errs[id] = err
			}()
		}
		require.Eventually(t, func() bool { return inbox.BatchPending(ib, fakeConsumer) == 3 }, 10*time.Second, time.Millisecond)
		release()
		wg.Wait()
		check(t, errs)
		require.NoError(t, errs["evt-ok"])
	})
}
