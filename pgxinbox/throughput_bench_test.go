package pgxinbox_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
)

// BenchmarkThroughput sets the inbox on pgx v5 against the most PostgreSQL does for the same work, at 1, 4 and 8
// messages in flight:
//
//	kind=ceiling     BEGIN; the claim's INSERT ... ON CONFLICT DO NOTHING; one UPDATE; COMMIT, sent with pgx
//	                 directly, one statement per round trip and prepared, as pgbench -M prepared sends them
//	kind=middleware  the same claim and UPDATE through pgxinbox's middleware, the UPDATE run by a handler on the
//	                 pgx.Tx of pgxinbox.TxFromContext
//	kind=middleware-plainbegin  the same over pgxinbox.PlainBegin(pool), whose transactions begin with pgx's
//	                 own BeginTx: BEGIN is a round trip of its own instead of travelling with the claim
//	kind=interleaved the three above in turn on every worker, message by message (see interleaved), and
//	                 middleware-atcommit: the middleware with WithClaimAtCommit, the claim sent with COMMIT
//	kind=interleaved-10ms  handlers that work 10 ms before their UPDATE, against a consumer without an inbox that
//	                 works as long and then runs BEGIN, the UPDATE and COMMIT with pgx's own transaction, in turn
//	                 as above: the middleware's middleware-10ms-x-bare-10ms, and middleware-atcommit-10ms's
//
// Each worker of each run updates a fresh account row of its own: in-flight messages do not queue on one row's lock,
// and no kind inherits the dead row versions another left behind (they pile up while another session's snapshot
// holds back their removal, and slow every later UPDATE of the row). Besides ns/op and allocs/op, each
// sub-benchmark reports msgs/s, rt/msg (round trips per message, counted on the connections' sockets) and
// cpu-µs/msg (the process's user and system CPU time per message, the client's cost where PostgreSQL runs on
// another machine); each middleware also reports x-ceiling, its msgs/s over the ceiling's run just before it.
// wait-µs/msg is the time a message waited for PostgreSQL's answers, summed over its round trips; with -v it is
// told apart by the kind of round trip (BEGIN, COMMIT, one statement, a pipeline). Read ratios, never absolute
// rates. On a machine whose database serves other work, back-to-back runs of a few seconds swing by half or more
// and only kind=interleaved's x-ceiling ratios hold from run to run. -count repeats each sub-benchmark back to
// back, far apart from its counterparts; repeat whole runs instead:
//
//	for i in 1 2 3 4 5; do go test -run '^$' -bench Throughput -benchmem .; done | tee tput.txt
//	benchstat -col /kind tput.txt
func BenchmarkThroughput(b *testing.B) { benchThroughput(b, nil) }

// BenchmarkThroughputAsyncCommit is BenchmarkThroughput with synchronous_commit off in the benchmark's sessions:
// COMMIT returns before its WAL reaches the disk, whose flush otherwise dominates a message's time and varies with
// whatever else the disk serves. What remains is what the round trips and the client decide.
func BenchmarkThroughputAsyncCommit(b *testing.B) {
	benchThroughput(b, map[string]string{"synchronous_commit": "off"})
}

