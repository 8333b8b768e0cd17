package inbox_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// The price of the inbox on one message, without a broker: compare the sub-benchmarks of one run, as ratios
// (go test -run '^$' -bench . -count 5 | benchstat), never their absolute times on another machine.
//
//	bare        BEGIN, the effect, COMMIT: what a consumer without an inbox does
//	inbox       the same effect through the middleware: BEGIN, claim, effect, COMMIT
//	duplicate   a copy the inbox skips: BEGIN, claim, read, ROLLBACK
//	lease       lease mode around a handler that does nothing: claim, then the fenced 'done'
func BenchmarkMiddleware(b *testing.B) {
	_, tb := setup(b)
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

	txMode, err := inbox.New(tb.db, inbox.WithTable(tb.Table), inbox.WithConsumer("bench-inbox"))
	if err != nil {
		b.Fatal(err)
	}
	credit := txMode.Middleware(tb.Credit(1, nil))
	run("inbox", func(i int) error {
		_, err := credit(newMsg("evt-" + strconv.Itoa(i) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)))
		return err
	})

	if _, err := credit(newMsg("evt-dup")); err != nil {
		b.Fatal(err)
	}
	run("duplicate", func(int) error {
		_, err := credit(newMsg("evt-dup"))
		return err
	})

	leaseMode, err := inbox.New(tb.db, inbox.WithTable(tb.Table), inbox.WithConsumer("bench-lease"), inbox.WithLease(time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	noop := leaseMode.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	run("lease", func(i int) error {
		_, err := noop(newMsg("evt-" + strconv.Itoa(i) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)))
		return err
	})
}

// BenchmarkThroughput compares, at 1 to 64 messages in flight, a consumer without an inbox, the inbox per message
// and the inbox in batch mode, over lib/pq (testkit.Throughput says how). Read msgs/s as ratios within one run.
func BenchmarkThroughput(b *testing.B) {
	_, tb := setup(b)
	tb.db.SetMaxOpenConns(16)
	const accounts = 1000
	if _, err := tb.db.Exec(`INSERT INTO ` + tb.Accounts + ` SELECT g, 0 FROM generate_series(2, 1000) g`); err != nil {
		b.Fatal(err)
	}
	effect := `UPDATE ` + tb.Accounts + ` SET balance = balance + 1 WHERE id = $1`
	testkit.Throughput(b, testkit.StdSQLThroughput(tb.db, accounts, effect, func(opts ...inbox.Option) (*inbox.Inbox, error) {
		return inbox.New(tb.db, append([]inbox.Option{inbox.WithTable(tb.Table)}, opts...)...)
	}))
}
