package inbox_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectively-once/watermill-inbox/internal/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// openVia connects with driver to dsn, failing the test when it cannot, and closes the pool when the test ends.
func openVia(t testing.TB, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, db.PingContext(ctx), "connect with %s to %s", driver, dsn)
	db.SetMaxOpenConns(20)
	t.Cleanup(func() { db.Close() })
	return db
}

// driversBehindPgbouncer are the database/sql drivers these tests run behind a transaction-pooling proxy, each with
// its defaults. pgx's, database/sql and native, are tested the same way in the pgxinbox module, which needs pgx.
var driversBehindPgbouncer = []string{"postgres"}

func TestPgbouncer_StatementsOutsideATransactionRunOnDifferentServerConnections(t *testing.T) {
	t.Parallel()
	db := openVia(t, "postgres", testkit.StartPgbouncer(t, testDSN(), "postgres"))
	db.SetMaxOpenConns(1) // one client connection: every difference below comes from the pooler
	pids := map[int]bool{}
	for range 4 * testkit.PgbouncerPoolSize {
		var pid int
		require.NoError(t, db.QueryRow(`SELECT pg_backend_pid()`).Scan(&pid))
		pids[pid] = true
	}
	require.Greater(t, len(pids), 1, "the pooler hands one client's statements to several server connections")

	tx, err := db.Begin()
	require.NoError(t, err)
	defer tx.Rollback()
	inTx := map[int]bool{}
	for range 4 {
		var pid int
		require.NoError(t, tx.QueryRow(`SELECT pg_backend_pid()`).Scan(&pid))
		inTx[pid] = true
	}
	require.Len(t, inTx, 1, "a transaction stays on one server connection")
}

func TestCleanup_BehindATransactionPoolingProxyNoRoundIsSkipped(t *testing.T) {
	t.Parallel()
	dsn := testkit.StartPgbouncer(t, testDSN(), "postgres")
	for _, driver := range driversBehindPgbouncer {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t)
			proxied := openVia(t, driver, dsn+pgbouncerDSNOptions[driver])
			for round := range 8 {
				b.insertAged(t, "wallet-credits", fmt.Sprintf("old%d", round), "done", 50, thirtyDays, 1)
				res, err := inbox.OnSQL(proxied).Cleanup(context.Background(), inbox.CleanupParams{BatchSize: 20}, inbox.WithTable(b.Table))
				require.NoError(t, err, "round %d", round)
				require.False(t, res.Skipped, "round %d: no instance holds the lock", round)
				require.EqualValues(t, 50, res.Deleted, "round %d", round)
			}
			require.Zero(t, b.Rows(t, "wallet-credits"))
		})
	}
}

func TestOperations_WorkBehindATransactionPoolingProxy(t *testing.T) {
	t.Parallel()
	dsn := testkit.StartPgbouncer(t, testDSN(), "postgres")
	for _, driver := range driversBehindPgbouncer {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t)
			proxied := openVia(t, driver, dsn+pgbouncerDSNOptions[driver])
			b.insertAged(t, "wallet-credits", "old", "done", 5, time.Hour, 1)
			ctx := context.Background()
			for range 3 { // several rounds, so that the statements meet several server connections
				st, err := inbox.OnSQL(proxied).ReadStats(ctx, inbox.WithTable(b.Table))
				require.NoError(t, err)
				require.Len(t, st.Consumers, 1)
				require.EqualValues(t, 5, st.Consumers[0].Done)

				ms, err := inbox.OnSQL(proxied).Remembers(ctx, inbox.WithTable(b.Table))
				require.NoError(t, err)
				require.Len(t, ms, 1)
				require.Equal(t, "wallet-credits", ms[0].Consumer)
			}
			for i := 1; i <= 5; i++ {
				row, err := inbox.OnSQL(proxied).Forget(ctx, inbox.ForgetParams{Consumer: "wallet-credits", ID: fmt.Sprintf("old-%d", i)},
					inbox.WithTable(b.Table))
				require.NoError(t, err)
				require.Equal(t, "done", row.State)
			}
			_, err := inbox.OnSQL(proxied).Forget(ctx, inbox.ForgetParams{Consumer: "wallet-credits", ID: "old-1"}, inbox.WithTable(b.Table))
			require.ErrorIs(t, err, inbox.ErrNotFound)
			require.Zero(t, b.Rows(t, "wallet-credits"))
		})
	}
}

func TestTransactionMode_BehindATransactionPoolingProxyEachEffectLandsOnce(t *testing.T) {
	t.Parallel()
	dsn := testkit.StartPgbouncer(t, testDSN(), "postgres")
	for _, driver := range driversBehindPgbouncer {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t)
			proxied := openVia(t, driver, dsn+pgbouncerDSNOptions[driver])
			ib, err := inbox.New(proxied, inbox.WithTable(b.Table), inbox.WithConsumer("wallet-credits"), inbox.WithLogger(b.Logs))
			require.NoError(t, err)
			var calls atomic.Int64
			ids := testkit.EventIDs("evt", 40)
			requireNoErrors(t, testkit.DeliverCopies(t, ib.Middleware(b.Credit(1, &calls)), ids, 3))
			require.Equal(t, len(ids), b.Balance(t), "each event credited once")
			require.EqualValues(t, len(ids), calls.Load(), "and its handler ran once")
			b.requireAllDone(t, "wallet-credits", len(ids))
		})
	}
}

// TestPgbouncer_ThePoolerDiesWithTheTestProcess runs itself again as a child test process that starts a pooler and
// waits, kills that process as a test timeout would, and checks that the pooler is gone with it: a pooler left
// behind keeps its connections to PostgreSQL open after the tests.
func TestPgbouncer_ThePoolerDiesWithTheTestProcess(t *testing.T) {
	testkit.SkipWhenShort(t, "PostgreSQL") // here, not only in StartPgbouncer: the child this starts runs without -short
	if os.Getenv("INBOX_TEST_HOLD_PGBOUNCER") == "1" {
		fmt.Printf("pooler=%s\n", testkit.StartPgbouncer(t, testDSN(), "postgres"))
		time.Sleep(time.Minute) // killed long before
		return
	}
	t.Parallel()
	child := exec.Command(os.Args[0], "-test.run=^TestPgbouncer_ThePoolerDiesWithTheTestProcess$", "-test.count=1")
	child.Env = append(os.Environ(), "INBOX_TEST_HOLD_PGBOUNCER=1")
	out, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	var dsn string
	var printed strings.Builder // what the child printed instead, to say why it started no pooler
	lines := bufio.NewScanner(out)
	for dsn == "" && lines.Scan() {
		if rest, ok := strings.CutPrefix(lines.Text(), "pooler="); ok {
			dsn = rest
		} else {
			printed.WriteString(lines.Text() + "\n")
		}
	}
	require.NotEmpty(t, dsn, "the child started no pooler; it printed:\n%s", printed.String())
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	conn, err := net.DialTimeout("tcp", u.Host, time.Second)
	require.NoError(t, err, "the pooler listens while the child lives")
	_ = conn.Close()

	require.NoError(t, child.Process.Kill())
	require.Eventually(t, func() bool {
		conn, err := net.DialTimeout("tcp", u.Host, time.Second)
		if err == nil {
			_ = conn.Close()
		}
		return err != nil
	}, 5*time.Second, 50*time.Millisecond, "the pooler at %s outlived the test process that started it", u.Host)
}
