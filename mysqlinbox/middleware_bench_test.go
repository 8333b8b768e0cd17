package mysqlinbox_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/mysqlinbox"
)

// The price of the inbox on one message on MariaDB, without a broker, in the shape of the root module's
// BenchmarkMiddleware on PostgreSQL, so that the two runs' ratios can be set side by side. Compare the
// sub-benchmarks of one run (go test -run '^$' -bench . -count 5 | benchstat), never their absolute times on
// another machine.
//
//	bare        BEGIN, the effect, COMMIT: what a consumer without an inbox does
//	inbox       the same effect through the middleware: BEGIN, claim, effect, COMMIT
//	duplicate   a copy the inbox skips: BEGIN, claim, read, ROLLBACK
//	lease       lease mode around a handler that does nothing: claim, then the fenced 'done'
func BenchmarkMiddleware_MariaDB(b *testing.B) {
	tb := newBundle(b)
	ctx := context.Background()
	effect := `UPDATE ` + tb.Accounts + ` SET balance = balance + 1 WHERE id = 1`
	run := func(name string, handle func(i int) error) {
		b.Run(name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if err := handle(i); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	newID := func(i int) string {
		return "evt-" + strconv.Itoa(i) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}

	run("bare", func(int) error {
		tx, err := tb.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, effect); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	})

	txMode, err := mysqlinbox.New(tb.db, inbox.WithTable(tb.Table), inbox.WithConsumer("bench-inbox"))
	if err != nil {
		b.Fatal(err)
	}
	credit := txMode.Middleware(tb.Credit(1, nil))
	run("inbox", func(i int) error {
		_, err := credit(newMsg(newID(i)))
		return err
	})

	if _, err := credit(newMsg("evt-dup")); err != nil {
		b.Fatal(err)
	}
	run("duplicate", func(int) error {
		_, err := credit(newMsg("evt-dup"))
		return err
	})

	leaseMode, err := mysqlinbox.New(tb.db, inbox.WithTable(tb.Table), inbox.WithConsumer("bench-lease"), inbox.WithLease(time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	noop := leaseMode.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	run("lease", func(i int) error {
		_, err := noop(newMsg(newID(i)))
		return err
	})
}

// BenchmarkThroughput_MariaDB is the root module's BenchmarkThroughput on MariaDB: a consumer without an inbox,
// the inbox per message and in batch mode, at 1 to 64 messages in flight. Read msgs/s as ratios within one run.
func BenchmarkThroughput_MariaDB(b *testing.B) {
	tb := newBundle(b)
	tb.db.SetMaxOpenConns(16)
	const accounts = 1000
	for n := 2; n <= accounts; n++ {
		if _, err := tb.db.Exec(`INSERT INTO `+tb.Accounts+` VALUES (?, 0)`, n); err != nil {
			b.Fatal(err)
		}
	}
	effect := `UPDATE ` + tb.Accounts + ` SET balance = balance + 1 WHERE id = ?`
	inboxtest.Throughput(b, inboxtest.StdSQLThroughput(tb.db, accounts, effect, func(opts ...inbox.Option) (*inbox.Inbox, error) {
		return mysqlinbox.New(tb.db, append([]inbox.Option{inbox.WithTable(tb.Table)}, opts...)...)
	}))
}
