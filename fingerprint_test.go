package inbox_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
	"github.com/effectively-once/watermill-inbox/observe"
)

// conflictLog records the FingerprintConflict events of an inbox.
type conflictLog struct {
	observe.NopObserver
	mu     sync.Mutex
	events []observe.ConflictEvent
}

func (l *conflictLog) FingerprintConflict(_ context.Context, e observe.ConflictEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

// In watermill-sql's subscriber transaction, joined by default, the fingerprint is stored with the claim made
// 'applying' and committed with the offset; a later message under the same ID with another payload is reported
// and skipped, its handler never run.
func TestFingerprint_InTheJoinedSubscriberTransactionAReusedIDIsReportedAndSkipped(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	topic := newSQLTopic(t, b.db)
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	require.NoError(t, err)
	acked := make(chan string, 3)
	router.AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc { // outside the inbox: the message is done
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err == nil {
				acked <- msg.Metadata.Get("type")
			}
			return out, err
		}
	})
	conflicts := &conflictLog{}
	router.AddMiddleware(inbox.Middleware(b.db, inbox.WithTable(b.Table), inbox.WithObserver(conflicts),
		inbox.WithFingerprint(inbox.Fingerprint{MetadataKeys: []string{"type"}})))
	var mu sync.Mutex
	ran := 0
	router.AddConsumerHandler("wallet-credits", topic, newSQLSubscriber(t, b.db, "wallet"), func(msg *message.Message) error {
		mu.Lock()
		ran++
		mu.Unlock()
		_, err := b.Credit(100, nil)(msg)
		return err
	})
	testkit.RunRouter(t, router)

	publisher := newSQLPublisher(t, b.db)
	for _, typ := range []string{"paid", "paid", "refunded"} {
		msg := newMsg("evt-1")
		msg.Metadata.Set("type", typ)
		require.NoError(t, publisher.Publish(topic, msg))
		select {
		case got := <-acked:
			require.Equal(t, typ, got)
		case <-time.After(15 * time.Second):
			t.Fatalf("the %s message was never acked", typ)
		}
	}
	mu.Lock()
	require.Equal(t, 1, ran, "the copy and the reused ID are both skipped")
	mu.Unlock()
	require.Equal(t, 100, b.Balance(t))
	conflicts.mu.Lock()
	defer conflicts.mu.Unlock()
	require.Len(t, conflicts.events, 1)
	require.Equal(t, observe.ModeJoined, conflicts.events[0].Mode)
	require.Equal(t, "refunded", conflicts.events[0].Message.Metadata.Get("type"))
}

// Migrate with WithFingerprint adds the column without rewriting the table: the heap keeps its file, and the rows
// written before keep their bytes, with no fingerprint.
func TestFingerprint_MigrateAddsTheColumnWithoutRewritingTheTable(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	var calls atomic.Int64
	ib, err := inbox.New(b.db, inbox.WithTable(b.Table), inbox.WithConsumer("wallet-credits"))
	require.NoError(t, err)
	_, err = ib.Middleware(b.Credit(100, &calls))(newMsg("evt-1"))
	require.NoError(t, err)
	filenode := func() (node int64) {
		require.NoError(t, b.db.QueryRow(`SELECT pg_relation_filenode($1::regclass)`, b.Table).Scan(&node))
		return node
	}
	before := filenode()
	require.NoError(t, inbox.OnSQL(b.db).Migrate(context.Background(), inbox.WithTable(b.Table),
		inbox.WithFingerprint(inbox.Fingerprint{})))
	require.Equal(t, before, filenode(), "the heap was not rewritten")
	var withFingerprint int
	require.NoError(t, b.db.QueryRow(`SELECT count(fingerprint) FROM `+b.Table).Scan(&withFingerprint))
	require.Zero(t, withFingerprint, "the row written before has none")
}
