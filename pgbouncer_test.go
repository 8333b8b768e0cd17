package inbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
)

// pgbouncerBinary is where Debian's pgbouncer package installs the pooler.
const pgbouncerBinary = "/usr/sbin/pgbouncer"

// pgbouncerPoolSize is how many server connections the test pooler opens to PostgreSQL. More than one, and handed
// out in turn (server_round_robin), so that two statements of one client that are not in one transaction really
// run on different server connections, as they do behind a busy production pooler.
const pgbouncerPoolSize = 4

// lockedBuffer collects a child process's output while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startPgbouncer starts a pgbouncer of its own in transaction pooling mode on a free loopback port, in front of the
// test database, and returns the DSN that reaches the database through it. It stops the pooler when the test
// ends. The pooler asks clients for no password and logs in to PostgreSQL as the test DSN's user. It fails the
// test, loudly, when pgbouncer is not installed.
func startPgbouncer(t testing.TB) string {
	t.Helper()
	needsDB(t)
	if _, err := os.Stat(pgbouncerBinary); err != nil {
		t.Fatalf("pgbouncer is not installed at %s; these tests prove behaviour behind a transaction-pooling proxy "+
			"and mean nothing without it (install it with `apt-get install -y pgbouncer`): %v", pgbouncerBinary, err)
	}
	upstream, err := url.Parse(testDSN())
	require.NoError(t, err)
	host, port := upstream.Hostname(), upstream.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "5432"
	}
	dbname := filepath.Base(upstream.Path)
	dbUser := upstream.User.Username()
	if dbUser == "" {
		dbUser = "postgres"
	}
	listenPort := freePort(t)

	// The directory must be readable by the user pgbouncer switches to, which is not the one that created it.
	dir, err := os.MkdirTemp("", "inbox-pgbouncer-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	authFile := filepath.Join(dir, "users.txt")
	require.NoError(t, os.WriteFile(authFile, []byte(fmt.Sprintf("%q \"\"\n", dbUser)), 0o644))
	config := fmt.Sprintf(`[databases]
%[1]s = host=%[2]s port=%[3]s dbname=%[1]s user=%[4]s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %[5]d
unix_socket_dir =
auth_type = any
auth_file = %[6]s
pool_mode = transaction
default_pool_size = %[7]d
min_pool_size = %[7]d
server_round_robin = 1
max_client_conn = 500
ignore_startup_parameters = extra_float_digits
syslog = 0
logfile =
pidfile =
`, dbname, host, port, dbUser, listenPort, authFile, pgbouncerPoolSize)
	configFile := filepath.Join(dir, "pgbouncer.ini")
	require.NoError(t, os.WriteFile(configFile, []byte(config), 0o644))

	args := []string{configFile}
	if me, err := user.Current(); err == nil && me.Uid == "0" {
		args = []string{"-u", "postgres", configFile} // pgbouncer refuses to run as root
	}
	out := &lockedBuffer{}
	cmd := exec.Command(pgbouncerBinary, args...)
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start(), "start %s", pgbouncerBinary)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	dsn := fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", url.PathEscape(dbUser), listenPort, dbname)
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case err := <-exited:
			t.Fatalf("pgbouncer exited before it accepted connections (%v); its output:\n%s", err, out.String())
		default:
		}
		if pingOnce(dsn) == nil {
			warmPool(t, dsn)
			return dsn
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer did not accept connections on port %d within 15s; its output:\n%s", listenPort, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pingOnce opens one connection to dsn and runs a query on it.
func pingOnce(dsn string) error {
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var one int
	return db.QueryRowContext(ctx, `SELECT 1`).Scan(&one)
}

// warmPool makes the pooler open all its server connections now, by holding that many transactions at once:
// min_pool_size alone fills the pool only over the next seconds, and until then one client's statements would all
// run on the same server connection.
func warmPool(t testing.TB, dsn string) {
	t.Helper()
	db := openVia(t, "postgres", dsn)
	var txs []*sql.Tx
	pids := map[int]bool{}
	for range pgbouncerPoolSize {
		tx, err := db.Begin()
		require.NoError(t, err)
		var pid int
		require.NoError(t, tx.QueryRow(`SELECT pg_backend_pid()`).Scan(&pid))
		pids[pid] = true
		txs = append(txs, tx)
	}
	for _, tx := range txs {
		require.NoError(t, tx.Rollback())
	}
	require.Len(t, pids, pgbouncerPoolSize, "the pooler opened its server connections")
}

// freePort returns a loopback port nothing listens on right now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	_, p, err := net.SplitHostPort(l.Addr().String())
	require.NoError(t, err)
	n, err := strconv.Atoi(p)
	require.NoError(t, err)
	return n
}

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

