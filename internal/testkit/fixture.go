package testkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

// consumer is the fixed consumer name of the suite's inboxes.
const consumer = "wallet-credits"

var tableSeq atomic.Int64

func UniqueName(prefix string) string {
	return fmt.Sprintf("%s_%d_%d_%d", prefix, os.Getpid(), time.Now().UnixNano()%1e6, tableSeq.Add(1))
}

type Wallet struct {
	Conn     Conn
	Table    string           // the inbox table
	Accounts string           // the side-effect table
	Logs     *RecordingLogger // give it to the inbox with Options
	d        Dialect
}

// bundle is the suite's name for the Wallet of one case.
type bundle = Wallet

func NewWallet(t testing.TB, conn Conn, opts ...inbox.MaintenanceOption) *Wallet {
	t.Helper()
	return newWallet(t, conn, true, opts...)
}

func NewEmptyWallet(t testing.TB, conn Conn) *Wallet {
	t.Helper()
	return newWallet(t, conn, false)
}

func DropInbox(t testing.TB, conn Conn, table string) {
	t.Helper()
	(&Wallet{Conn: conn, d: conn.Dialect(), Table: table}).Drop(t)
}

// newBundle is NewWallet for the suite's cases, and with the inbox's tables left to the case unless migrate.
func newBundle(t testing.TB, conn Conn, migrate bool) *bundle { return newWallet(t, conn, migrate) }

func newWallet(t testing.TB, conn Conn, migrate bool, opts ...inbox.MaintenanceOption) *Wallet {
	t.Helper()
	b := &Wallet{Conn: conn, d: conn.Dialect(), Table: UniqueName("inbox_test"), Logs: &RecordingLogger{}}
	b.Accounts = b.Table + "_accounts"
	t.Cleanup(func() { b.Drop(t) })
	if migrate {
		require.NoError(t, conn.Database().Migrate(context.Background(), append([]inbox.MaintenanceOption{inbox.WithTable(b.Table)}, opts...)...))
	}
	b.mustExec(t, `CREATE TABLE `+b.Accounts+` (id int PRIMARY KEY, balance bigint NOT NULL)`)
	b.mustExec(t, `INSERT INTO `+b.Accounts+` (id, balance) VALUES (1, 0)`)
	return b
}

// Drop removes the accounts table and every object the inbox creates under the wallet's table name (its side
// tables, functions, triggers). The wallet's test does it when it ends; dropping twice is harmless.
func (b *Wallet) Drop(t testing.TB) {
	t.Helper()
	stmts := b.d.DropInbox(b.Table)
	if b.Accounts != "" {
		stmts = append([]string{`DROP TABLE IF EXISTS ` + b.Accounts}, stmts...)
	}
	for _, s := range stmts {
		if _, err := b.exec(context.Background(), s); err != nil {
			t.Errorf("drop the test's tables (%s): %v", s, err)
		}
	}
}

// Options are the inbox options of the wallet's tests: its table, the consumer "wallet-credits" and its logger,
// then opts, which may override them.
func (b *Wallet) Options(opts ...inbox.Option) []inbox.Option {
	return append([]inbox.Option{inbox.WithTable(b.Table), inbox.WithConsumer(consumer), inbox.WithLogger(b.Logs)}, opts...)
}

// inbox builds an Inbox over the database under test with the case's options and opts.
func (b *bundle) inbox(t *testing.T, opts ...inbox.Option) *inbox.Inbox {
	t.Helper()
	ib, err := b.Conn.Database().New(b.Options(opts...)...)
	require.NoError(t, err)
	return ib
}

// p returns the placeholder of the n-th argument.
func (b *Wallet) p(n int) string { return b.d.Param(n) }

// exec runs one statement in a transaction of its own and reports how many rows it affected.
func (b *Wallet) exec(ctx context.Context, query string, args ...any) (n int64, err error) {
	err = b.inTx(ctx, func(tx driver.Tx) error {
		n, err = tx.Exec(ctx, query, args...)
		return err
	})
	return n, err
}

func (b *Wallet) mustExec(t testing.TB, query string, args ...any) int64 {
	t.Helper()
	n, err := b.exec(context.Background(), query, args...)
	require.NoError(t, err, "%s: %s", b.d.Name, query)
	return n
}

