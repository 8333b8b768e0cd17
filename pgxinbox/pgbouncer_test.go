package pgxinbox_test

import (
	"context"
	"errors"
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

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
)

// pgbouncerBinary is where Debian's pgbouncer package installs the pooler.
const pgbouncerBinary = "/usr/sbin/pgbouncer"

// pgbouncerServerConns is how many server connections the test pooler opens, handed out in turn
// (server_round_robin), so that a client's transactions really run on different server connections.
const pgbouncerServerConns = 4

// TestBehindPgbouncer runs the inbox's transactions, whose BEGIN travels with their first statement, through
// pgbouncer in transaction pooling mode with the query exec mode the README gives for it.
func TestBehindPgbouncer(t *testing.T) {
	t.Parallel()
	dsn := startPgbouncer(t)

	t.Run("CacheDescribeAppliesEachEffectOnceInBothModes", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t) // the tables, made on a direct connection
		proxied := openPoolIn(t, dsn, pgx.QueryExecModeCacheDescribe)
		var calls atomic.Int64
		for _, mode := range []struct {
			name    string
			opts    []inbox.Option
			handler message.HandlerFunc
		}{
			{"transaction", nil, b.credit(1, &calls)}, // its effect on the pgx.Tx of the message
			{"lease", []inbox.Option{inbox.WithLease(time.Minute)}, func(*message.Message) ([]*message.Message, error) {
				calls.Add(1) // an effect outside the database
				return nil, nil
			}},
		} {
			calls.Store(0)
			consumer := "proxied-" + mode.name
			ib, err := pgxinbox.New(proxied, b.options(append([]inbox.Option{inbox.WithConsumer(consumer)}, mode.opts...)...)...)
			require.NoError(t, err)
			h := ib.Middleware(mode.handler)
			const events, copies = 30, 3
			var wg sync.WaitGroup
			errs := make(chan error, events*copies)
			for e := range events {
				for range copies {
					wg.Add(1)
					go func() {
						defer wg.Done()
						deadline := time.Now().Add(60 * time.Second)
						for {
							_, err := h(newMsg(fmt.Sprintf("evt-%d", e)))
							if err == nil || !errors.Is(err, inbox.ErrLeaseHeld) || time.Now().After(deadline) {
								errs <- err
								return
							}
						}
					}()
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err, mode.name)
			}
			require.EqualValues(t, events, calls.Load(), "%s mode: each event's handler ran once", mode.name)
			require.Equal(t, events, b.rows(t, consumer))
		}
		require.Equal(t, 30, b.balance(t), "transaction mode credited each event once")
	})

	t.Run("CacheStatementFailsSoTheProxyReallyMovesTransactions", func(t *testing.T) {
		t.Parallel()
		// The control: pgx's default prepares named statements per client connection, which the pooler's other
		// server connections do not have.
		b := newBundle(t)
		proxied := openPoolIn(t, dsn, pgx.QueryExecModeCacheStatement)
		ib, err := pgxinbox.New(proxied, b.options(inbox.WithRejectDelay(time.Millisecond))...)
		require.NoError(t, err)
		h := ib.Middleware(b.credit(1, nil))
		var failure error
		for i := 0; i < 4*pgbouncerServerConns && failure == nil; i++ {
			_, failure = h(newMsg(fmt.Sprintf("evt-%d", i)))
		}
		var pgErr *pgconn.PgError
		require.ErrorAs(t, failure, &pgErr)
		require.Contains(t, []string{"26000", "42P05"}, pgErr.Code, "a prepared statement missing or already there: %v", failure)
	})
}

// startPgbouncer starts a pgbouncer of its own in transaction pooling mode on a free loopback port, in front of the
// test database, and returns the DSN that reaches the database through it; it stops the pooler when the test ends.
// It fails the test, loudly, when pgbouncer is not installed.
func startPgbouncer(t *testing.T) string {
	t.Helper()
	needsDB(t)
	if _, err := os.Stat(pgbouncerBinary); err != nil {
		t.Fatalf("pgbouncer is not installed at %s (install it with `apt-get install -y pgbouncer`): %v", pgbouncerBinary, err)
	}
	upstream, err := url.Parse(testDSN())
	require.NoError(t, err)
	host, port, dbname, dbUser := upstream.Hostname(), upstream.Port(), filepath.Base(upstream.Path), upstream.User.Username()
	if port == "" {
		port = "5432"
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	listenPort := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())

	// The directory must be readable by the user pgbouncer switches to, which is not the one that created it.
	dir, err := os.MkdirTemp("", "pgxinbox-pgbouncer-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	authFile := filepath.Join(dir, "users.txt")
	require.NoError(t, os.WriteFile(authFile, []byte(strconv.Quote(dbUser)+" \"\"\n"), 0o644))
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
syslog = 0
logfile =
pidfile =
`, dbname, host, port, dbUser, listenPort, authFile, pgbouncerServerConns)
	configFile := filepath.Join(dir, "pgbouncer.ini")
	require.NoError(t, os.WriteFile(configFile, []byte(config), 0o644))
	args := []string{configFile}
	if me, err := user.Current(); err == nil && me.Uid == "0" {
		args = []string{"-u", "postgres", configFile} // pgbouncer refuses to run as root
	}
	var out lockedBuffer
	cmd := exec.Command(pgbouncerBinary, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
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
		if warmed(dsn) == nil {
			return dsn
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer did not serve %d server connections within 15s; its output:\n%s", pgbouncerServerConns, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// warmed makes the pooler open all its server connections now, by holding that many transactions at once
// (min_pool_size alone fills the pool only over the next seconds, and until then every transaction would run on
// the same server connection), and reports an error until it serves them.
func warmed(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return err
	}
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	pids := map[int]bool{}
	var txs []pgx.Tx
	defer func() {
		for _, tx := range txs {
			_ = tx.Rollback(ctx)
		}
	}()
	for range pgbouncerServerConns {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		txs = append(txs, tx)
		var pid int
		if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			return err
		}
		pids[pid] = true
	}
	if len(pids) != pgbouncerServerConns {
		return fmt.Errorf("%d server connections", len(pids))
	}
	return nil
}

// lockedBuffer collects a child process's output while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
