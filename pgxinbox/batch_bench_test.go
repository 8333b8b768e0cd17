package pgxinbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
)

// BenchmarkRouterBatch runs messages through a real Watermill router, over a GoChannel, into a handler whose
// effect is one UPDATE on pgxinbox's pgx.Tx, with the inbox per message (mode=message) and in batch mode
// (mode=batch, WithBatch(time.Millisecond, MaxBatchSize), as the README shows it, and the default concurrency), at
// 1 to 256 messages in flight, with zero-work handlers and handlers that sleep 10 ms before their statement. A
// GoChannel topic has one message in flight (its publisher waits for the ack), so n in flight are n topics, each
// with its router handler and its publishing goroutine; the handlers share one inbox, so batch mode sees all n.
// The updates spread over 100,000 accounts: messages in flight seldom share a row.
//
// Besides msgs/s it reports rt/msg (round trips per message, counted on the sockets), cpu-µs/msg (the process's
// CPU time per message: router, GoChannel and inbox), msgs/commit (messages per claiming transaction, read from
// the inbox rows' xmin), and on Linux idle-% and machine-µs/msg: the share of the machine's CPUs left idle while
// the messages ran, and the CPU time the whole machine spent per message (this process, PostgreSQL's backends and
// whatever else runs there), both read from /proc/stat. The two modes of one row run back to back; read their
// ratio, and repeat whole runs:
//
//	for i in 1 2 3; do go test -run '^$' -bench RouterBatch -benchtime 3000x .; done | tee batch.txt
//	benchstat -col /mode batch.txt
func BenchmarkRouterBatch(b *testing.B) {
	var trips tripCounter
	pool, bundle, update := benchAccounts(b, &trips)
	var runs atomic.Int64
	for _, inFlight := range []int{1, 8, 32, 64, 128, 256} {
		for _, sleep := range []time.Duration{0, 10 * time.Millisecond} {
			for _, mode := range []string{"message", "batch"} {
				name := fmt.Sprintf("inflight=%d/work=%s/mode=%s", inFlight, sleepName(sleep), mode)
				b.Run(name, func(b *testing.B) {
					ib := inboxInMode(b, pool, bundle.Table, mode, &runs)
					credit := credit(update)
					routeInFlight(b, &trips, pool, bundle.Table, ib, inFlight, func(msg *message.Message) error {
						if sleep > 0 {
							time.Sleep(sleep)
						}
						return credit(msg)
					})
				})
			}
		}
	}
}

// inboxInMode returns an inbox on table per message (mode "message") or in batch mode ("batch", with
// WithBatch(time.Millisecond, MaxBatchSize), as the README shows it), under a consumer name of its own. A mode
// ending in "-plainbegin" is the same over pgxinbox.PlainBegin(pool), with the deferred transactions switched off.
func inboxInMode(b *testing.B, pool *pgxpool.Pool, table, mode string, runs *atomic.Int64) *inbox.Inbox {
	var p pgxinbox.Beginner = pool
	if m, ok := strings.CutSuffix(mode, "-plainbegin"); ok {
		mode, p = m, pgxinbox.PlainBegin(pool)
	}
	ib, err := pgxinbox.New(p, modeOptions(table, mode, runs)...)
	if err != nil {
		b.Fatal(err)
	}
	return ib
}

// libpqInboxInMode is inboxInMode over database/sql and lib/pq: mode is "message" or "batch".
func libpqInboxInMode(b *testing.B, db *sql.DB, table, mode string, runs *atomic.Int64) *inbox.Inbox {
	ib, err := inbox.New(db, modeOptions(table, mode+"-libpq", runs)...)
	if err != nil {
		b.Fatal(err)
	}
	return ib
}

// modeOptions are the options of an inbox on table in mode, under a consumer name of its own.
func modeOptions(table, mode string, runs *atomic.Int64) []inbox.Option {
	opts := []inbox.Option{inbox.WithTable(table), inbox.WithConsumer(fmt.Sprintf("bench-%s-%d", mode, runs.Add(1)))}
	if strings.HasPrefix(mode, "batch") {
		opts = append(opts, inbox.WithBatch(time.Millisecond, inbox.MaxBatchSize))
	}
	if strings.HasSuffix(mode, "-concurrency2") {
		opts = append(opts, inbox.WithBatchConcurrency(2))
	}
	return opts
}

