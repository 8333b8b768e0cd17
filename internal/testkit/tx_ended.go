package testkit

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

// aTxEndedUnderTheHandler: a handler whose statement loses a deadlock, or waits past the lock-wait timeout, and
// carries on as if nothing happened: it writes its effect and returns that write's error, or swallows every error
// and returns nil. PostgreSQL keeps the failed transaction open and refuses what follows; MySQL and MariaDB roll the
// whole transaction back on a deadlock (and on a timeout with innodb_rollback_on_timeout) and run what follows in
// autocommit, where the effect would commit with no inbox row, and the neighbours' effects with it in batch mode.
// Whatever the database, a delivery the inbox acks has its effect and its row, one it nacks has neither, and once
// every message is redelivered until acked each event is applied once.
func aTxEndedUnderTheHandler(t *testing.T, conn Conn) {
	for _, c := range []struct {
		name      string
		contend   func(t *testing.T, b *bundle) *contention
		swallowed bool
	}{
		{"DeadlockAndReturnsTheNextError", deadlock, false},
		{"DeadlockAndSwallowsEveryError", deadlock, true},
		{"LockWaitTimeoutAndReturnsTheNextError", lockWaitTimeout, false},
		{"LockWaitTimeoutAndSwallowsEveryError", lockWaitTimeout, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Run("TransactionMode", func(t *testing.T) {
				b := newBundle(t, conn, true)
				b.mustExec(t, `INSERT INTO `+b.Accounts+` (id, balance) VALUES (2, 0), (3, 0)`)
				var calls atomic.Int64
				var contended atomic.Bool
				credit := b.Credit(1, &calls)
				h := b.inbox(t).Middleware(func(msg *message.Message) ([]*message.Message, error) {
					if !contended.Swap(true) {
						done := c.contend(t, b).run(t, msg.Context())
						defer done()
					}
					_, err := credit(msg)
					if c.swallowed {
						return nil, nil
					}
					return nil, err
				})
				_, err := h(newMsg("evt-1"))
				if err == nil {
					require.EqualValues(t, 1, b.rows(t), "an acked delivery has its row")
					require.EqualValues(t, 1, b.Balance(t), "an acked delivery has its effect")
				} else {
					require.Zero(t, b.rows(t), "a nacked delivery leaves no row: %v", err)
					require.Zero(t, b.Balance(t), "a nacked delivery leaves no effect: %v", err)
				}
				require.Empty(t, DeliverCopies(t, h, []string{"evt-1"}, 1))
				require.EqualValues(t, 1, b.Balance(t), "the event is applied once")
				require.EqualValues(t, 1, b.rows(t))
			})
			t.Run("BatchMode", func(t *testing.T) {
				b := newBundle(t, conn, true)
				b.mustExec(t, `INSERT INTO `+b.Accounts+` (id, balance) VALUES (2, 0), (3, 0)`)
				var calls atomic.Int64
				credit := b.Credit(1, &calls)
				ids := EventIDs("evt", 11) // evt-0 contends; the ten others are its innocent neighbours
				gather := newBarrier(len(ids))
				contendedDone := make(chan struct{})
				var together, contended atomic.Bool
				h := b.inbox(t, inbox.WithBatch(50*time.Millisecond, 16), inbox.WithBatchConcurrency(1)).
					Middleware(func(msg *message.Message) ([]*message.Message, error) {
						if together.Load() {
							gather.wait(10 * time.Second)
							if msg.Metadata.Get(inbox.DefaultIDMetadataKey) == ids[0] && !contended.Swap(true) {
								done := c.contend(t, b).run(t, msg.Context())
								defer done()
								close(contendedDone)
							} else {
								select { // the neighbours write after the contention
								case <-contendedDone:
								case <-time.After(20 * time.Second):
								}
							}
						}
						_, err := credit(msg)
						if c.swallowed {
							return nil, nil
						}
						return nil, err
					})
				_, err := h(newMsg("evt-warm"))
				require.NoError(t, err)
				together.Store(true)
				_, errs := DeliverTogether(h, ids)
				acked := 1
				for _, id := range ids {
					if errs[id] == nil {
						acked++
					}
				}
				require.EqualValues(t, acked, b.rows(t), "the acked deliveries have their rows, the nacked none: %v", errs)
				require.EqualValues(t, acked, b.Balance(t), "the acked deliveries have their effects, the nacked none: %v", errs)
				require.Empty(t, DeliverCopies(t, h, ids, 1))
				require.EqualValues(t, len(ids)+1, b.Balance(t), "every event is applied once")
				require.EqualValues(t, len(ids)+1, b.rows(t))
			})
		})
	}
}