func benchThroughput(b *testing.B, params map[string]string) {
	var trips tripCounter
	pool := openCountingPoolWith(b, &trips, pgx.QueryExecModeCacheStatement, params)
	bundle := newBundleOn(b, pool)
	ctx := context.Background()
	var lastAccount atomic.Int64
	lastAccount.Store(1) // the bundle's own
	freshAccounts := func(b *testing.B, n int) []int {
		first := int(lastAccount.Add(int64(n))) - n + 1
		if _, err := pool.Exec(ctx, `INSERT INTO `+bundle.Accounts+` SELECT g, 0 FROM generate_series($1::int, $2::int) g`, first, first+n-1); err != nil {
			b.Fatal(err)
		}
		ids := make([]int, n)
		for i := range ids {
			ids[i] = first + i
		}
		return ids
	}
	update := `UPDATE ` + bundle.Accounts + ` SET balance = balance + 1 WHERE id = $1`
	// The dialect's claim, spelled out: the ceiling sends what the inbox sends, with the consumer's id registered
	// once beforehand, as an Inbox does.
	claim := `INSERT INTO ` + bundle.Table + ` (consumer_id, message_id, state) VALUES ($1, $2, $3::text::"char")
			ON CONFLICT (message_id, consumer_id) DO NOTHING
			RETURNING true`
	var ceilingID int
	if err := pool.QueryRow(ctx, `INSERT INTO `+bundle.Table+`_consumers (name) VALUES ('bench-ceiling')
			ON CONFLICT (name) DO UPDATE SET name = excluded.name RETURNING id`).Scan(&ceilingID); err != nil {
		b.Fatal(err)
	}

	ib, err := pgxinbox.New(pool, inbox.WithTable(bundle.Table), inbox.WithConsumer("bench-middleware"))
	if err != nil {
		b.Fatal(err)
	}
	// The same inbox with the deferred transactions switched off: its transactions begin with pgx's own BeginTx,
	// BEGIN a round trip of its own.
	plainBegin, err := pgxinbox.New(pgxinbox.PlainBegin(pool), inbox.WithTable(bundle.Table), inbox.WithConsumer("bench-middleware-plainbegin"))
	if err != nil {
		b.Fatal(err)
	}
	// The same inbox with the claim sent with COMMIT (WithClaimAtCommit).
	atCommit, err := pgxinbox.New(pool, inbox.WithTable(bundle.Table), inbox.WithConsumer("bench-middleware-atcommit"),
		inbox.WithClaimAtCommit())
	if err != nil {
		b.Fatal(err)
	}
	// handle runs the UPDATE through ib's middleware, after work outside the database.
	handle := func(ib *inbox.Inbox, work time.Duration) func(account int) func(context.Context, string) error {
		return func(account int) func(context.Context, string) error {
			h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
				time.Sleep(work)
				tx, ok := pgxinbox.TxFromContext(msg.Context())
				if !ok {
					return nil, fmt.Errorf("no pgx transaction in the handler's context")
				}
				_, err := tx.Exec(msg.Context(), update, account)
				return nil, err
			})
			return func(ctx context.Context, id string) error {
				msg := message.NewMessage(id, nil)
				msg.Metadata.Set(inbox.DefaultIDMetadataKey, id)
				msg.SetContext(ctx)
				_, err := h(msg)
				return err
			}
		}
	}
	kinds := map[string]func(account int) func(ctx context.Context, id string) error{
		"ceiling": func(account int) func(context.Context, string) error {
			return func(ctx context.Context, id string) error {
				return ceilingMessage(ctx, pool, claim, update, ceilingID, id, account)
			}
		},
		"middleware-plainbegin": handle(plainBegin, 0),
		"middleware":            handle(ib, 0),
		"middleware-atcommit":   handle(atCommit, 0),
	}

	// Handlers that work 10 ms before their statement, against a consumer without an inbox that works as long
	// before it begins its own transaction (pgx's BeginTx, the UPDATE, COMMIT): the inbox's part of a message that
	// spends most of its time outside the database.
	const work = 10 * time.Millisecond
	kinds["bare-10ms"] = func(account int) func(context.Context, string) error {
		return func(ctx context.Context, _ string) error {
			time.Sleep(work)
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, update, account)
				return err
			})
		}
	}
	kinds["middleware-10ms"] = handle(ib, work)
	kinds["middleware-atcommit-10ms"] = handle(atCommit, work)

	var runs atomic.Int64
	for _, inflight := range []int{1, 4, 8} {
		b.Run("inflight="+strconv.Itoa(inflight), func(b *testing.B) {
			var ceiling float64 // msgs/s of the ceiling's last, reported, run
			for _, kind := range []string{"ceiling", "middleware-plainbegin", "middleware"} {
				b.Run("kind="+kind, func(b *testing.B) {
					prefix := fmt.Sprintf("%s-%d-%d-", kind, runs.Add(1), time.Now().UnixNano())
					accounts := freshAccounts(b, inflight)
					workers := make([]func(context.Context, string) error, inflight)
					for w := range workers {
						workers[w] = kinds[kind](accounts[w])
					}
					rate := driveInFlight(b, &trips, workers, prefix, nil)
					if kind == "ceiling" {
						ceiling = rate
					} else if ceiling > 0 {
						b.ReportMetric(rate/ceiling, "x-ceiling")
					}
				})
			}
			b.Run("kind=interleaved", func(b *testing.B) {
				interleaved(b, &trips, []string{"ceiling", "middleware-plainbegin", "middleware", "middleware-atcommit"}, kinds, freshAccounts(b, 4*inflight), inflight, fmt.Sprintf("interleaved-%d-%d-", runs.Add(1), time.Now().UnixNano()))
			})
			b.Run("kind=interleaved-10ms", func(b *testing.B) {
				interleaved(b, &trips, []string{"bare-10ms", "middleware-10ms", "middleware-atcommit-10ms"}, kinds, freshAccounts(b, 3*inflight), inflight, fmt.Sprintf("interleaved-10ms-%d-%d-", runs.Add(1), time.Now().UnixNano()))
			})
		})
	}
}

