package pgxinbox_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/effectively-once/watermill-inbox/inboxtest"
)

// These tests pin down what watermill-sql v4's subscriber itself does with its transaction, without the inbox:
// the behaviour the inbox's savepoint and its commit guard are there for. Should a release of v4 change it, they
// say so.

// subscriberTxID returns the ID of the subscriber's transaction in ctx.
func subscriberTxID(ctx context.Context) (int64, error) {
	var id int64
	switch tx := subscribersNative(ctx).(type) {
	case *sql.Tx:
		return id, tx.QueryRowContext(ctx, `SELECT txid_current()`).Scan(&id)
	case pgx.Tx:
		return id, tx.QueryRow(ctx, `SELECT txid_current()`).Scan(&id)
	}
	return 0, errors.New("no subscriber transaction in the message's context")
}

// execSubscriberTx runs query on the subscriber's transaction in ctx.
func execSubscriberTx(ctx context.Context, query string, args ...any) error {
	switch tx := subscribersNative(ctx).(type) {
	case *sql.Tx:
		_, err := tx.ExecContext(ctx, query, args...)
		return err
	case pgx.Tx:
		_, err := tx.Exec(ctx, query, args...)
		return err
	}
	return errors.New("no subscriber transaction in the message's context")
}

func TestSQLv4Subscriber(t *testing.T) {
	t.Parallel()
	for name, a := range v4Adapters {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			t.Run("RedeliversANackedMessageInTheSameTransaction", func(t *testing.T) {
				t.Parallel()
				b := v4Bundle(t)
				topic := newV4Topic(t, b)
				router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
				require.NoError(t, err)
				var mu sync.Mutex
				var txIDs []int64
				router.AddConsumerHandler("wallet-credits", topic, newV4Subscriber(t, a, b, "wallet"), func(msg *message.Message) error {
					id, err := subscriberTxID(msg.Context())
					if err != nil {
						return err
					}
					mu.Lock()
					txIDs = append(txIDs, id)
					n := len(txIDs)
					mu.Unlock()
					if err := execSubscriberTx(msg.Context(), `UPDATE `+b.Accounts+` SET balance = balance + 100 WHERE id = 1`); err != nil {
						return err
					}
					if n == 1 {
						return errors.New("nack")
					}
					return nil
				})
				inboxtest.RunRouter(t, router)

				publishV4(t, b, topic, newMsg("evt-1"))
				require.Eventually(t, func() bool { return b.Balance(t) > 0 }, 10*time.Second, 20*time.Millisecond)
				mu.Lock()
				defer mu.Unlock()
				require.Len(t, txIDs, 2)
				require.Equal(t, txIDs[0], txIDs[1], "the redelivery runs in the transaction the nacked attempt wrote in")
				require.Equal(t, 200, b.Balance(t), "the nacked attempt's write commits with the redelivery's")
			})

			if !a.givesUpSafely {
				return
			}

			t.Run("CommitsAHalfRunHandlersWritesWhenTheSubscriberClosesOnItsOwn", func(t *testing.T) {
				t.Parallel()
				b := v4Bundle(t)
				topic := newV4Topic(t, b)
				router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
				require.NoError(t, err)
				started, release := make(chan struct{}), make(chan struct{})
				sub := newV4Subscriber(t, a, b, "wallet")
				router.AddConsumerHandler("wallet-credits", topic, sub, func(msg *message.Message) error {
					if err := execSubscriberTx(msg.Context(), `UPDATE `+b.Accounts+` SET balance = balance + 100 WHERE id = 1`); err != nil {
						return err
					}
					close(started)
					<-release
					return errors.New("the handler never finished its work")
				})
				inboxtest.RunRouter(t, router)
				t.Cleanup(func() { close(release) })
				publishV4(t, b, topic, newMsg("evt-1"))
				<-started
				require.NoError(t, sub.Close())
				require.Equal(t, 100, b.Balance(t), "the subscriber committed the write of a handler that is still running")
			})

			t.Run("CommitsAHalfRunHandlersWritesAtTheAckDeadlineAndRedelivers", func(t *testing.T) {
				t.Parallel()
				b := v4Bundle(t)
				topic := newV4Topic(t, b)
				router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
				require.NoError(t, err)
				deadline := 300 * time.Millisecond
				var calls atomic.Int64
				gate, release := inboxtest.Gate(t)
				router.AddConsumerHandler("wallet-credits", topic, newV4SubscriberWith(t, a, b, "wallet", &deadline, nil), func(msg *message.Message) error {
					if err := execSubscriberTx(msg.Context(), `UPDATE `+b.Accounts+` SET balance = balance + 100 WHERE id = 1`); err != nil {
						return err
					}
					if calls.Add(1) == 1 {
						<-gate // outlives the ack deadline
						return errors.New("the handler never finished its work")
					}
					return nil
				})
				inboxtest.RunRouter(t, router)

				publishV4(t, b, topic, newMsg("evt-1"))
				require.Eventually(t, func() bool { return calls.Load() == 2 }, 10*time.Second, 20*time.Millisecond,
					"the message is delivered again while the first run is still going")
				release()
				require.Eventually(t, func() bool { return b.Balance(t) == 200 }, 10*time.Second, 20*time.Millisecond,
					"the first, unfinished run's write was committed, and the second run's too")
			})
		})
	}
}
