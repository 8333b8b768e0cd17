package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
)

// BenchmarkLibpqPerMessage sets the inbox per message over lib/pq against the most PostgreSQL does for the same
// work, and against a consumer without an inbox, at 1, 4 and 8 messages in flight. The kinds of a sub-benchmark
// take turns on every worker, message by message, so that whatever else loads the machine loads them alike:
//
//	ceiling    BEGIN; the claim's INSERT ... ON CONFLICT DO NOTHING; one UPDATE; COMMIT, both statements prepared
//	           (database/sql's Stmt): one round trip each, as pgbench -M prepared sends them
//	bare       no inbox: BEGIN; the UPDATE, with an argument and unprepared, as most code sends it; COMMIT
//	inbox      the middleware, its handler running that UPDATE on the *sql.Tx: lib/pq spends two round trips on it
//	inbox-prepared  the same with the handler's UPDATE prepared: the inbox's own cost against the ceiling
//
// work=none runs zero-work handlers, and reports each kind's x-ceiling; work=10ms has each message work 10 ms
// before its first statement (the handler, or the consumer without an inbox before it begins) and reports the
// inbox's x-bare. Each kind's µs/msg is its mean time per message; rt/msg and msgs/s are those of the mix. Read
// the ratios, never the rates; repeat whole runs:
//
//	for i in 1 2 3 4 5; do go test -run '^$' -bench LibpqPerMessage -benchtime 3000x .; done | tee libpq.txt
func BenchmarkLibpqPerMessage(b *testing.B) {
	var counted trips
	db := openCountedDB(b, &counted)
	db.SetMaxIdleConns(8) // a connection per worker stays open: none is dialled while measured
	tb := newBundle(b)
	ctx := context.Background()
	ib, err := inbox.New(db, inbox.WithTable(tb.Table), inbox.WithConsumer("bench-inbox"))
	if err != nil {
		b.Fatal(err)
	}
	update := `UPDATE ` + tb.Accounts + ` SET balance = balance + 1 WHERE id = $1`
	var ceilingID int
	if err := db.QueryRow(`INSERT INTO ` + tb.Table + `_consumers (name) VALUES ('bench-ceiling') RETURNING id`).Scan(&ceilingID); err != nil {
		b.Fatal(err)
	}
	claim, err := db.Prepare(`INSERT INTO ` + tb.Table + ` (consumer_id, message_id, state) VALUES ($1, $2, 'd')
		ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true`)
	if err != nil {
		b.Fatal(err)
	}
	prepared, err := db.Prepare(update)
	if err != nil {
		b.Fatal(err)
	}
	ceiling := benchKind{"ceiling", func(account int, work time.Duration) func(string) error {
		return func(id string) error {
			time.Sleep(work)
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback() }()
			var claimed bool
			if err := tx.StmtContext(ctx, claim).QueryRowContext(ctx, ceilingID, id).Scan(&claimed); err != nil {
				return fmt.Errorf("claim: %w", err)
			}
			if _, err := tx.StmtContext(ctx, prepared).ExecContext(ctx, account); err != nil {
				return err
			}
			return tx.Commit()
		}
	}}
	bare := benchKind{"bare", func(account int, work time.Duration) func(string) error {
		return func(string) error {
			time.Sleep(work)
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback() }()
			if _, err := tx.ExecContext(ctx, update, account); err != nil {
				return err
			}
			return tx.Commit()
		}
	}}
	handler := func(stmt *sql.Stmt) func(account int, work time.Duration) func(string) error {
		return func(account int, work time.Duration) func(string) error {
			h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
				time.Sleep(work)
				tx, _ := inbox.TxFromContext(msg.Context())
				var err error
				if stmt != nil {
					_, err = tx.StmtContext(msg.Context(), stmt).ExecContext(msg.Context(), account)
				} else {
					_, err = tx.ExecContext(msg.Context(), update, account)
				}
				return nil, err
			})
			return func(id string) error {
				_, err := h(newMsg(id))
				return err
			}
		}
	}
	withInbox, withInboxPrepared := benchKind{"inbox", handler(nil)}, benchKind{"inbox-prepared", handler(prepared)}
	works := []struct {
		name  string
		work  time.Duration
		kinds []benchKind // the first is what the others are set against
	}{
		{"none", 0, []benchKind{ceiling, withInbox, withInboxPrepared, bare}},
		{"10ms", 10 * time.Millisecond, []benchKind{bare, withInbox}},
	}
	for _, w := range works {
		for _, inflight := range []int{1, 4, 8} {
			b.Run("work="+w.name+"/inflight="+strconv.Itoa(inflight), func(b *testing.B) {
				interleave(b, &counted, inflight, w.kinds, func(k benchKind) func(string) error {
					account := int(benchAccounts.Add(1)) + 1 // the bundle's own is 1
					if _, err := db.Exec(`INSERT INTO `+tb.Accounts+` VALUES ($1, 0)`, account); err != nil {
						b.Fatal(err)
					}
					return k.make(account, w.work)
				})
			})
		}
	}
}

var benchAccounts atomic.Int64

// benchKind is one way of handling a message: make builds it for a worker, on an account of the worker's own, for
// messages that work that long before their first statement.
type benchKind struct {
	name string
	make func(account int, work time.Duration) func(id string) error
}

// interleave runs b.N messages through inflight workers, each taking the kinds in turn, and reports each kind's mean
// time per message and its ratio to the first kind's. build builds a kind's work for one worker.
func interleave(b *testing.B, counted *trips, inflight int, kinds []benchKind, build func(benchKind) func(string) error) {
	spent := make([]atomic.Int64, len(kinds))
	count := make([]atomic.Int64, len(kinds))
	workers := make([]func(string) error, inflight)
	for w := range workers {
		own := make([]func(string) error, len(kinds))
		for k, kind := range kinds {
			own[k] = build(kind)
		}
		turn := w
		workers[w] = func(id string) error {
			k := turn % len(kinds)
			turn++
			start := time.Now()
			err := own[k](id)
			spent[k].Add(int64(time.Since(start)))
			count[k].Add(1)
			return err
		}
	}
	prefix := strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	// Every worker handles one message of each kind first, all at once: the pool then holds a connection per
	// worker, with the prepared statements on it.
	var wg sync.WaitGroup
	for w, work := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range kinds {
				if err := work(prefix + "warm-" + strconv.Itoa(w) + "-" + strconv.Itoa(k)); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	for k := range kinds {
		spent[k].Store(0)
		count[k].Store(0)
	}
	counted.n.Store(0)
	var next atomic.Int64
	b.ResetTimer()
	start := time.Now()
	for _, work := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if err := work(prefix + strconv.FormatInt(i, 10)); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(counted.n.Load())/float64(b.N), "rt/msg")
	mean := make([]float64, len(kinds))
	for k, kind := range kinds {
		mean[k] = float64(spent[k].Load()) / float64(max(count[k].Load(), 1))
		b.ReportMetric(mean[k]/1e3, kind.name+"-µs/msg")
		if k > 0 {
			b.ReportMetric(mean[0]/mean[k], kind.name+"-x-"+kinds[0].name)
		}
	}
}
