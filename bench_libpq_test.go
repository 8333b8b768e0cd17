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
// work, at 1, 4 and 8 messages in flight. Three kinds take turns on every worker, message by message, so that
// whatever else loads the machine loads them alike:
//
//	ceiling    BEGIN; the claim's INSERT ... ON CONFLICT DO NOTHING; one UPDATE; COMMIT, both statements prepared
//	           (database/sql's Stmt): one round trip each, as pgbench -M prepared sends them
//	inbox      the middleware, its handler running the UPDATE with an argument on the *sql.Tx as most code does:
//	           lib/pq spends two round trips on that statement
//	inbox-prepared  the same with the handler's UPDATE prepared: the inbox's own cost against the ceiling
//
// It reports each kind's µs/msg, each inbox kind's x-ceiling (the ceiling's mean time per message over its own),
// rt/msg of the mix and msgs/s of the mix. Read the ratios, never the rates; repeat whole runs:
//
//	for i in 1 2 3 4 5; do go test -run '^$' -bench LibpqPerMessage -benchtime 3000x .; done | tee libpq.txt
func BenchmarkLibpqPerMessage(b *testing.B) {
	var counted trips
	db := openCountedDB(b, &counted)
	tb := newBundle(b)
	ctx := context.Background()
	ib, err := inbox.New(db, inbox.WithTable(tb.table), inbox.WithConsumer("bench-inbox"))
	if err != nil {
		b.Fatal(err)
	}
	update := `UPDATE ` + tb.accounts + ` SET balance = balance + 1 WHERE id = $1`
	var ceilingID int
	if err := db.QueryRow(`INSERT INTO ` + tb.table + `_consumers (name) VALUES ('bench-ceiling') RETURNING id`).Scan(&ceilingID); err != nil {
		b.Fatal(err)
	}
	claim, err := db.Prepare(`INSERT INTO ` + tb.table + ` (consumer_id, message_id, state) VALUES ($1, $2, 'd')
		ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true`)
	if err != nil {
		b.Fatal(err)
	}
	prepared, err := db.Prepare(update)
	if err != nil {
		b.Fatal(err)
	}
	ceiling := func(account int) func(string) error {
		return func(id string) error {
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
	}
	handler := func(account int, stmt *sql.Stmt) func(string) error {
		h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
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
	kinds := []struct {
		name string
		make func(account int) func(string) error
	}{
		{"ceiling", ceiling},
		{"inbox", func(account int) func(string) error { return handler(account, nil) }},
		{"inbox-prepared", func(account int) func(string) error { return handler(account, prepared) }},
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	nextAccount := 1
	for _, inflight := range []int{1, 4, 8} {
		b.Run("inflight="+strconv.Itoa(inflight), func(b *testing.B) {
			db.SetMaxIdleConns(inflight)
			var spent, count [3]atomic.Int64
			workers := make([]func(string) error, inflight)
			for w := range workers {
				var own [3]func(string) error
				for k, kind := range kinds {
					nextAccount++
					if _, err := db.Exec(`INSERT INTO `+tb.accounts+` VALUES ($1, 0)`, nextAccount); err != nil {
						b.Fatal(err)
					}
					own[k] = kind.make(nextAccount)
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
			prefix := run + "-" + strconv.Itoa(inflight) + "-" + strconv.Itoa(b.N) + "-"
			// Every worker handles one message of each kind first, all at once: the pool then holds a connection
			// per worker, with the ceiling's statements prepared on it.
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
			var mean [3]float64
			for k, kind := range kinds {
				mean[k] = float64(spent[k].Load()) / float64(max(count[k].Load(), 1))
				b.ReportMetric(mean[k]/1e3, kind.name+"-µs/msg")
			}
			b.ReportMetric(mean[0]/mean[1], "inbox-x-ceiling")
			b.ReportMetric(mean[0]/mean[2], "prepared-x-ceiling")
		})
	}
}
