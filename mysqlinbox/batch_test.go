package mysqlinbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/mysqlinbox"
)

// A burst of copies meets in one batch while another message of the consumer is in flight beside it, its claim
// not yet committed. The copies end with the batch's claim, each returning what its first application produced:
// the batch's reads of their rows must not wait for the locks of the message in flight. Under SERIALIZABLE, where
// InnoDB makes every read a locking one, a read of the copies' IDs that scanned the consumer's rows (as InnoDB
// chose for an IN list on a table this small) would wait for the uncommitted claim, 5 s on this test's
// connections, and the copies would each go alone.
func TestBatch_CopiesEndWithTheirBatchsClaimBesideAMessageInFlight(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		isolation string
		n         int
	}{{"REPEATABLE-READ", 16}, {"READ-COMMITTED", 3}, {"SERIALIZABLE", 3}} {
		t.Run(c.isolation, func(t *testing.T) {
			t.Parallel()
			copiesBesideAMessageInFlight(t, c.isolation, c.n)
		})
	}
}

func copiesBesideAMessageInFlight(t *testing.T, isolation string, n int) {
	b := newBundle(t)
	db, err := sql.Open("mysql", testDSN()+"&tx_isolation=%27"+isolation+"%27&innodb_lock_wait_timeout=5")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	pool := &inboxtest.BeginCounter{Pool: driver.StdSQL(db)}
	ib := batchInbox(t, b, pool, n)
	var calls atomic.Int64
	h := ib.Middleware(b.producing(&calls))
	ids := inboxtest.EventIDs("evt", n)
	first := map[string]string{} // event ID -> the UUID of the message its first application produced
	for _, id := range ids {
		out, err := h(newMsg(id)) // alone: nothing else runs
		require.NoError(t, err)
		require.Len(t, out, 1)
		first[id] = out[0].UUID
	}

	h, release, held := holdTurn(t, ib, "blocker", b.producing(&calls), false)
	before := pool.Begun.Load()
	outs, errs := inboxtest.DeliverTogether(h, ids)
	begun := pool.Begun.Load() - before
	release()
	require.NoError(t, (<-held).err)

	for _, id := range ids {
		require.NoError(t, errs[id], id)
		require.Len(t, outs[id], 1, "%s's produced message goes out again", id)
		require.Equal(t, first[id], outs[id][0].UUID, id)
	}
	require.EqualValues(t, n, calls.Load(), "no copy's handler runs")
	require.EqualValues(t, 1, begun, "the copies cost the batch's transaction only")
	require.Equal(t, n, b.Balance(t))
	require.Equal(t, n+1, b.Rows(t, "wallet-credits"))
}

// batchInbox is an inbox over pool whose batches hold up to n messages and wait up to a minute to fill, one at a
// time.
func batchInbox(t *testing.T, b *testBundle, pool driver.Pool, n int) *inbox.Inbox {
	t.Helper()
	ib, err := inbox.OnDialect(mysqlinbox.Dialect(), pool).New(b.Options(inbox.WithBatch(time.Minute, n),
		inbox.WithBatchConcurrency(1))...)
	require.NoError(t, err)
	return ib
}

// heldResult is what a held delivery returned.
type heldResult struct {
	out []*message.Message
	err error
}

// holdTurn delivers id through ib's middleware around next, and holds that message in its handler until release
// is called, after next when runs is set and instead of it when not (a held write would lock the row every other
// message credits). Alone in the inbox, the message holds the consumer's turn, and its claim stays uncommitted:
// messages delivered meanwhile through h queue and form batches beside it. held receives what the held delivery
// returned.
func holdTurn(t *testing.T, ib *inbox.Inbox, id string, next message.HandlerFunc, runs bool) (h message.HandlerFunc, release func(), held <-chan heldResult) {
	t.Helper()
	blocking := make(chan struct{})
	released, release := inboxtest.Gate(t)
	h = ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if msg.Metadata.Get(inbox.DefaultIDMetadataKey) != id {
			return next(msg)
		}
		var out []*message.Message
		var err error
		if runs {
			out, err = next(msg)
		}
		close(blocking)
		<-released
		return out, err
	})
	result := make(chan heldResult, 1)
	go func() {
		out, err := h(newMsg(id))
		result <- heldResult{out, err}
	}()
	select {
	case <-blocking:
	case r := <-result:
		t.Fatalf("%s returned before it was held: %v", id, r.err)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s was not held within 10s", id)
	}
	return h, release, result
}

// countingPool counts, beside the transactions begun on it, the statements of theirs that start with prefix.
type countingPool struct {
	inboxtest.BeginCounter
	prefix string
	n      atomic.Int64
}

func (p *countingPool) Begin(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := p.BeginCounter.Begin(ctx, opts)
	return countingTx{tx, p}, err
}

type countingTx struct {
	driver.Tx
	p *countingPool
}

func (c countingTx) count(query string) {
	if strings.HasPrefix(query, c.p.prefix) {
		c.p.n.Add(1)
	}
}

func (c countingTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	c.count(query)
	return c.Tx.Exec(ctx, query, args...)
}

func (c countingTx) QueryRow(ctx context.Context, query string, args ...any) driver.Row {
	c.count(query)
	return c.Tx.QueryRow(ctx, query, args...)
}

func (c countingTx) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	c.count(query)
	return c.Tx.Query(ctx, query, args...)
}

