package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/lib/pq"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// The modes' paths that the driver suite (inboxtest) does not take: a claim that loses a lock conflict, a consumers
// table renumbered under a running Inbox, a joined transaction the test itself holds open, and a handler's own
// statement that lost its prepared statement.

// withLockTimeout returns dsn with lock_timeout set to d in its sessions' options.
func withLockTimeout(t testing.TB, dsn string, d time.Duration) string {
	t.Helper()
	return testkit.WithSessionOptions(t, dsn, "-c lock_timeout="+d.String())
}

// holdRow inserts the inbox row of (consumer, id) in a transaction it leaves open, so that a claim of the same row
// waits for it, and rolls it back when the test ends unless the test did.
func (b *testBundle) holdRow(t testing.TB, consumer, id string) *sql.Tx {
	t.Helper()
	cid := b.consumerID(t, consumer)
	tx, err := b.db.BeginTx(context.Background(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	_, err = tx.Exec(`INSERT INTO `+b.Table+` (consumer_id, message_id, state) VALUES ($1, $2, 'd')`, cid, id)
	require.NoError(t, err)
	return tx
}

func TestTransactionMode_AClaimThatLosesALockConflictIsTriedAgainBeforeTheHandlerRuns(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	// Each claim of a row another transaction holds waits for it until the lock timeout, then loses (55P03).
	lockDB := openVia(t, testDriver, withLockTimeout(t, testDSN(), time.Second))
	ib, err := inbox.New(lockDB, b.Options(inbox.WithRejectDelay(time.Millisecond))...)
	require.NoError(t, err)
	var calls atomic.Int64
	h := ib.Middleware(b.Credit(100, &calls))
	const retried = "Inbox claims again: the claim lost a lock conflict"

	holder := b.holdRow(t, "wallet-credits", "evt-1")
	done := make(chan error, 1)
	go func() { _, err := h(newMsg("evt-1")); done <- err }()
	require.Eventually(t, func() bool { return b.Logs.Count(retried) == 2 || len(done) > 0 }, 30*time.Second, 5*time.Millisecond,
		"two claims lose their lock conflict")
	require.Zero(t, len(done), "the message ended before its third claim")
	require.NoError(t, holder.Rollback()) // the third claim, waiting or about to, finds the row free
	require.NoError(t, <-done, "the third claim wins; the router never sees the conflicts")
	require.Equal(t, 2, b.Logs.Count(retried))
	require.EqualValues(t, 1, calls.Load())
	require.Equal(t, 100, b.Balance(t))
	require.Equal(t, "done", b.leaseRow(t, "evt-1").state)

	holder = b.holdRow(t, "wallet-credits", "evt-2")
	_, err = h(newMsg("evt-2"))
	require.ErrorContains(t, err, "lost a lock conflict", "three lost claims nack the message for a redelivery")
	var pqErr *pq.Error
	require.True(t, errors.As(err, &pqErr), "the lock timeout's error is kept: %v", err)
	require.Equal(t, "55P03", string(pqErr.Code))
	require.Equal(t, 4, b.Logs.Count(retried), "tried three times, the last one not again")
	require.EqualValues(t, 1, calls.Load(), "the handler never ran")
	require.NoError(t, holder.Rollback())
	_, err = h(newMsg("evt-2"))
	require.NoError(t, err)
	require.EqualValues(t, 2, calls.Load())
	require.Equal(t, 200, b.Balance(t))
	require.Equal(t, 2, b.Rows(t, "wallet-credits"))
}

func TestTransactionMode_AConsumersTableMadeAnewIsRegisteredAgainAndACopyIsStillSkipped(t *testing.T) {
	t.Parallel()
	ib, b := setup(t, inbox.WithRejectDelay(time.Millisecond))
	var calls atomic.Int64
	h := ib.Middleware(b.Credit(100, &calls))
	_, err := h(newMsg("evt-1"))
	require.NoError(t, err)
	oldID := b.consumerID(t, "wallet-credits")

	// Every name gets a new id, and its rows with it: the id the Inbox keeps now names no consumer.
	tx, err := b.db.Begin()
	require.NoError(t, err)
	for _, table := range []string{b.Table + "_consumers SET id = id", b.Table + " SET consumer_id = consumer_id",
		b.Table + "_produced SET consumer_id = consumer_id"} {
		_, err = tx.Exec(`UPDATE ` + table + ` + 100`)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit())
	newID := b.consumerID(t, "wallet-credits")
	require.Equal(t, oldID+100, newID)

	_, err = h(newMsg("evt-2"))
	require.NoError(t, err, "the claim fails on the stale id, and goes again with the id the name has now")
	require.Equal(t, 1, b.Logs.Count("Inbox registers its consumers again"))
	_, err = h(newMsg("evt-1"))
	require.NoError(t, err)
	require.EqualValues(t, 2, calls.Load(), "the copy of the message applied before is skipped")
	require.Equal(t, 200, b.Balance(t))
	var rows int
	require.NoError(t, b.db.QueryRow(`SELECT count(*) FROM `+b.Table+` WHERE consumer_id = $1`, newID).Scan(&rows))
	require.Equal(t, 2, rows, "both rows carry the id the name has now")
}

// subscriberTxKey holds, in a message's context, the transaction a test plays a subscriber's with.
type subscriberTxKey struct{}

func TestJoinedMode_ASubscribersTransactionHoldsTheClaimAndEffectUntilTheSubscriberCommits(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	joiner := driver.JoinerFunc(func(ctx context.Context) (driver.Tx, bool) {
		tx, ok := ctx.Value(subscriberTxKey{}).(*sql.Tx)
		if !ok {
			return nil, false
		}
		return driver.StdSQLTx(tx), true
	})
	ib, err := inbox.On(driver.StdSQL(b.db), joiner).New(b.Options()...)
	require.NoError(t, err)
	var calls, fails atomic.Int64
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if _, err := b.Credit(100, &calls)(msg); err != nil {
			return nil, err
		}
		if fails.Add(1) == 1 {
			return nil, errors.New("fails after its write")
		}
		return nil, nil
	})
	sub, err := b.db.BeginTx(context.Background(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Rollback() })
	deliver := func(id string) error {
		msg := newMsg(id)
		msg.SetContext(context.WithValue(context.Background(), subscriberTxKey{}, sub))
		_, err := h(msg)
		return err
	}
	require.ErrorContains(t, deliver("evt-1"), "fails after its write")
	require.NoError(t, deliver("evt-1"), "the redelivery in the same transaction finds the failed attempt rolled back")
	require.NoError(t, deliver("evt-1"), "a copy in the same transaction is skipped")
	require.Equal(t, 1, b.Logs.Count("skipped duplicate"))
	require.Zero(t, b.Balance(t), "nothing is visible before the subscriber commits")
	require.Zero(t, b.Rows(t, "wallet-credits"))

	require.NoError(t, sub.Commit(), "the inbox left the subscriber's transaction to the subscriber")
	require.Equal(t, 100, b.Balance(t))
	require.Equal(t, "done", b.leaseRow(t, "evt-1").state)
	require.EqualValues(t, 2, calls.Load())
}