// BenchmarkRouterWithoutInbox sets BenchmarkRouterBatch's two modes, with zero-work handlers, beside two consumers
// without an inbox on the same router, GoChannel and publishers: mode=none, whose handler does nothing and touches
// no database, is what the router, the GoChannel and the benchmark's publishers cost on their own (the floor under
// every mode); mode=autocommit runs the handlers' UPDATE on the pool, one statement in its own implicit
// transaction and one round trip a message, with no claim: a consumer that applies a redelivered copy twice.
// mode=batch-concurrency2 is batch mode with inbox.WithBatchConcurrency(2): two batches' pipelines overlap.
// mode=message-plainbegin and mode=batch-plainbegin are the two inbox modes over pgxinbox.PlainBegin(pool), whose
// transactions begin with BeginTx, against the deferred transactions of mode=message and mode=batch. The modes
// ending in -libpq are autocommit, message and batch over database/sql and lib/pq (inbox.New), on the same
// database, router and handlers, with their round trips counted the same way. The modes of one count in flight run
// back to back; read their ratios, and repeat whole runs:
//
//	go test -run '^$' -bench RouterWithoutInbox -benchtime 20000x .
//
// `harness curves` draws throughput and client CPU against messages in flight from that output.
func BenchmarkRouterWithoutInbox(b *testing.B) {
	var trips tripCounter
	pool, bundle, update := benchAccounts(b, &trips)
	db := openCountingLibpq(b, &trips)
	var runs atomic.Int64
	for _, inFlight := range []int{1, 8, 64, 256} {
		for _, mode := range []string{"none", "autocommit", "message", "message-plainbegin", "batch", "batch-concurrency2", "batch-plainbegin",
			"autocommit-libpq", "message-libpq", "batch-libpq"} {
			b.Run(fmt.Sprintf("inflight=%d/mode=%s", inFlight, mode), func(b *testing.B) {
				switch mode {
				case "none":
					routeInFlight(b, &trips, pool, "", nil, inFlight, func(*message.Message) error { return nil })
				case "autocommit":
					routeInFlight(b, &trips, pool, "", nil, inFlight, func(msg *message.Message) error {
						n, _ := strconv.Atoi(msg.Metadata.Get("n"))
						_, err := pool.Exec(msg.Context(), update, 1+n%accounts)
						return err
					})
				case "autocommit-libpq":
					routeInFlight(b, &trips, pool, "", nil, inFlight, func(msg *message.Message) error {
						n, _ := strconv.Atoi(msg.Metadata.Get("n"))
						_, err := db.ExecContext(msg.Context(), update, 1+n%accounts)
						return err
					})
				case "message-libpq", "batch-libpq":
					ib := libpqInboxInMode(b, db, bundle.Table, strings.TrimSuffix(mode, "-libpq"), &runs)
					routeInFlight(b, &trips, pool, bundle.Table, ib, inFlight, credit(update))
				default:
					ib := inboxInMode(b, pool, bundle.Table, mode, &runs)
					routeInFlight(b, &trips, pool, bundle.Table, ib, inFlight, credit(update))
				}
			})
		}
	}
}

// BenchmarkRedeliveredBurst is the burst of copies that follows a rebalance or a crash: b.N messages applied once,
// then delivered again, every one a copy, 64 at a time (64 goroutines, each its own share in turn, as 64
// partitions), straight to the middleware, per message and in batch mode. It reports the copies' rate and their
// round trips. In batch mode the copies that meet in a batch end with its claim and one read of their rows.
//
//	go test -run '^$' -bench RedeliveredBurst -benchtime 5000x .
func BenchmarkRedeliveredBurst(b *testing.B) {
	var trips tripCounter
	pool, bundle, update := benchAccounts(b, &trips)
	var runs atomic.Int64
	for _, mode := range []string{"message", "batch"} {
		b.Run("inflight=64/mode="+mode, func(b *testing.B) {
			credit := credit(update)
			h := inboxInMode(b, pool, bundle.Table, mode, &runs).Middleware(func(msg *message.Message) ([]*message.Message, error) {
				return nil, credit(msg)
			})
			prefix := fmt.Sprintf("burst-%d-%d-", time.Now().UnixNano(), b.N)
			deliver := func() {
				var wg sync.WaitGroup
				for t := range 64 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := t; i < b.N; i += 64 {
							msg := newMsg(prefix + strconv.Itoa(i))
							msg.Metadata.Set("n", strconv.Itoa(i))
							if _, err := h(msg); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
			}
			deliver() // applied once
			trips.reset()
			b.ResetTimer()
			start := time.Now()
			deliver() // every one a copy
			elapsed := time.Since(start)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "copies/s")
			b.ReportMetric(float64(trips.trips.Load())/float64(b.N), "rt/copy")
		})
	}
}