// A batch of new messages claims them all in one INSERT, after one read of the rows already there.
func TestBatch_ClaimsItsNewMessagesInOneInsert(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	pool := &countingPool{BeginCounter: inboxtest.BeginCounter{Pool: driver.StdSQL(b.db)}, prefix: "INSERT INTO `" + b.Table + "` "}
	const n = 16
	ib := batchInbox(t, b, pool, n)
	var calls atomic.Int64
	h, release, held := holdTurn(t, ib, "blocker", b.Credit(1, &calls), false)
	claims := pool.n.Load()
	_, errs := inboxtest.DeliverTogether(h, inboxtest.EventIDs("evt", n))
	claims = pool.n.Load() - claims
	release()
	require.NoError(t, (<-held).err)
	for id, err := range errs {
		require.NoError(t, err, id)
	}
	require.EqualValues(t, 1, claims, "the batch's claim statements")
	require.EqualValues(t, n, calls.Load())
	require.Equal(t, n, b.Balance(t))
	require.Equal(t, n+1, b.Rows(t, "wallet-credits"))
}

// A copy of a message that another instance of the consumer is applying meets the batch's INSERT, which waits for
// that claim and fails when it commits: the batch then claims its IDs one by one, and the copy ends with the
// batch, its handler not run.
func TestBatch_AClaimThatMeetsACopyCommittingBesideItClaimsOneByOne(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	pool := &inboxtest.BeginCounter{Pool: driver.StdSQL(b.db)}
	const n = 8
	ib := batchInbox(t, b, pool, n)
	other, err := mysqlinbox.New(b.db, b.Options()...) // another instance of the consumer, per message
	require.NoError(t, err)
	var calls atomic.Int64
	_, releaseOther, applied := holdTurn(t, other, "evt-0", b.producing(&calls), true)
	h, release, held := holdTurn(t, ib, "blocker", b.producing(&calls), false)

	ids := inboxtest.EventIDs("evt", n)
	begun := pool.Begun.Load()
	var outs map[string][]*message.Message
	var errs map[string]error
	delivered := make(chan struct{})
	go func() {
		outs, errs = inboxtest.DeliverTogether(h, ids)
		close(delivered)
	}()
	// InnoDB refreshes what information_schema.innodb_trx shows only once it has gone 0.1 s unread: a faster poll
	// would read the same stale rows for good.
	require.Eventually(t, func() bool {
		var waiting int
		err := b.db.QueryRow(`SELECT COUNT(*) FROM information_schema.innodb_trx
			WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE ?`, "INSERT INTO `"+b.Table+"` %").Scan(&waiting)
		return err == nil && waiting == 1
	}, 10*time.Second, 200*time.Millisecond, "the batch's INSERT waits for the claim of evt-0")
	releaseOther()
	first := <-applied
	require.NoError(t, first.err)
	<-delivered
	begun = pool.Begun.Load() - begun
	release()
	require.NoError(t, (<-held).err)

	for _, id := range ids {
		require.NoError(t, errs[id], id)
		require.Len(t, outs[id], 1, id)
	}
	require.Len(t, first.out, 1)
	require.Equal(t, first.out[0].UUID, outs["evt-0"][0].UUID, "the copy returns what its first application produced")
	require.EqualValues(t, n, calls.Load(), "evt-0's handler ran once, in the other instance")
	require.EqualValues(t, 1, begun, "the batch's transaction only: no message went alone")
	require.Equal(t, n, b.Balance(t))
	require.Equal(t, n+1, b.Rows(t, "wallet-credits"))
}

// Two instances of a consumer in batch mode take three copies of each message at once: the copies race between
// batches of both, through their reads, their INSERTs and the claims one by one after an INSERT that met a copy.
// Each message is applied once, to an account of its own.
func TestBatch_CopiesRacingThroughTwoInstancesApplyOnce(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	const n = 150
	for k := 2; k <= n+1; k++ {
		_, err := b.db.Exec(`INSERT INTO `+b.Accounts+` VALUES (?, 0)`, k)
		require.NoError(t, err)
	}
	var calls atomic.Int64
	credit := func(msg *message.Message) ([]*message.Message, error) {
		calls.Add(1)
		var k int
		if _, err := fmt.Sscanf(msg.Metadata.Get(inbox.DefaultIDMetadataKey), "evt-%d", &k); err != nil {
			return nil, err
		}
		tx, _ := inbox.TxFromContext(msg.Context())
		_, err := tx.ExecContext(msg.Context(), `UPDATE `+b.Accounts+` SET balance = balance + 1 WHERE id = ?`, k+2)
		return nil, err
	}
	var instances [2]message.HandlerFunc
	for k := range instances {
		ib, err := mysqlinbox.New(b.db, b.Options(inbox.WithBatch(time.Millisecond, 16))...)
		require.NoError(t, err)
		instances[k] = ib.Middleware(credit)
	}
	var turn atomic.Int64
	h := func(msg *message.Message) ([]*message.Message, error) {
		return instances[turn.Add(1)%2](msg)
	}
	require.Empty(t, inboxtest.DeliverCopies(t, h, inboxtest.EventIDs("evt", n), 3))
	var total, credited int
	require.NoError(t, b.db.QueryRow(`SELECT COALESCE(SUM(balance), 0), COUNT(*) FROM `+b.Accounts+
		` WHERE id > 1 AND balance > 0`).Scan(&total, &credited))
	require.Equal(t, n, total, "every message applied once")
	require.Equal(t, n, credited, "each to its own account")
	require.Equal(t, n, b.Rows(t, "wallet-credits"))
	require.LessOrEqual(t, calls.Load(), int64(3*n))
}
