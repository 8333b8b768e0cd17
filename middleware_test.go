package inbox_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/inboxtest"
)

func TestMiddleware_OneLineUsageCompiles(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddMiddleware(inbox.Middleware(b.db)) // the README's line, exactly
	require.NoError(t, router.Close())
}

func TestMiddleware_ScopesTheInboxPerConsumer(t *testing.T) {
	t.Parallel()

	t.Run("TwoHandlersOfOneTopicEachApplyAMessageOnce", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		pubsub := newGoChannel(t)
		router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
		require.NoError(t, err)
		// No WithConsumer: each handler's name scopes its own history.
		router.AddMiddleware(inbox.Middleware(b.db, inbox.WithTable(b.table), inbox.WithLogger(b.logs)))
		var walletCalls, auditCalls atomic.Int64
		router.AddConsumerHandler("wallet-credits", "deposits", pubsub, noPublish(b.credit(100, &walletCalls)))
		router.AddConsumerHandler("audit", "deposits", pubsub, noPublish(b.credit(1, &auditCalls)))
		runRouter(t, router)

		for range 2 {
			require.NoError(t, pubsub.Publish("deposits", newMsg("evt-1")))
		}
		require.Eventually(t, func() bool { return len(b.logs.find("skipped duplicate")) == 2 }, 10*time.Second, 10*time.Millisecond)
		require.EqualValues(t, 1, walletCalls.Load())
		require.EqualValues(t, 1, auditCalls.Load())
		require.Equal(t, 101, b.balance(t))
		require.Equal(t, 1, b.rows(t, "wallet-credits"))
		require.Equal(t, 1, b.rows(t, "audit"))
	})

	t.Run("AFixedConsumerNameOverridesTheHandlerName", func(t *testing.T) {
		t.Parallel()
		ib, b := setup(t, inbox.WithConsumer("ledger"))
		_, err := ib.Middleware(b.credit(100, nil))(newMsg("evt-1"))
		require.NoError(t, err)
		require.Equal(t, 1, b.rows(t, "ledger"))
	})

	t.Run("RefusesToRunWithoutAnyConsumerName", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		ib, err := inbox.New(b.db, inbox.WithTable(b.table), inbox.WithRejectDelay(time.Millisecond))
		require.NoError(t, err)
		var calls atomic.Int64
		_, err = ib.Middleware(b.credit(100, &calls))(newMsg("evt-1")) // no router, so no handler name
		require.ErrorIs(t, err, inbox.ErrNoConsumer)
		require.Zero(t, calls.Load())
	})
}

func TestMiddleware_OneTransaction(t *testing.T) {
	t.Parallel()

	t.Run("TheRouterAcksOnlyAfterTheCommit", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		pubsub := newGoChannel(t)
		router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
		require.NoError(t, err)
		router.AddMiddleware(inbox.Middleware(b.db, inbox.WithTable(b.table)))
		rowAtAck := make(chan int, 1)
		router.AddConsumerHandler("wallet-credits", "deposits", pubsub, func(msg *message.Message) error {
			go func() { // observes the ack from outside the handler, as the broker would
				<-msg.Acked()
				var n int
				_ = b.db.QueryRow(`SELECT count(*) FROM ` + b.table).Scan(&n)
				rowAtAck <- n
			}()
			_, err := b.credit(100, nil)(msg)
			return err
		})
		runRouter(t, router)
		require.NoError(t, pubsub.Publish("deposits", newMsg("evt-1")))
		select {
		case n := <-rowAtAck:
			require.Equal(t, 1, n, "the inbox row must be committed when the message is acked")
		case <-time.After(10 * time.Second):
			t.Fatal("message was never acked")
		}
	})
}

func TestMiddleware_Duplicate(t *testing.T) {
	t.Parallel()

	t.Run("IsSkippedLoggedAndAcked", func(t *testing.T) {
		t.Parallel()
		ib, b := setup(t)
		var calls atomic.Int64
		h := ib.Middleware(b.credit(100, &calls))
		_, err := h(newMsg("evt-2"))
		require.NoError(t, err)
		produced, err := h(newMsg("evt-2"))
		require.NoError(t, err, "a duplicate returns nil, so the router acks it and the offset moves on")
		require.Empty(t, produced)
		require.EqualValues(t, 1, calls.Load())
		require.Equal(t, 100, b.balance(t))

		skips := b.logs.find("skipped duplicate")
		require.Len(t, skips, 1)
		require.Equal(t, "info", skips[0].level)
		require.Equal(t, "wallet-credits", skips[0].fields["consumer"])
		require.Equal(t, "evt-2", skips[0].fields["event_id"])
	})
}