// accounts is how many accounts the batch benchmarks' updates spread over.
const accounts = 100_000

// credit is the batch benchmarks' handler: update, on the inbox's transaction (pgxinbox's pgx.Tx, or the *sql.Tx
// of an inbox over database/sql), credits the account that the message's number picks.
func credit(update string) func(msg *message.Message) error {
	return func(msg *message.Message) error {
		n, _ := strconv.Atoi(msg.Metadata.Get("n"))
		ctx, account := msg.Context(), 1+n%accounts
		if tx, ok := pgxinbox.TxFromContext(ctx); ok {
			_, err := tx.Exec(ctx, update, account)
			return err
		}
		if tx, ok := inbox.TxFromContext(ctx); ok {
			_, err := tx.ExecContext(ctx, update, account)
			return err
		}
		return fmt.Errorf("no transaction in the handler's context")
	}
}

// benchAccounts opens a pool whose round trips trips counts, with a bundle whose accounts table holds accounts
// accounts, and returns them with the UPDATE that credits one account by its ID.
func benchAccounts(b *testing.B, trips *tripCounter) (*pgxpool.Pool, *testBundle, string) {
	pool := openCountingPoolWith(b, trips, pgx.QueryExecModeCacheStatement, nil)
	bundle := newBundleOn(b, pool)
	if _, err := pool.Exec(context.Background(), `INSERT INTO `+bundle.Accounts+` SELECT g, 0 FROM generate_series(2, $1::int) g`, accounts); err != nil {
		b.Fatal(err)
	}
	return pool, bundle, `UPDATE ` + bundle.Accounts + ` SET balance = balance + 1 WHERE id = $1`
}

func sleepName(d time.Duration) string {
	if d == 0 {
		return "none"
	}
	return d.String()
}

