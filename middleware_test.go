package inbox_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// The middleware's behaviour on every driver is in the driver suite (inboxtest, run by suite_test.go); these are
// the root's own: the README's line, a pool of one database/sql connection, and the options' checks.

func TestMiddleware_OneLineUsageCompiles(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddMiddleware(inbox.Middleware(b.db)) // the README's line, exactly
	require.NoError(t, router.Close())
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
			ib, err := inbox.New(db, append([]inbox.Option{inbox.WithTable(b.Table), inbox.WithConsumer("wallet-credits")}, opts...)...)
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
		"DeadLetterWithoutTopic":  {inbox.WithDeadLetter(&testkit.RecordingPublisher{}, "")},
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