// A handler's error or panic rolls back its effect and its claim on every driver: the suite's
// AHandlerErrorRollsBackTheEffectAndTheClaim and AHandlerPanicRollsBackTheEffectAndTheClaim. Under the router:
func TestMiddleware_HandlerFailure(t *testing.T) {
	t.Parallel()

	t.Run("APanicUnderTheRouterIsNackedAndRedelivered", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		pubsub := newGoChannel(t)
		router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
		require.NoError(t, err)
		router.AddMiddleware(inbox.Middleware(b.db, inbox.WithTable(b.table)))
		var calls atomic.Int64
		router.AddConsumerHandler("wallet-credits", "deposits", pubsub, func(msg *message.Message) error {
			if _, err := b.credit(100, &calls)(msg); err != nil {
				return err
			}
			if calls.Load() == 1 {
				panic("first delivery panics")
			}
			return nil
		})
		runRouter(t, router)
		require.NoError(t, pubsub.Publish("deposits", newMsg("evt-1"))) // returns once the message is acked
		require.EqualValues(t, 2, calls.Load())
		require.Equal(t, 100, b.balance(t))
	})
}

func TestMiddleware_AFailedCommitIsNackedAndAppliesNothing(t *testing.T) {
	t.Parallel()
	ib, b := setup(t)
	// A deferred constraint is checked at COMMIT, so the handler and the claim succeed and the commit fails.
	limits := b.table + "_limits"
	_, err := b.db.Exec(`CREATE TABLE ` + limits + ` (id int, CONSTRAINT one_credit UNIQUE (id) DEFERRABLE INITIALLY DEFERRED)`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = b.db.Exec(`DROP TABLE ` + limits) })

	_, err = ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if _, err := b.credit(100, nil)(msg); err != nil {
			return nil, err
		}
		tx, _ := inbox.TxFromContext(msg.Context())
		_, err := tx.ExecContext(msg.Context(), `INSERT INTO `+limits+` VALUES (1), (1)`)
		return nil, err
	})(newMsg("evt-1"))
	require.ErrorContains(t, err, "inbox: commit wallet-credits/evt-1")
	require.Equal(t, 0, b.balance(t))
	require.Equal(t, 0, b.rows(t, "wallet-credits"))
}

// A consumer's first message registers its name, which takes a connection of its own. It must take it before the
// message's transaction holds one: a pool that every handler drains while it waits for a second connection never
// gives one back. One connection is the smallest such pool.
func TestMiddleware_AConsumersFirstMessageNeedsOneConnectionOnly(t *testing.T) {
	t.Parallel()
	modes := map[string][]inbox.Option{
		"TransactionMode": nil,
		"BatchMode":       {inbox.WithBatch(time.Millisecond, 8)},
		"LeaseMode":       {inbox.WithLease(time.Minute)},
	}
	for name, opts := range modes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t)
			db := openDB(t)
			db.SetMaxOpenConns(1)
			ib, err := inbox.New(db, append([]inbox.Option{inbox.WithTable(b.table), inbox.WithConsumer("wallet-credits")}, opts...)...)
			require.NoError(t, err)
			var calls atomic.Int64
			msg := newMsg("evt-1")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			msg.SetContext(ctx)
			_, err = ib.Middleware(func(*message.Message) ([]*message.Message, error) {
				calls.Add(1)
				return nil, nil
			})(msg)
			require.NoError(t, err, "the message is applied with the pool's one connection")
			require.EqualValues(t, 1, calls.Load())
			require.Equal(t, "done", b.leaseRow(t, "evt-1").state)
		})
	}
}

func TestNew_RejectsInvalidOptionsAtConstruction(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	cases := map[string][]inbox.Option{
		"EmptyMetadataKey":        {inbox.WithIDMetadataKey("")},
		"TableWithSQL":            {inbox.WithTable("inbox; DROP TABLE accounts")},
		"UpperCaseTable":          {inbox.WithTable("Inbox")},
		"TableTooLong":            {inbox.WithTable(strings.Repeat("a", 49))},
		"DeadLetterWithoutTopic":  {inbox.WithDeadLetter(&inboxtest.RecordingPublisher{}, "")},
		"DeadLetterWithNilPub":    {inbox.WithDeadLetter(nil, "dlq")},
		"ZeroMaxIDLength":         {inbox.WithMaxIDLength(0)},
		"MaxIDLengthPastTheIndex": {inbox.WithMaxIDLength(5000)},
		"NegativeRejectDelay":     {inbox.WithRejectDelay(-time.Second)},
	}
	for name, opts := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := inbox.New(db, opts...)
			require.ErrorIs(t, err, inbox.ErrInvalidOption)
			require.Panics(t, func() { inbox.Middleware(db, opts...) })
		})
	}
	t.Run("NilDB", func(t *testing.T) {
		_, err := inbox.New(nil)
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
	})
	t.Run("UUIDModeNeedsNoMetadataKey", func(t *testing.T) {
		_, err := inbox.New(db, inbox.WithMessageUUIDAsID(), inbox.WithIDMetadataKey(""))
		require.NoError(t, err)
	})
}

// noPublish adapts a HandlerFunc to the no-publisher handler signature.
func noPublish(h message.HandlerFunc) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		_, err := h(msg)
		return err
	}
}