// routeInFlight publishes b.N messages to a router of inFlight handlers behind ib, one GoChannel topic each, and
// reports the rate from the first publish to the last ack. With ib nil the handlers run without an inbox, and
// with table "" it does not count the inbox's commits.
func routeInFlight(b *testing.B, trips *tripCounter, pool interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, table string, ib *inbox.Inbox, inFlight int, handle func(msg *message.Message) error) routed {
	b.ReportAllocs()
	logger := watermill.NopLogger{}
	ch := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: time.Minute}, logger)
	if err != nil {
		b.Fatal(err)
	}
	var failed atomic.Int64
	prefix := fmt.Sprintf("r%d-%d-", time.Now().UnixNano(), b.N)
	for t := range inFlight {
		h := router.AddConsumerHandler("h"+strconv.Itoa(t), "t"+strconv.Itoa(t), ch, func(msg *message.Message) error {
			if err := handle(msg); err != nil {
				if failed.Add(1) == 1 {
					b.Error(err)
				}
				return err
			}
			return nil
		})
		if ib != nil {
			h.AddMiddleware(ib.Middleware)
		}
	}
	go func() { _ = router.Run(context.Background()) }()
	<-router.Running()
	defer router.Close()

	publish := func(from, to int) {
		var wg sync.WaitGroup
		for t := range inFlight {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := from + t; i < to; i += inFlight {
					id := prefix + strconv.Itoa(i)
					msg := message.NewMessage(id, nil)
					msg.Metadata.Set(inbox.DefaultIDMetadataKey, id)
					msg.Metadata.Set("n", strconv.Itoa(i))
					if err := ch.Publish("t"+strconv.Itoa(t), msg); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	// One message per handler before the clock starts: the pool's connections open and prepare the statements.
	publish(-inFlight, 0)
	if failed.Load() > 0 {
		b.FailNow()
	}
	var r routed
	trips.reset()
	b.ResetTimer()
	cpu0, cpuKnown := processCPU()
	busy0, idle0, cpus, machineKnown := machineTicks()
	start := time.Now()
	publish(0, b.N)
	elapsed := time.Since(start)
	cpu1, _ := processCPU()
	busy1, idle1, _, _ := machineTicks()
	b.StopTimer()
	if failed.Load() > 0 {
		b.Fatalf("%d handler calls failed", failed.Load())
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(trips.trips.Load())/float64(b.N), "rt/msg")
	b.ReportMetric(float64(trips.waitedTotal().Microseconds())/float64(b.N), "wait-µs/msg")
	if cpuKnown {
		r.cpu = float64((cpu1 - cpu0).Microseconds()) / float64(b.N)
		b.ReportMetric(r.cpu, "cpu-µs/msg")
	}
	if ticks := (busy1 - busy0) + (idle1 - idle0); machineKnown && ticks > 0 {
		busyShare := float64(busy1-busy0) / float64(ticks)
		r.machine = busyShare * float64(cpus) * float64(elapsed.Microseconds()) / float64(b.N)
		b.ReportMetric(100*(1-busyShare), "idle-%")
		b.ReportMetric(r.machine, "machine-µs/msg")
	}
	if table == "" {
		return r
	}
	var commits int
	if err := pool.QueryRow(context.Background(), `SELECT count(DISTINCT xmin::text) FROM `+table+
		` WHERE message_id::text LIKE $1 || '%' AND message_id::text NOT LIKE $1 || '-%'`, prefix).Scan(&commits); err != nil {
		b.Fatal(err)
	}
	if commits > 0 {
		r.perCommit = float64(b.N) / float64(commits)
		b.ReportMetric(r.perCommit, "msgs/commit")
	}
	return r
}

// routed is what routeInFlight measured, for a benchmark that reads it: each figure is 0 where the platform does
// not tell it.
type routed struct {
	perCommit float64 // messages per claiming transaction
	cpu       float64 // this process's CPU time per message, in µs
	machine   float64 // the whole machine's CPU time per message, in µs
}

// BenchmarkBatchFloor is what pgx alone does with a batch's statements, with no inbox and no router: one
// connection, one batch after another, each BEGIN; for each of n messages a savepoint and the UPDATE of
// BenchmarkRouterBatch, all in one pipeline; COMMIT. There is no claim, so it does less than a batch does. Read its
// cpu-µs/msg beside BenchmarkRouterBatch's: it is the part of the client's time that pgx and the statements
// take, and its msgs/s what the database does for one client that waits for nothing else.
//
//	go test -run '^$' -bench 'BatchFloor|RouterBatch/inflight=64/work=none' -benchtime 20000x .
func BenchmarkBatchFloor(b *testing.B) {
	pool, _, update := benchAccounts(b, &tripCounter{})
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	for _, n := range []int{16, inbox.MaxBatchSize} {
		b.Run(fmt.Sprintf("size=%d", n), func(b *testing.B) {
			var batch pgx.Batch
			next := 0
			run := func(messages int) {
				for done := 0; done < messages; done += n {
					batch.QueuedQueries = batch.QueuedQueries[:0]
					batch.Queue("begin")
					for k := range n {
						batch.Queue("savepoint m" + strconv.Itoa(k))
						batch.Queue(update, 1+next%accounts)
						next++
					}
					batch.Queue("commit")
					if err := conn.SendBatch(ctx, &batch).Close(); err != nil {
						b.Fatal(err)
					}
				}
			}
			run(n) // the statements' preparation
			b.ResetTimer()
			cpu0, cpuKnown := processCPU()
			start := time.Now()
			run(b.N)
			elapsed := time.Since(start)
			cpu1, _ := processCPU()
			messages := (b.N + n - 1) / n * n
			b.ReportMetric(float64(messages)/elapsed.Seconds(), "msgs/s")
			if cpuKnown {
				b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(messages), "cpu-µs/msg")
			}
		})
	}
}

// BenchmarkRouterStragglers is BenchmarkRouterBatch at 64 messages in flight with zero-work handlers, except that
// one message in a hundred (every=100), or in ten (every=10), works 100 ms before its statement (a slow call out):
// per-message mode, and batch mode. A batch commits when its slowest handler returns, so a straggler keeps its
// batch's messages in flight with it; the batches after it go on beside it.
//
//	go test -run '^$' -bench RouterStragglers -benchtime 5000x .
func BenchmarkRouterStragglers(b *testing.B) {
	var trips tripCounter
	pool, bundle, update := benchAccounts(b, &trips)
	var runs atomic.Int64
	for _, every := range []int{100, 10} {
		for _, mode := range []string{"message", "batch"} {
			b.Run(fmt.Sprintf("every=%d/mode=%s", every, mode), func(b *testing.B) {
				ib := inboxInMode(b, pool, bundle.Table, mode, &runs)
				credit := credit(update)
				routeInFlight(b, &trips, pool, bundle.Table, ib, 64, func(msg *message.Message) error {
					if n, _ := strconv.Atoi(msg.Metadata.Get("n")); n%every == every-1 {
						time.Sleep(100 * time.Millisecond)
					}
					return credit(msg)
				})
			})
		}
	}
}

// BenchmarkRouterBatchCost splits what batch mode costs at 64 messages in flight with zero-work handlers into
// what a commit costs and what a message costs. It runs BenchmarkRouterBatch's batch mode with batches capped at 8,
// 16, 32 and 64 messages (WithBatch's maxSize), so that the same messages go in more or fewer transactions, and
// fits each CPU time per message, the whole machine's and this process's, to per-message + per-commit ÷
// msgs/commit, by least squares over the caps. It logs the two terms of each fit. A commit's term holds its
// transaction's three round trips and the work the inbox does once a batch; a message's holds its router,
// GoChannel and handler, its savepoint and statement, and its part in the claim.
//
// A mode's rate is the CPU it keeps busy divided by what a message costs, and batch mode at 64 in flight leaves a
// quarter to a third of the machine idle (BenchmarkRouterBatch's idle-%). Read the per-commit term beside it: it is what a
// smaller batch pays for starting sooner.
//
//	go test -run '^$' -bench RouterBatchCost -benchtime 20000x -v .
func BenchmarkRouterBatchCost(b *testing.B) {
	var trips tripCounter
	pool, bundle, update := benchAccounts(b, &trips)
	got := make(map[int]routed)
	caps := []int{8, 16, 32, inbox.MaxBatchSize}
	for _, size := range caps {
		b.Run(fmt.Sprintf("inflight=64/work=none/size=%d", size), func(b *testing.B) {
			ib, err := pgxinbox.New(pool, inbox.WithTable(bundle.Table), inbox.WithBatch(time.Millisecond, size),
				inbox.WithConsumer(fmt.Sprintf("cost-%d-%d", size, time.Now().UnixNano())))
			if err != nil {
				b.Fatal(err)
			}
			got[size] = routeInFlight(b, &trips, pool, bundle.Table, ib, 64, credit(update))
		})
	}
	for _, part := range []struct {
		name string
		of   func(routed) float64
	}{{"machine", func(r routed) float64 { return r.machine }}, {"process", func(r routed) float64 { return r.cpu }}} {
		var xs, ys []float64
		for _, size := range caps {
			if r, ok := got[size]; ok && r.perCommit > 0 && part.of(r) > 0 {
				xs, ys = append(xs, 1/r.perCommit), append(ys, part.of(r))
			}
		}
		if perMessage, perCommit, ok := fitLine(xs, ys); ok {
			b.Logf("%s CPU: %.1f µs a message + %.0f µs a commit (%d caps)", part.name, perMessage, perCommit, len(xs))
		}
	}
}

// fitLine fits y = a + c·x by least squares; ok is false without two distinct xs.
func fitLine(xs, ys []float64) (a, c float64, ok bool) {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for k := range xs {
		sx, sy, sxx, sxy = sx+xs[k], sy+ys[k], sxx+xs[k]*xs[k], sxy+xs[k]*ys[k]
	}
	d := n*sxx - sx*sx
	if len(xs) < 2 || d <= 0 {
		return 0, 0, false
	}
	c = (n*sxy - sx*sy) / d
	return (sy - c*sx) / n, c, true
}