// contention is a transaction of the case's that makes a handler's statement fail with a lock conflict.
type contention struct {
	helper  driver.Tx
	collide func(t *testing.T, ctx context.Context) // the handler's statements that meet the conflict
	wait    sync.WaitGroup
}

// run runs the handler's colliding statements on the transaction of the message context ctx, and returns what
// ends the case's transaction once the handler's has ended.
func (c *contention) run(t *testing.T, ctx context.Context) (done func()) {
	c.collide(t, ctx)
	return func() {
		go func() { // the handler's transaction ends after the handler returns, and with it the helper's wait
			c.wait.Wait()
			_ = c.helper.Rollback(context.Background())
		}()
	}
}

// deadlock: the case's transaction changes many rows (so that InnoDB, which rolls back the lighter of two
// deadlocked transactions, picks the handler's) and account 3; the handler's changes account 2 and then 3, while
// the case's asks for 2.
func deadlock(t *testing.T, b *bundle) *contention {
	ctx := context.Background()
	helper, err := b.Conn.Pool().Begin(ctx, driver.TxOptions{})
	require.NoError(t, err)
	many := make([]string, 0, 64)
	for n := 100; n < 164; n++ {
		many = append(many, "("+strconv.Itoa(n)+", 0)")
	}
	_, err = helper.Exec(ctx, `INSERT INTO `+b.Accounts+` (id, balance) VALUES `+strings.Join(many, ", "))
	require.NoError(t, err)
	_, err = helper.Exec(ctx, `UPDATE `+b.Accounts+` SET balance = balance + 1 WHERE id = 3`)
	require.NoError(t, err)
	c := &contention{helper: helper}
	c.collide = func(t *testing.T, ctx context.Context) {
		require.NoError(t, b.Conn.ExecInHandler(ctx, `UPDATE `+b.Accounts+` SET balance = balance + 1 WHERE id = 2`))
		c.wait.Add(1)
		go func() {
			defer c.wait.Done()
			_, _ = helper.Exec(context.Background(), `UPDATE `+b.Accounts+` SET balance = balance + 1 WHERE id = 2`)
		}()
		err := b.Conn.ExecInHandler(ctx, `UPDATE `+b.Accounts+` SET balance = balance + 1 WHERE id = 3`)
		t.Logf("the handler's statement after the deadlock: %v", err)
	}
	return c
}

// lockWaitTimeout: the case's transaction holds account 3, and the handler's statement on it waits a second for
// the lock and times out.
func lockWaitTimeout(t *testing.T, b *bundle) *contention {
	ctx := context.Background()
	helper, err := b.Conn.Pool().Begin(ctx, driver.TxOptions{})
	require.NoError(t, err)
	_, err = helper.Exec(ctx, `UPDATE `+b.Accounts+` SET balance = balance + 1 WHERE id = 3`)
	require.NoError(t, err)
	require.NotNil(t, b.d.BriefLockWait, "%s's Dialect needs BriefLockWait", b.d.Name)
	c := &contention{helper: helper}
	c.collide = func(t *testing.T, ctx context.Context) {
		var err error
		for _, stmt := range b.d.BriefLockWait(`UPDATE ` + b.Accounts + ` SET balance = balance + 1 WHERE id = 3`) {
			if err = b.Conn.ExecInHandler(ctx, stmt); err != nil {
				break
			}
		}
		require.Error(t, err, "the statement times out waiting for the lock")
		t.Logf("the handler's statement after the lock wait: %v", err)
	}
	return c
}