// A handler whose own statement failed because a transaction-pooling proxy gave its prepared statement another
// server connection gets the advice the inbox gives for its own statements, in transaction and batch mode. The
// statement here names one that was never prepared, which PostgreSQL refuses with the same SQLSTATE (26000).
func TestModes_AHandlersStatementMissingItsPreparedStatementIsExplained(t *testing.T) {
	t.Parallel()
	plain := errors.New("the provider said no")
	type run struct {
		handler message.HandlerFunc
		missing func() error // what the handler's statement returned
	}
	newRun := func() *run {
		var mu sync.Mutex
		var missing error
		return &run{
			handler: func(msg *message.Message) ([]*message.Message, error) {
				switch msg.Metadata.Get(inbox.DefaultIDMetadataKey) {
				case "evt-missing":
					tx, ok := inbox.TxFromContext(msg.Context())
					if !ok {
						return nil, errors.New("no *sql.Tx in the handler's context")
					}
					_, err := tx.ExecContext(msg.Context(), `EXECUTE inbox_test_never_prepared`)
					mu.Lock()
					missing = err
					mu.Unlock()
					return nil, err
				case "evt-plain":
					return nil, plain
				}
				return nil, nil
			},
			missing: func() error { mu.Lock(); defer mu.Unlock(); return missing },
		}
	}
	check := func(t *testing.T, r *run, errs map[string]error) {
		t.Helper()
		missing := r.missing()
		var pqErr *pq.Error
		require.True(t, errors.As(missing, &pqErr), "the statement failed in PostgreSQL: %v", missing)
		require.Equal(t, "26000", string(pqErr.Code))
		require.ErrorIs(t, errs["evt-missing"], missing, "the handler's error, wrapped")
		require.ErrorContains(t, errs["evt-missing"], "default_query_exec_mode=cache_describe")
		require.Error(t, errs["evt-plain"])
		require.Equal(t, plain.Error(), errs["evt-plain"].Error(), "any other error is the handler's as it returned it")
	}

	t.Run("transaction", func(t *testing.T) {
		t.Parallel()
		ib, b := setup(t)
		r := newRun()
		errs := map[string]error{}
		for _, id := range []string{"evt-missing", "evt-plain"} {
			_, errs[id] = ib.Middleware(r.handler)(newMsg(id))
		}
		check(t, r, errs)
		require.Zero(t, b.Rows(t, "wallet-credits"), "neither claim commits")
	})
	t.Run("batch", func(t *testing.T) {
		t.Parallel()
		ib, b := setup(t, inbox.WithBatch(time.Millisecond, 8))
		release := inbox.HoldBatches(ib, "wallet-credits") // the three wait, then go as one batch
		r := newRun()
		var mu sync.Mutex
		var wg sync.WaitGroup
		errs := map[string]error{}
		for _, id := range []string{"evt-missing", "evt-plain", "evt-ok"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := ib.Middleware(r.handler)(newMsg(id))
				mu.Lock()
				defer mu.Unlock()
				errs[id] = err
			}()
		}
		require.Eventually(t, func() bool { return inbox.BatchPending(ib, "wallet-credits") == 3 }, 10*time.Second, time.Millisecond)
		release()
		wg.Wait()
		check(t, r, errs)
		require.NoError(t, errs["evt-ok"])
		require.Equal(t, 1, b.Rows(t, "wallet-credits"), "only the message whose handler succeeded is claimed")
	})
}