// interleaved runs the kinds in turn on each worker, message by message, and times each message: whatever else
// loads the machine meanwhile loads every kind alike, which back-to-back runs of seconds each cannot promise. With
// every worker busy all along, a kind's msgs/s is the in-flight count over its mean time per message, so the ratio
// of two kinds' rates is the inverse ratio of their mean times; it reports each kind's µs/msg and each
// middleware's x-ceiling from them. Its msgs/s, rt/msg and allocs/op are those of the mix.
// accounts holds a row for each kind of each worker.
func interleaved(b *testing.B, trips *tripCounter, names []string, kinds map[string]func(account int) func(context.Context, string) error, accounts []int, inflight int, prefix string) {
	spent := make([]atomic.Int64, len(names))
	count := make([]atomic.Int64, len(names))
	workers := make([]func(context.Context, string) error, inflight)
	for w := range workers {
		own := make([]func(context.Context, string) error, len(names))
		for k, name := range names {
			own[k] = kinds[name](accounts[k*inflight+w])
		}
		turn := w
		workers[w] = func(ctx context.Context, id string) error {
			k := turn % len(names)
			turn++
			start := time.Now()
			err := own[k](ctx, id)
			spent[k].Add(int64(time.Since(start)))
			count[k].Add(1)
			return err
		}
	}
	driveInFlight(b, trips, workers, prefix, func() {
		for k := range names {
			spent[k].Store(0)
			count[k].Store(0)
		}
	})
	mean := make([]float64, len(names))
	for k, name := range names {
		mean[k] = float64(spent[k].Load()) / float64(max(count[k].Load(), 1))
		b.ReportMetric(mean[k]/1e3, name+"-µs/msg")
		if k > 0 {
			b.ReportMetric(mean[0]/mean[k], name+"-x-"+names[0])
		}
	}
}

// ceilingMessage is one message's work without the inbox, as PostgreSQL's own benchmark would send it: four
// statements, four round trips, the claim and the UPDATE prepared by pgx's statement cache.
func ceilingMessage(ctx context.Context, pool *pgxpool.Pool, claim, update string, consumerID int, id string, account int) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	var claimed bool
	if err := tx.QueryRow(ctx, claim, consumerID, id, "d").Scan(&claimed); err != nil {
		_ = tx.Rollback(ctx)
		return fmt.Errorf("claim: %w", err)
	}
	if _, err := tx.Exec(ctx, update, account); err != nil {
		_ = tx.Rollback(ctx)
		return fmt.Errorf("update: %w", err)
	}
	return tx.Commit(ctx)
}

// driveInFlight runs b.N messages through workers, each worker one message in flight at a time, and reports msgs/s
// and the round trips per message. It returns the rate. started, if not nil, is called as the clock starts.
func driveInFlight(b *testing.B, trips *tripCounter, workers []func(context.Context, string) error, prefix string, started func()) float64 {
	b.ReportAllocs()
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(workers))
	// Each worker handles a message before the clock starts, all at once, so that the pool holds a connection per
	// worker, each with its statements prepared: a kind that runs first at a new in-flight count would pay for that.
	for w, work := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := work(ctx, prefix+"warm-"+strconv.Itoa(w)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	trips.reset()
	if started != nil {
		started()
	}
	b.ResetTimer()
	cpu0, cpuKnown := processCPU()
	start := time.Now()
	for _, work := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 0, len(prefix)+20)
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				buf = strconv.AppendInt(append(buf[:0], prefix...), i, 10)
				if err := work(ctx, string(buf)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, _ := processCPU()
	b.StopTimer()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	rate := float64(b.N) / elapsed.Seconds()
	b.ReportMetric(rate, "msgs/s")
	b.ReportMetric(float64(trips.trips.Load())/float64(b.N), "rt/msg")
	b.ReportMetric(float64(trips.waitedTotal().Microseconds())/float64(b.N), "wait-µs/msg")
	if testing.Verbose() {
		for k := range turnKinds {
			if n := trips.turns[k].Load(); n > 0 {
				b.ReportMetric(float64(n)/float64(b.N), turnKindNames[k]+"-rt/msg")
				b.ReportMetric(float64(time.Duration(trips.waited[k].Load()).Microseconds())/float64(b.N), turnKindNames[k]+"-wait-µs/msg")
			}
		}
	}
	if cpuKnown {
		b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "cpu-µs/msg")
	}
	return rate
}