// queryRow runs a query of one row in a transaction of its own and scans it into dest.
func (b *Wallet) queryRow(t testing.TB, query string, args []any, dest ...any) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, b.inTx(ctx, func(tx driver.Tx) error {
		return tx.QueryRow(ctx, query, args...).Scan(dest...)
	}), "%s: %s", b.d.Name, query)
}

func (b *Wallet) inTx(ctx context.Context, f func(driver.Tx) error) error {
	tx, err := b.Conn.Pool().Begin(ctx, driver.TxOptions{})
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		return errors.Join(err, tx.Rollback(ctx))
	}
	return tx.Commit(ctx)
}

// Credit is a handler whose side effect is not idempotent: every run adds amount to account 1, on the
// transaction the inbox gives the handler, found as the Conn's ExecInHandler finds it. calls, when not nil,
// counts its runs.
func (b *Wallet) Credit(amount int, calls *atomic.Int64) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		if calls != nil {
			calls.Add(1)
		}
		err := b.Conn.ExecInHandler(msg.Context(), `UPDATE `+b.Accounts+` SET balance = balance + `+b.p(1)+` WHERE id = 1`, amount)
		return nil, err
	}
}

// Balance reads account 1's balance.
func (b *Wallet) Balance(t testing.TB) int {
	t.Helper()
	var n int
	b.queryRow(t, `SELECT balance FROM `+b.Accounts+` WHERE id = 1`, nil, &n)
	return n
}

// Rows counts the inbox rows of the consumer named name.
func (b *Wallet) Rows(t testing.TB, name string) int {
	t.Helper()
	var n int
	b.queryRow(t, `SELECT count(*) FROM `+b.d.View(b.Table)+` WHERE consumer = `+b.p(1), []any{name}, &n)
	return n
}

// Row reads the state and attempts (0 for none) of the row of the consumer named name for the event ID id.
func (b *Wallet) Row(t testing.TB, name, id string) (state string, attempts int) {
	t.Helper()
	b.queryRow(t, `SELECT state, coalesce(attempts, 0) FROM `+b.d.View(b.Table)+` WHERE consumer = `+b.p(1)+` AND message_id = `+b.p(2),
		[]any{name, id}, &state, &attempts)
	return state, attempts
}

// rows counts the inbox rows of the suite's consumer.
func (b *bundle) rows(t testing.TB) int { return b.Rows(t, consumer) }

// row reads the state and attempts of the suite's consumer's row for id.
func (b *bundle) row(t testing.TB, id string) (state string, attempts int) {
	return b.Row(t, consumer, id)
}

// lastError reads the error lease mode stored with the consumer's row for id, "" for none.
func (b *bundle) lastError(t *testing.T, id string) string {
	t.Helper()
	var text string
	b.queryRow(t, `SELECT coalesce(last_error, '') FROM `+b.d.View(b.Table)+` WHERE consumer = `+b.p(1)+` AND message_id = `+b.p(2),
		[]any{consumer, id}, &text)
	return text
}

// age moves the last state change of the consumer's rows whose IDs are ids back by d, as time would.
func (b *bundle) age(t *testing.T, consumerName string, d time.Duration, ids ...string) {
	t.Helper()
	for _, id := range ids {
		n := b.mustExec(t, `UPDATE `+b.Table+` SET processed_at = `+b.d.ProcessedAgo(d)+` WHERE `+b.d.Row(b.Table), consumerName, id)
		require.EqualValues(t, 1, n, "age %s/%s", consumerName, id)
	}
	if age := b.d.AgeConsumer; age != nil && age(b.Table, d) != "" {
		b.mustExec(t, age(b.Table, d), consumerName)
	}
}

func NewMessage(eventID string) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"account_id":1,"amount":100}`))
	if eventID != "" {
		msg.Metadata.Set(inbox.DefaultIDMetadataKey, eventID)
	}
	msg.SetContext(context.Background())
	return msg
}

// newMsg is NewMessage, as the suite's cases call it.
func newMsg(eventID string) *message.Message { return NewMessage(eventID) }
