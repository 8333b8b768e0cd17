package pgxinbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
)

// A statement whose context ends while it runs fails in the inbox's transaction as in pgx's own, in every query
// exec mode, whether the context is cancelled or runs out, with pgx's default handling of a cancelled context (a
// deadline on the connection) or with a cancel request (the connection's BuildContextWatcherHandler decides). Each
// runs as the transaction's first statement, which the inbox's transaction sends in one batch with BEGIN, or in a
// batch of the handler's own, whose context pgx watches (from v5.9.0 its watch ends with the batch, however it ended).
func TestDeferredTx_AStatementWhoseContextEndsFailsAsInPgxsOwnTransaction(t *testing.T) {
	t.Parallel()
	handlers := map[string]func(*pgconn.PgConn) ctxwatch.Handler{
		"Deadline": nil, // pgx's default
		"CancelRequest": func(c *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: 5 * time.Second}
		},
	}
	// The context ends well after the statement has gone to the server, and long before its sleep ends.
	const after = 50 * time.Millisecond
	ends := map[string]func() (context.Context, context.CancelFunc){
		"Cancelled": func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(after, cancel)
			return ctx, cancel
		},
		"TimedOut": func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), after)
		},
	}
	const sleep = `SELECT pg_sleep($1)::text`
	uses := map[string]func(ctx context.Context, tx pgx.Tx) error{
		"Exec": func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, sleep, 5)
			return err
		},
		"QueryRow": func(ctx context.Context, tx pgx.Tx) error {
			var s string
			return tx.QueryRow(ctx, sleep, 5).Scan(&s)
		},
		"Query": func(ctx context.Context, tx pgx.Tx) error {
			rows, err := tx.Query(ctx, sleep, 5)
			if err != nil {
				return err
			}
			rows.Close()
			return rows.Err()
		},
		"SendBatch": func(ctx context.Context, tx pgx.Tx) error {
			br := tx.SendBatch(ctx, &pgx.Batch{QueuedQueries: []*pgx.QueuedQuery{{SQL: sleep, Arguments: []any{5}}}})
			_, err := br.Exec()
			if cerr := br.Close(); err == nil {
				err = cerr
			}
			return err
		},
	}
	for modeName, mode := range queryExecModes {
		for handlerName, handler := range handlers {
			if handler != nil && mode != pgx.QueryExecModeCacheStatement {
				continue // the handler is the connection's, whatever the mode: pgx's default mode shows it is used
			}
			t.Run(modeName+"/"+handlerName, func(t *testing.T) {
				t.Parallel()
				inboxtest.SkipWhenShort(t, "PostgreSQL")
				cfg, err := pgxpool.ParseConfig(testDSN())
				require.NoError(t, err)
				cfg.ConnConfig.DefaultQueryExecMode = mode
				if handler != nil {
					cfg.ConnConfig.BuildContextWatcherHandler = handler
				}
				pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
				require.NoError(t, err)
				t.Cleanup(pool.Close)
				run := func(tx pgx.Tx, end func() (context.Context, context.CancelFunc), use func(context.Context, pgx.Tx) error) error {
					defer func() { _ = tx.Rollback(context.Background()) }()
					ctx, cancel := end()
					defer cancel()
					return use(ctx, tx)
				}
				for endName, end := range ends {
					for useName, use := range uses {
						own, err := pool.BeginTx(context.Background(), pgx.TxOptions{})
						require.NoError(t, err)
						ownErr := run(own, end, use)
						ours, err := pgxinbox.Pool(pool).Begin(context.Background(), driver.TxOptions{})
						require.NoError(t, err)
						oursErr := run(ours.Native().(pgx.Tx), end, use)

						what := fmt.Sprintf("%s, %s: pgx's own: %v; the inbox's: %v", endName, useName, ownErr, oursErr)
						require.Error(t, ownErr, what)
						require.Error(t, oursErr, what)
						for _, target := range []error{context.Canceled, context.DeadlineExceeded} {
							require.Equal(t, errors.Is(ownErr, target), errors.Is(oursErr, target), "%s: errors.Is %v", what, target)
						}
						require.Equal(t, pgconn.Timeout(ownErr), pgconn.Timeout(oursErr), "%s: pgconn.Timeout", what)
						if ownPg := (*pgconn.PgError)(nil); errors.As(ownErr, &ownPg) {
							oursPg := (*pgconn.PgError)(nil)
							require.ErrorAs(t, oursErr, &oursPg, what)
							require.Equal(t, ownPg.Code, oursPg.Code, what)
						}
					}
				}
			})
		}
	}
}

