package inbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/lib/pq"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// The evt-2 crash: the consumer commits the credit and dies before the broker hears the ack. The consumer is a
// separate process (this test binary, re-executed) reading watermill-sql's PostgreSQL topic, which redelivers an
// unacked message to the next process. The inbox opens its own transaction (WithSubscriberTx(false)), as it does
// with Kafka: its commit and the broker's offset are two commits, and the process dies between them.

const consumerProcessEnv = "INBOX_TEST_CONSUMER_PROCESS"

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(consumerProcessEnv) != "":
		os.Exit(runConsumerProcess())
	case os.Getenv(paymentProcessEnv) != "":
		os.Exit(runPaymentProcess())
	}
	testkit.LeaveOutExamplesWhenShort()
	os.Exit(testkit.RunInOwnDatabases(m, testkit.PrivatePostgresDatabase(testDriver)))
}

// consumer process modes
const (
	crashAfterCommit = "crash-after-commit" // os.Exit(3) after the commit, before the ack
	handleOne        = "handle-one"         // handle one message, wait for its ack, exit 0
	expectNothing    = "expect-nothing"     // print how many messages arrive in two seconds
)

func TestMiddleware_ConsumerKilledBetweenCommitAndAckSkipsTheRedelivery(t *testing.T) {
	t.Parallel()

	t.Run("WithTheInboxTheAccountIsCreditedOnce", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		topic := newSQLTopic(t, b.db)
		require.NoError(t, newSQLPublisher(t, b.db).Publish(topic, newMsg("evt-2")))

		out, code := consumerProcess(t, b, topic, crashAfterCommit, true)
		require.Equal(t, 3, code, "the process dies after the commit, before the ack: %s", out)
		require.Equal(t, 100, b.Balance(t))

		out, code = consumerProcess(t, b, topic, handleOne, true)
		require.Zero(t, code, out)
		require.Contains(t, out, "skipped duplicate", "the restarted consumer is handed evt-2 again and skips it")
		require.Contains(t, out, "event_id=evt-2")
		require.Equal(t, 100, b.Balance(t), "credited once")
		require.Equal(t, 1, b.Rows(t, "wallet-credits"))

		out, code = consumerProcess(t, b, topic, expectNothing, true)
		require.Zero(t, code, out)
		require.Contains(t, out, "received=0", "the skip was acked, so the offset moved on")
	})

	t.Run("WithoutTheInboxTheSameCrashCreditsTwice", func(t *testing.T) {
		t.Parallel()
		// The control: proves the scenario really redelivers, so the first subtest could have failed.
		b := newBundle(t)
		topic := newSQLTopic(t, b.db)
		require.NoError(t, newSQLPublisher(t, b.db).Publish(topic, newMsg("evt-2")))

		_, code := consumerProcess(t, b, topic, crashAfterCommit, false)
		require.Equal(t, 3, code)
		out, code := consumerProcess(t, b, topic, handleOne, false)
		require.Zero(t, code, out)
		require.Equal(t, 200, b.Balance(t))
	})
}

// consumerProcess runs the consumer as a child process and returns its output and exit code.
func consumerProcess(t *testing.T, b *testBundle, topic, mode string, withInbox bool) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		consumerProcessEnv+"="+mode,
		"INBOX_TEST_TOPIC="+topic,
		"INBOX_TEST_TABLE="+b.Table,
		"INBOX_TEST_ACCOUNTS="+b.Accounts,
		fmt.Sprintf("INBOX_TEST_WITH_INBOX=%t", withInbox),
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return out.String(), exit.ExitCode()
	case err != nil:
		t.Fatalf("consumer process: %v\n%s", err, out.String())
	}
	return out.String(), 0
}

// runConsumerProcess is the child's main: a router on watermill-sql's topic whose handler credits account 1 by
// 100, through the inbox or, for the control, in a transaction of its own.
func runConsumerProcess() int {
	mode, topic := os.Getenv(consumerProcessEnv), os.Getenv("INBOX_TEST_TOPIC")
	accounts, table := os.Getenv("INBOX_TEST_ACCOUNTS"), os.Getenv("INBOX_TEST_TABLE")
	withInbox := os.Getenv("INBOX_TEST_WITH_INBOX") == "true"
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "consumer process:", err); return 1 }

	db, err := sql.Open(testDriver, testDSN())
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	logger := watermill.NewStdLoggerWithOut(os.Stdout, false, false)
	sub, err := wsql.NewSubscriber(db, sqlSubscriberConfig("wallet"), logger)
	if err != nil {
		return fail(err)
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
	if err != nil {
		return fail(err)
	}

	var received atomic.Int64
	router.AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			received.Add(1)
			produced, err := h(msg)
			if err == nil && mode == crashAfterCommit {
				os.Exit(3) // the credit is committed; the ack never leaves
			}
			if err == nil && mode == handleOne {
				go func() {
					<-msg.Acked()
					time.Sleep(500 * time.Millisecond) // lets the subscriber commit the ack
					_ = router.Close()
				}()
			}
			return produced, err
		}
	})
	credit := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE `+accounts+` SET balance = balance + 100 WHERE id = 1`)
		return err
	}
	if withInbox {
		router.AddMiddleware(inbox.Middleware(db, inbox.WithTable(table), inbox.WithSubscriberTx(false), inbox.WithLogger(logger)))
		router.AddConsumerHandler("wallet-credits", topic, sub, func(msg *message.Message) error {
			tx, _ := inbox.TxFromContext(msg.Context())
			return credit(msg.Context(), tx)
		})
	} else {
		router.AddConsumerHandler("wallet-credits", topic, sub, func(msg *message.Message) error {
			tx, err := db.BeginTx(msg.Context(), nil)
			if err != nil {
				return err
			}
			if err := credit(msg.Context(), tx); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		})
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if mode == expectNothing {
		ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
	}
	if err := router.Run(ctx); err != nil {
		return fail(err)
	}
	if mode == expectNothing {
		fmt.Printf("received=%d\n", received.Load())
	}
	if mode == handleOne && received.Load() == 0 {
		return fail(errors.New("no message arrived before the timeout"))
	}
	if strings.HasPrefix(mode, "crash") {
		return fail(errors.New("no message arrived, so there was nothing to crash after"))
	}
	return 0
}
