package testkit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	inbox "github.com/effectively-once/watermill-inbox"
)

func InFlightCounts() []int { return []int{1, 4, 8, 64} }

func InFlight(b *testing.B, n int, handle func(i int) error) {
	b.Helper()
	var next atomic.Int64
	var failed atomic.Pointer[error]
	start := time.Now()
	b.ResetTimer()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) || failed.Load() != nil {
					return
				}
				if err := handle(int(i)); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

type ThroughputTarget struct {
	// Bare is a consumer without an inbox: BEGIN, the effect on account, COMMIT.
	Bare func(ctx context.Context, account int) error
	// New builds an Inbox over the driver's database with opts.
	New func(opts ...inbox.Option) (*inbox.Inbox, error)
	// Effect is the handler's effect on account, on the transaction in the message's context.
	Effect func(msg *message.Message, account int) error
	// Accounts is how many accounts the effects spread over (1 to Accounts): enough that messages in flight
	// rarely wait for one another's row locks.
	Accounts int
}

func Throughput(b *testing.B, t ThroughputTarget) {
	b.Helper()
	ctx := context.Background()
	run := "r" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	handler := func(msg *message.Message) ([]*message.Message, error) {
		n, _ := strconv.Atoi(msg.Metadata.Get("n"))
		return nil, t.Effect(msg, 1+n%t.Accounts)
	}
	modes := []struct {
		name string
		opts []inbox.Option
	}{
		{"inbox", nil},
		{"batch", []inbox.Option{inbox.WithBatch(0, inbox.MaxBatchSize)}},
	}
	for _, inFlight := range InFlightCounts() {
		b.Run(fmt.Sprintf("bare/inflight=%d", inFlight), func(b *testing.B) {
			InFlight(b, inFlight, func(i int) error { return t.Bare(ctx, 1+i%t.Accounts) })
		})
		for _, mode := range modes {
			ib, err := t.New(append([]inbox.Option{inbox.WithConsumer("bench-" + mode.name)}, mode.opts...)...)
			if err != nil {
				b.Fatal(err)
			}
			h := ib.Middleware(handler)
			b.Run(fmt.Sprintf("%s/inflight=%d", mode.name, inFlight), func(b *testing.B) {
				prefix := run + strconv.Itoa(inFlight) + "-" + strconv.Itoa(b.N) + "-"
				InFlight(b, inFlight, func(i int) error {
					msg := NewMessage(prefix + strconv.Itoa(i))
					msg.Metadata.Set("n", strconv.Itoa(i))
					_, err := h(msg)
					return err
				})
			})
		}
	}
}

func StdSQLThroughput(db *sql.DB, accounts int, effect string, newInbox func(opts ...inbox.Option) (*inbox.Inbox, error)) ThroughputTarget {
	return ThroughputTarget{
		Accounts: accounts,
		New:      newInbox,
		Bare: func(ctx context.Context, account int) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, effect, account); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		},
		Effect: func(msg *message.Message, account int) error {
			tx, ok := inbox.TxFromContext(msg.Context())
			if !ok {
				return errors.New("no database/sql transaction in the handler's context")
			}
			_, err := tx.ExecContext(msg.Context(), effect, account)
			return err
		},
	}
}