// driversBehindPgbouncer are the database/sql drivers the inbox must work with behind a transaction-pooling proxy,
// each with its defaults: lib/pq, and pgx's stdlib driver.
var driversBehindPgbouncer = []string{"postgres", "pgx"}

func TestPgbouncer_StatementsOutsideATransactionRunOnDifferentServerConnections(t *testing.T) {
	t.Parallel()
	db := openVia(t, "postgres", startPgbouncer(t))
	db.SetMaxOpenConns(1) // one client connection: every difference below comes from the pooler
	pids := map[int]bool{}
	for range 4 * pgbouncerPoolSize {
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
	dsn := startPgbouncer(t)
	for _, driver := range driversBehindPgbouncer {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t)
			proxied := openVia(t, driver, dsn+pgbouncerDSNOptions[driver])
			for round := range 8 {
				b.insertAged(t, "wallet-credits", fmt.Sprintf("old%d", round), "done", 50, thirtyDays, 1)
				res, err := inbox.Cleanup(context.Background(), proxied, inbox.CleanupParams{BatchSize: 20}, inbox.WithTable(b.table))
				require.NoError(t, err, "round %d", round)
				require.False(t, res.Skipped, "round %d: no instance holds the lock", round)
				require.EqualValues(t, 50, res.Deleted, "round %d", round)
			}
			require.Zero(t, b.rows(t, "wallet-credits"))
		})
	}
}

func TestOperations_WorkBehindATransactionPoolingProxy(t *testing.T) {
	t.Parallel()
	dsn := startPgbouncer(t)
	for _, driver := range driversBehindPgbouncer {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t)
			proxied := openVia(t, driver, dsn+pgbouncerDSNOptions[driver])
			b.insertAged(t, "wallet-credits", "old", "done", 5, time.Hour, 1)
			ctx := context.Background()
			for range 3 { // several rounds, so that the statements meet several server connections
				st, err := inbox.ReadStats(ctx, proxied, inbox.WithTable(b.table))
				require.NoError(t, err)
				require.Len(t, st.Consumers, 1)
				require.EqualValues(t, 5, st.Consumers[0].Done)

				ms, err := inbox.Remembers(ctx, proxied, inbox.WithTable(b.table))
				require.NoError(t, err)
				require.Len(t, ms, 1)
				require.Equal(t, "wallet-credits", ms[0].Consumer)
			}
			for i := 1; i <= 5; i++ {
				row, err := inbox.Forget(ctx, proxied, inbox.ForgetParams{Consumer: "wallet-credits", ID: fmt.Sprintf("old-%d", i)},
					inbox.WithTable(b.table))
				require.NoError(t, err)
				require.Equal(t, "done", row.State)
			}
			_, err := inbox.Forget(ctx, proxied, inbox.ForgetParams{Consumer: "wallet-credits", ID: "old-1"}, inbox.WithTable(b.table))
			require.ErrorIs(t, err, inbox.ErrNotFound)
			require.Zero(t, b.rows(t, "wallet-credits"))
		})
	}
}

func TestTransactionMode_BehindATransactionPoolingProxyEachEffectLandsOnce(t *testing.T) {
	t.Parallel()
	dsn := startPgbouncer(t)
	for _, driver := range driversBehindPgbouncer {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t)
			proxied := openVia(t, driver, dsn+pgbouncerDSNOptions[driver])
			ib, err := inbox.New(proxied, inbox.WithTable(b.table), inbox.WithConsumer("wallet-credits"), inbox.WithLogger(b.logs))
			require.NoError(t, err)
			var calls atomic.Int64
			ids := eventIDs("evt", 40)
			requireNoErrors(t, deliverCopies(t, ib.Middleware(b.credit(1, &calls)), ids, 3))
			require.Equal(t, len(ids), b.balance(t), "each event credited once")
			require.EqualValues(t, len(ids), calls.Load(), "and its handler ran once")
			b.requireAllDone(t, "wallet-credits", len(ids))
		})
	}
}

func TestPgbouncer_PgxDefaultStatementCacheFailsEvenInsideTransactions(t *testing.T) {
	t.Parallel()
	// Why pgbouncerDSNOptions sets a cache mode for pgx: with its defaults, pgx prepares named statements and
	// reuses them in later transactions, which the proxy runs on other server connections.
	db := openVia(t, "pgx", startPgbouncer(t))
	db.SetMaxOpenConns(1)
	var failure error
	for i := 0; i < 4*pgbouncerPoolSize && failure == nil; i++ {
		tx, err := db.Begin()
		require.NoError(t, err)
		var n int
		failure = tx.QueryRow(`SELECT $1::int`, i).Scan(&n)
		_ = tx.Rollback()
	}
	require.Error(t, failure)
	require.Equal(t, "26000", sqlStateOf(failure), "prepared statement does not exist: %v", failure)
}
