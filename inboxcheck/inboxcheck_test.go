package inboxcheck_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/lib/pq"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/inboxcheck"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

func TestMain(m *testing.M) {
	testkit.LeaveOutExamplesWhenShort()
	os.Exit(testkit.RunInOwnDatabases(m, testkit.PostgresDatabase("postgres")))
}

// wallet is a test's database and its accounts table: account 1 and 2, at balance 0.
type wallet struct {
	db       *sql.DB
	accounts string
}

func openWallet() (*wallet, error) {
	dsn := os.Getenv("INBOX_TEST_DATABASE_URL")
	if dsn == "" {
		dsn = "postgres://root@127.0.0.1:5432/test?sslmode=disable"
	}
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("PostgreSQL is not reachable at %s (set INBOX_TEST_DATABASE_URL): %w", dsn, err)
	}
	w := &wallet{db: db, accounts: fmt.Sprintf("inboxcheck_accounts_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)}
	_, err = db.Exec(`CREATE TABLE ` + w.accounts + ` (id int PRIMARY KEY, balance bigint NOT NULL);
		INSERT INTO ` + w.accounts + ` VALUES (1, 0), (2, 0)`)
	return w, err
}

func (w *wallet) close() {
	_, _ = w.db.Exec(`DROP TABLE IF EXISTS ` + w.accounts)
	w.db.Close()
}

// deposit is an event that credits account with amount, under eventID.
func deposit(eventID string, account, amount int) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf(`{"account":%d,"amount":%d}`, account, amount)))
	msg.Metadata.Set(inbox.DefaultIDMetadataKey, eventID)
	msg.Metadata.Set("account", fmt.Sprint(account))
	msg.Metadata.Set("amount", fmt.Sprint(amount))
	return msg
}

// credit is the handler done right: its write is on the inbox's transaction.
func (w *wallet) credit(msg *message.Message) ([]*message.Message, error) {
	tx, ok := inbox.TxFromContext(msg.Context())
	if !ok {
		return nil, errors.New("no inbox transaction")
	}
	_, err := tx.ExecContext(msg.Context(), `UPDATE `+w.accounts+` SET balance = balance + $1 WHERE id = $2`,
		msg.Metadata.Get("amount"), msg.Metadata.Get("account"))
	return nil, err
}

// leakyCredit writes on a connection of its own: the inbox cannot take its write back.
func (w *wallet) leakyCredit(msg *message.Message) ([]*message.Message, error) {
	_, err := w.db.ExecContext(msg.Context(), `UPDATE `+w.accounts+` SET balance = balance + $1 WHERE id = $2`,
		msg.Metadata.Get("amount"), msg.Metadata.Get("account"))
	return nil, err
}

// config checks handler over the wallet with three deposits.
func (w *wallet) config(handler message.HandlerFunc) inboxcheck.Config {
	return inboxcheck.Config{
		Database: inbox.OnSQL(w.db),
		Options:  []inbox.Option{inbox.WithLogger(watermill.NopLogger{})},
		Handler:  handler,
		Messages: []*message.Message{deposit("evt-1", 1, 100), deposit("evt-2", 2, 250), deposit("evt-3", 1, 5)},
		Reset: func(ctx context.Context) error {
			_, err := w.db.ExecContext(ctx, `UPDATE `+w.accounts+` SET balance = 0`)
			return err
		},
		State: func(ctx context.Context) (any, error) {
			balances := map[int]int64{}
			rows, err := w.db.QueryContext(ctx, `SELECT id, balance FROM `+w.accounts)
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			for rows.Next() {
				var id int
				var balance int64
				if err := rows.Scan(&id, &balance); err != nil {
					return nil, err
				}
				balances[id] = balance
			}
			return balances, rows.Err()
		},
	}
}

func testWallet(t *testing.T) *wallet {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL; run without -short")
	}
	w, err := openWallet()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.close)
	return w
}

// recordingTB is a testing.TB that keeps what Run reports instead of failing the test that runs it. Run calls only
// the methods below; the embedded TB is nil.
type recordingTB struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

