package inboxtest

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
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
)

// consumer is the fixed consumer name of the suite's inboxes.
const consumer = "wallet-credits"

var tableSeq atomic.Int64

// UniqueName returns prefix followed by the test process's ID, the clock and a sequence number: a table name that
// no other test, driver or test process uses at the same time. A prefix of up to 24 characters leaves it within
// the inbox's limit of 48 characters for a table name.
func UniqueName(prefix string) string {
	return fmt.Sprintf("%s_%d_%d_%d", prefix, os.Getpid(), time.Now().UnixNano()%1e6, tableSeq.Add(1))
}

// bundle is what one case needs: the database under test, a fresh inbox table, a side-effect table with account 1
// at balance 0, and what the inbox logged.
type bundle struct {
	conn     Conn
	d        Dialect
	table    string
	accounts string
	logs     *RecordingLogger
}

// newBundle creates the case's tables, the inbox's through Migrate unless migrate is false, and drops them when
// the case ends.
func newBundle(t *testing.T, conn Conn, migrate bool) *bundle {
	t.Helper()
	b := &bundle{conn: conn, d: conn.Dialect(), table: UniqueName("inbox_suite"), logs: &RecordingLogger{}}
	b.accounts = b.table + "_accounts"
	t.Cleanup(func() {
		stmts := append([]string{`DROP TABLE IF EXISTS ` + b.accounts}, b.d.DropInbox(b.table)...)
		for _, s := range stmts {
			if _, err := b.exec(context.Background(), s); err != nil {
				t.Errorf("drop the case's tables (%s): %v", s, err)
			}
		}
	})
	if migrate {
		require.NoError(t, conn.Database().Migrate(context.Background(), inbox.WithTable(b.table)))
	}
	b.mustExec(t, `CREATE TABLE `+b.accounts+` (id int PRIMARY KEY, balance bigint NOT NULL)`)
	b.mustExec(t, `INSERT INTO `+b.accounts+` (id, balance) VALUES (1, 0)`)
	return b
}

// options are the case's inbox options: its table, the fixed consumer and its logger, then opts.
func (b *bundle) options(opts ...inbox.Option) []inbox.Option {
	return append([]inbox.Option{inbox.WithTable(b.table), inbox.WithConsumer(consumer), inbox.WithLogger(b.logs)}, opts...)
}

// inbox builds an Inbox over the database under test with the case's options and opts.
func (b *bundle) inbox(t *testing.T, opts ...inbox.Option) *inbox.Inbox {
	t.Helper()
	ib, err := b.conn.Database().New(b.options(opts...)...)
	require.NoError(t, err)
	return ib
}

// p returns the placeholder of the n-th argument.
func (b *bundle) p(n int) string { return b.d.Param(n) }

// exec runs one statement in a transaction of its own and reports how many rows it affected.
func (b *bundle) exec(ctx context.Context, query string, args ...any) (n int64, err error) {
	err = b.inTx(ctx, func(tx driver.Tx) error {
		n, err = tx.Exec(ctx, query, args...)
		return err
	})
	return n, err
}

func (b *bundle) mustExec(t *testing.T, query string, args ...any) int64 {
	t.Helper()
	n, err := b.exec(context.Background(), query, args...)
	require.NoError(t, err, "%s: %s", b.d.Name, query)
	return n
}

// queryRow runs a query of one row in a transaction of its own and scans it into dest.
func (b *bundle) queryRow(t *testing.T, query string, args []any, dest ...any) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, b.inTx(ctx, func(tx driver.Tx) error {
		return tx.QueryRow(ctx, query, args...).Scan(dest...)
	}), "%s: %s", b.d.Name, query)
}

func (b *bundle) inTx(ctx context.Context, f func(driver.Tx) error) error {
	tx, err := b.conn.Pool().Begin(ctx, driver.TxOptions{})
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		return errors.Join(err, tx.Rollback(ctx))
	}
	return tx.Commit(ctx)
}

// credit is a handler whose side effect is not idempotent: every run adds amount to account 1, on the
// transaction the inbox gives the handler. calls counts its runs.
func (b *bundle) credit(amount int, calls *atomic.Int64) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		calls.Add(1)
		err := b.conn.ExecInHandler(msg.Context(), `UPDATE `+b.accounts+` SET balance = balance + `+b.p(1)+` WHERE id = 1`, amount)
		return nil, err
	}
}

// balance reads account 1's balance.
func (b *bundle) balance(t *testing.T) int64 {
	t.Helper()
	var n int64
	b.queryRow(t, `SELECT balance FROM `+b.accounts+` WHERE id = 1`, nil, &n)
	return n
}

// rows counts the inbox rows of the consumer.
func (b *bundle) rows(t *testing.T) int64 {
	t.Helper()
	return b.rowsOf(t, consumer)
}

// rowsOf counts the inbox rows of the consumer named name.
func (b *bundle) rowsOf(t *testing.T, name string) int64 {
	t.Helper()
	var n int64
	b.queryRow(t, `SELECT count(*) FROM `+b.d.View(b.table)+` WHERE consumer = `+b.p(1), []any{name}, &n)
	return n
}

// row reads the state and attempts of the consumer's row for id.
func (b *bundle) row(t *testing.T, id string) (state string, attempts int64) {
	t.Helper()
	b.queryRow(t, `SELECT state, coalesce(attempts, 0) FROM `+b.d.View(b.table)+` WHERE consumer = `+b.p(1)+` AND message_id = `+b.p(2),
		[]any{consumer, id}, &state, &attempts)
	return state, attempts
}

// lastError reads the error lease mode stored with the consumer's row for id, "" for none.
func (b *bundle) lastError(t *testing.T, id string) string {
	t.Helper()
	var text string
	b.queryRow(t, `SELECT coalesce(last_error, '') FROM `+b.d.View(b.table)+` WHERE consumer = `+b.p(1)+` AND message_id = `+b.p(2),
		[]any{consumer, id}, &text)
	return text
}

// age moves the last state change of the consumer's rows whose IDs are ids back by d, as time would.
func (b *bundle) age(t *testing.T, consumerName string, d time.Duration, ids ...string) {
	t.Helper()
	for _, id := range ids {
		n := b.mustExec(t, `UPDATE `+b.table+` SET processed_at = `+b.d.ProcessedAgo(d)+` WHERE `+b.d.Row(b.table), consumerName, id)
		require.EqualValues(t, 1, n, "age %s/%s", consumerName, id)
	}
	if age := b.d.AgeConsumer; age != nil && age(b.table, d) != "" {
		b.mustExec(t, age(b.table, d), consumerName)
	}
}

// NewMessage returns a message carrying eventID under the default metadata key (none when eventID is empty), with
// a fresh UUID, as a broker's redelivery or a relay's republish would not necessarily keep.
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
