package inbox_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/lib/pq"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

func TestSubscriberTx_ARedeliveryLeavesNoSavepointBehind(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	topic := newSQLTopic(t, b.db)
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)

	// Outside the inbox, once the message finally succeeded: is any savepoint of the inbox's still open in the
	// subscriber's transaction? A probe savepoint keeps the transaction usable whatever the answer.
	var leaked atomic.Int64
	probed := make(chan error, 1)
	router.AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err != nil {
				return out, err
			}
			tx, _ := wsql.TxFromContext(msg.Context())
			ctx := msg.Context()
			_, err = tx.ExecContext(ctx, `SAVEPOINT probe`)
			require.NoError(t, err)
			if _, err := tx.ExecContext(ctx, `RELEASE SAVEPOINT watermill_inbox_claim`); err == nil {
				leaked.Add(1)
			} else {
				_, err = tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT probe`)
				require.NoError(t, err)
				_, err = tx.ExecContext(ctx, `RELEASE SAVEPOINT probe`)
				require.NoError(t, err)
			}
			probed <- nil
			return out, nil
		}
	})
	router.AddMiddleware(inbox.Middleware(b.db, inbox.WithTable(b.Table)))
	var calls atomic.Int64
	router.AddConsumerHandler("wallet-credits", topic, newSQLSubscriber(t, b.db, "wallet"), func(msg *message.Message) error {
		if _, err := b.Credit(100, nil)(msg); err != nil {
			return err
		}
		if calls.Add(1) <= 3 {
			return errors.New("not yet")
		}
		return nil
	})
	testkit.RunRouter(t, router)

	require.NoError(t, newSQLPublisher(t, b.db).Publish(topic, newMsg("evt-1")))
	select {
	case <-probed:
	case <-time.After(15 * time.Second):
		t.Fatal("the message was never applied")
	}
	require.EqualValues(t, 4, calls.Load(), "three failed attempts in the same transaction, then success")
	require.Zero(t, leaked.Load(), "every savepoint rolled back to must be released too")
	require.Eventually(t, func() bool { return b.Rows(t, "wallet-credits") == 1 }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, 100, b.Balance(t))
}

func TestSubscriberTx_TwoConsumerGroupsSharingAConsumerNameDoNotStall(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	topic := newSQLTopic(t, b.db)
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddMiddleware(inbox.Middleware(b.db, inbox.WithTable(b.Table), inbox.WithConsumer("shared"), inbox.WithLogger(b.Logs)))
	var calls, failed atomic.Int64
	for _, group := range []string{"a", "b"} {
		router.AddConsumerHandler("credits-"+group, topic, newSQLSubscriber(t, b.db, group), func(msg *message.Message) error {
			time.Sleep(2 * time.Millisecond) // let the two groups' transactions overlap
			_, err := b.Credit(100, &calls)(msg)
			if err != nil {
				failed.Add(1)
			}
			return err
		})
	}
	testkit.RunRouter(t, router)

	const events = 40
	pub := newSQLPublisher(t, b.db)
	for i := range events {
		require.NoError(t, pub.Publish(topic, newMsg(fmt.Sprintf("evt-%d", i))))
	}
	// The subscribers' ack deadline is 30 s: a message that stalls for it does not drain in this time.
	require.Eventually(t, func() bool {
		var groups int
		require.NoError(t, b.db.QueryRow(`SELECT count(*) FROM "watermill_offsets_`+topic+`" o
			WHERE o.offset_acked = (SELECT max("offset") FROM "watermill_`+topic+`")`).Scan(&groups))
		return groups == 2
	}, 20*time.Second, 50*time.Millisecond, "both groups drain the topic")
	require.Equal(t, events, b.Rows(t, "shared"))
	require.Equal(t, events*100, b.Balance(t), "one history: each event applied once across both groups")
	// Both groups credit one account, in the subscribers' REPEATABLE READ transactions: now and then one group's
	// UPDATE fails with a serialization failure (40001) against the other's, and its message is redelivered and
	// run again. A copy the other group applied is skipped before its handler runs, so the handler succeeds once
	// per event.
	require.EqualValues(t, events, calls.Load()-failed.Load(), "handler calls that succeeded")
}

func TestSubscriberTx_ACommitBetweenDoneAndProducedLosesNoProducedMessage(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	// The subscriber's transaction is committed by someone else (its close, its ack deadline) right after the
	// statement that turns the inbox row 'done'; whatever the inbox writes after that is lost with the connection.
	d := &commitAtDone{}
	db := sql.OpenDB(commitAtDoneConnector{d: d, dsn: testDSN()})
	t.Cleanup(func() { db.Close() })
	topic := newSQLTopic(t, b.db)
	out := &testkit.RecordingPublisher{}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddMiddleware(inbox.Middleware(db, inbox.WithTable(b.Table), inbox.WithLogger(b.Logs)))
	cfg := sqlSubscriberConfig("wallet")
	deadline := time.Second
	cfg.AckDeadline = &deadline
	sub, err := wsql.NewSubscriber(db, cfg, nil)
	require.NoError(t, err)
	var calls atomic.Int64
	router.AddHandler("wallet-credits", topic, sub, "credited", out, func(msg *message.Message) ([]*message.Message, error) {
		if _, err := b.Credit(100, &calls)(msg); err != nil {
			return nil, err
		}
		return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte("credited"))}, nil
	})
	d.armed.Store(true)
	testkit.RunRouter(t, router)

	require.NoError(t, newSQLPublisher(t, b.db).Publish(topic, newMsg("evt-1")))
	require.Eventually(t, func() bool { return len(out.Messages("credited")) > 0 }, 20*time.Second, 20*time.Millisecond,
		"the produced message of an applied message must go out")
	require.True(t, d.fired.Load(), "the commit was injected")
	require.Equal(t, 100, b.Balance(t))
	sent := out.Messages("credited")[0]
	require.Equal(t, inbox.ProducedMessageUUID("wallet-credits", "evt-1", 0), sent.UUID)
}

// commitAtDone is a lib/pq wrapper that, once armed, commits the transaction of the first statement that turns an
// inbox row 'done' right after that statement, as watermill-sql's subscriber commits when it closes or its ack
// deadline passes. The connection then refuses every later statement, as one whose transaction ended under it.
type commitAtDone struct {
	armed, fired atomic.Bool
}

type commitAtDoneConnector struct {
	d   *commitAtDone
	dsn string
}

func (c commitAtDoneConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := (&pq.Driver{}).Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return &commitAtDoneConn{Conn: conn, d: c.d}, nil
}

func (c commitAtDoneConnector) Driver() driver.Driver { return &pq.Driver{} }

type commitAtDoneConn struct {
	driver.Conn
	d    *commitAtDone
	mu   sync.Mutex
	inTx bool
	dead bool
}

func (c *commitAtDoneConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if c.isDead() {
		return nil, driver.ErrBadConn
	}
	tx, err := c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.inTx = true
	c.mu.Unlock()
	return commitAtDoneTx{Tx: tx, c: c}, nil
}

func (c *commitAtDoneConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if c.isDead() {
		return nil, driver.ErrBadConn
	}
	res, err := c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
	c.mu.Lock()
	inTx := c.inTx
	c.mu.Unlock()
	if err == nil && inTx && strings.Contains(query, "SET state = 'd' ") && c.d.armed.Load() && c.d.fired.CompareAndSwap(false, true) {
		if _, err := c.Conn.(driver.ExecerContext).ExecContext(ctx, "COMMIT", nil); err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.dead = true
		c.mu.Unlock()
	}
	return res, err
}

func (c *commitAtDoneConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if c.isDead() {
		return nil, driver.ErrBadConn
	}
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (c *commitAtDoneConn) ResetSession(ctx context.Context) error {
	if c.isDead() {
		return driver.ErrBadConn
	}
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c *commitAtDoneConn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.Conn.(driver.NamedValueChecker).CheckNamedValue(nv)
}

func (c *commitAtDoneConn) IsValid() bool { return !c.isDead() }

func (c *commitAtDoneConn) isDead() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dead
}

type commitAtDoneTx struct {
	driver.Tx
	c *commitAtDoneConn
}

func (t commitAtDoneTx) Commit() error {
	t.c.mu.Lock()
	t.c.inTx = false
	t.c.mu.Unlock()
	if t.c.isDead() {
		return driver.ErrBadConn
	}
	return t.Tx.Commit()
}

func (t commitAtDoneTx) Rollback() error {
	t.c.mu.Lock()
	t.c.inTx = false
	t.c.mu.Unlock()
	if t.c.isDead() {
		return driver.ErrBadConn
	}
	return t.Tx.Rollback()
}