// Batch mode over a pool whose connections break under it: every message's context is cancelled at a random
// moment, while another session terminates backends in the middle of their statements. Once every message has
// returned and the pool is closed, no goroutine that the deliveries started may be left: not pgx's context watchers,
// nor its pool's, nor the inbox's. Every goroutine started under the test's pprof label inherits it, which tells
// them from the goroutines of the tests that run beside this one.
func TestBatch_CancelledMessagesOnTerminatedBackendsLeaveNoGoroutineBehind(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	app := inboxtest.UniqueName("inbox_cancel")

	killer, err := pgx.Connect(context.Background(), testDSN())
	require.NoError(t, err)
	t.Cleanup(func() { _ = killer.Close(context.Background()) })
	stopKilling, killed := make(chan struct{}), make(chan int64, 1)
	go func() {
		var n int64
		defer func() { killed <- n }()
		for {
			select {
			case <-stopKilling:
				return
			case <-time.After(time.Duration(2+rand.IntN(15)) * time.Millisecond):
			}
			var hit int64
			// A backend in the middle of a statement: one of a batch member's, or a claim, or a commit.
			if err := killer.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
				FROM (SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND state = 'active' ORDER BY random() LIMIT 1) a`,
				app).Scan(&hit); err != nil {
				t.Errorf("terminate a backend: %v", err)
				return
			}
			n += hit
		}
	}()

	const label = "inbox_test_cancelled_batch"
	var failed, succeeded atomic.Int64
	pprof.Do(context.Background(), pprof.Labels(label, app), func(context.Context) {
		cfg, err := pgxpool.ParseConfig(testDSN())
		require.NoError(t, err)
		cfg.MaxConns = 10
		cfg.ConnConfig.RuntimeParams["application_name"] = app
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		require.NoError(t, err)
		ib, err := pgxinbox.New(pool, b.Options(inbox.WithBatch(time.Millisecond, 16), inbox.WithRejectDelay(time.Millisecond))...)
		if err != nil {
			pool.Close()
			require.NoError(t, err)
		}
		credit := `UPDATE ` + b.Accounts + ` SET balance = balance + $1 WHERE id = 1`
		h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			ctx := msg.Context()
			tx, _ := pgxinbox.TxFromContext(ctx)
			k, _ := strconv.Atoi(strings.TrimPrefix(msg.Metadata.Get(inbox.DefaultIDMetadataKey), "evt-"))
			if k%2 == 0 { // a first statement that is not pipelined with the other members': it carries the savepoint
				var got int
				if err := tx.QueryRow(ctx, `SELECT $1::int FROM pg_sleep(0.01)`, k).Scan(&got); err != nil {
					return nil, err
				}
			}
			_, err := tx.Exec(ctx, credit, 1)
			return nil, err
		})

		const workers, each = 16, 8
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := range each {
					msg := newMsg("evt-" + strconv.Itoa(w*each+n))
					ctx, cancel := context.WithCancel(context.Background())
					cancelling := time.AfterFunc(time.Duration(rand.IntN(100))*time.Millisecond, cancel)
					msg.SetContext(ctx)
					if _, err := h(msg); err != nil {
						failed.Add(1)
					} else {
						succeeded.Add(1)
					}
					cancelling.Stop()
					cancel()
				}
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("the deliveries did not all return within a minute") // the pool's Close would wait for them
		}
		pool.Close()
	})
	close(stopKilling)
	terminated := <-killed
	t.Logf("%d messages applied, %d failed; %d backends terminated", succeeded.Load(), failed.Load(), terminated)
	require.NotZero(t, failed.Load(), "cancellations and terminations failed some messages")

	requireNoGoroutineLabelled(t, label, app, 10*time.Second)
}

// requireNoGoroutineLabelled waits up to within for the goroutines that carry the pprof label key=value to end, and
// fails the test with their stacks when some do not.
func requireNoGoroutineLabelled(t *testing.T, key, value string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		left := goroutinesLabelled(key, value)
		if left == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines labelled %s=%s are left after %s:\n%s", key, value, within, left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// goroutinesLabelled returns the goroutine profile's records (a count, then a stack) of the goroutines that carry
// the pprof label key=value, or "" when none does.
func goroutinesLabelled(key, value string) string {
	var profile bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&profile, 1); err != nil {
		return err.Error()
	}
	_, records, _ := strings.Cut(profile.String(), "\n") // after the header line
	var left strings.Builder
	for record := range strings.SplitSeq(records, "\n\n") {
		if strings.Contains(record, "# labels: ") && strings.Contains(record, strconv.Quote(key)+":"+strconv.Quote(value)) {
			left.WriteString(record)
			left.WriteString("\n\n")
		}
	}
	return left.String()
}