// runRecorded runs inboxcheck.Run on a recordingTB and returns what it reported.
func runRecorded(cfg inboxcheck.Config) (inboxcheck.Report, []string) {
	rec := &recordingTB{}
	var report inboxcheck.Report
	done := make(chan struct{})
	go func() {
		defer close(done)
		report = inboxcheck.Run(rec, cfg)
	}()
	<-done
	return report, rec.errors
}

func TestRun_AHandlerThatWritesInTheInboxsTransactionPassesEveryWay(t *testing.T) {
	w := testWallet(t)
	report, failures := runRecorded(w.config(w.credit))
	require.Empty(t, failures)
	require.Len(t, report.Runs, len(inboxcheck.Ways))
	want := map[int]int64{1: 105, 2: 250}
	for _, r := range report.Runs {
		require.Equal(t, want, r.State, "%s", r.Way)
	}
	byWay := map[inboxcheck.Way]inboxcheck.WayRun{}
	for _, r := range report.Runs {
		byWay[r.Way] = r
	}
	// Three messages: each way's deliveries, and how often the handler ran.
	require.EqualValues(t, [2]int64{3, 3}, [2]int64{byWay[inboxcheck.Once].Deliveries, byWay[inboxcheck.Once].HandlerRuns})
	require.EqualValues(t, [2]int64{9, 3}, [2]int64{byWay[inboxcheck.Sequential].Deliveries, byWay[inboxcheck.Sequential].HandlerRuns})
	require.EqualValues(t, [2]int64{9, 3}, [2]int64{byWay[inboxcheck.Concurrent].Deliveries, byWay[inboxcheck.Concurrent].HandlerRuns})
	require.EqualValues(t, [2]int64{6, 6}, [2]int64{byWay[inboxcheck.RolledBack].Deliveries, byWay[inboxcheck.RolledBack].HandlerRuns})
	require.EqualValues(t, [2]int64{6, 3}, [2]int64{byWay[inboxcheck.Unacked].Deliveries, byWay[inboxcheck.Unacked].HandlerRuns})
}

func TestRun_InBatchModeTheHandlerPassesToo(t *testing.T) {
	w := testWallet(t)
	cfg := w.config(w.credit)
	cfg.Options = append(cfg.Options, inbox.WithBatch(10*time.Millisecond, 8))
	report, failures := runRecorded(cfg)
	require.Empty(t, failures)
	require.Equal(t, map[int]int64{1: 105, 2: 250}, report.Runs[len(report.Runs)-1].State)
}

func TestRun_AHandlerThatWritesOnASecondConnectionFailsSayingWhy(t *testing.T) {
	w := testWallet(t)
	_, failures := runRecorded(w.config(w.leakyCredit))
	require.Len(t, failures, 1, "only the rolled-back way applies a write outside the transaction twice: %q", failures)
	require.Contains(t, failures[0], "delivered rolled back after the handler")
	require.Contains(t, failures[0], "map[int]int64{1:210, 2:500}", "each deposit applied twice")
	require.Contains(t, failures[0], "map[int]int64{1:105, 2:250}", "beside one delivery's")
	require.Contains(t, failures[0], "a write on a second connection")
}

func TestRun_AnIncompleteConfigFailsAtOnce(t *testing.T) {
	_, failures := runRecorded(inboxcheck.Config{})
	require.Len(t, failures, 1)
	require.True(t, strings.HasPrefix(failures[0], "inboxcheck: Config.Database is nil"), failures[0])
}

// TestWalletCreditsApplyOnce is the guide's example (docs/guides/testing-handlers.md), as a user's test reads.
func TestWalletCreditsApplyOnce(t *testing.T) {
	w := testWallet(t)
	db, creditWallet, accounts := w.db, w.credit, w.accounts
	inboxcheck.Run(t, inboxcheck.Config{
		Database: inbox.OnSQL(db),
		Handler:  creditWallet, // as your router runs it under the inbox
		Messages: []*message.Message{deposit("evt-1", 1, 100), deposit("evt-2", 2, 250)},
		Reset: func(ctx context.Context) error {
			_, err := db.ExecContext(ctx, `UPDATE `+accounts+` SET balance = 0`)
			return err
		},
		State: func(ctx context.Context) (any, error) {
			var total int64
			err := db.QueryRowContext(ctx, `SELECT sum(balance) FROM `+accounts).Scan(&total)
			return total, err
		},
	})
}
