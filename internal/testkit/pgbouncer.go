package testkit

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/effectively-once/watermill-inbox/internal/require"
)

// pgbouncerBinary is where Debian's pgbouncer package installs the pooler.
const pgbouncerBinary = "/usr/sbin/pgbouncer"

const PgbouncerPoolSize = 4

type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines returns the lines written so far that contain text.
func (b *LockedBuffer) Lines(text string) []string {
	var out []string
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.Contains(line, text) {
			out = append(out, line)
		}
	}
	return out
}

func StartPgbouncer(t testing.TB, upstreamDSN, driverName string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL and pgbouncer; run without -short")
	}
	if _, err := os.Stat(pgbouncerBinary); err != nil {
		t.Fatalf("pgbouncer is not installed at %s; these tests prove behaviour behind a transaction-pooling proxy "+
			"and mean nothing without it (install it with `apt-get install -y pgbouncer`): %v", pgbouncerBinary, err)
	}
	upstream, err := url.Parse(upstreamDSN)
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
`, dbname, host, port, dbUser, listenPort, authFile, PgbouncerPoolSize)
	configFile := filepath.Join(dir, "pgbouncer.ini")
	require.NoError(t, os.WriteFile(configFile, []byte(config), 0o644))

	out := &LockedBuffer{}
	cmd := exec.Command(pgbouncerBinary, configFile)
	cmd.Stdout, cmd.Stderr = out, out
	// The pooler dies with the test process, even one killed by a timeout. The kernel forgets the parent-death
	// signal when a process changes its user, as pgbouncer's own -u does after it set one, so under root (which
	// pgbouncer refuses to run as) the child is started as postgres, before the signal is set.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if me, err := user.Current(); err == nil && me.Uid == "0" {
		cmd.SysProcAttr.Credential = runAs(t, "postgres")
	}
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
		if pingOnce(driverName, dsn) == nil {
			warmPool(t, driverName, dsn)
			return dsn
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer did not accept connections on port %d within 15s; its output:\n%s", listenPort, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runAs is the credential of the system user name, for a child process.
func runAs(t testing.TB, name string) *syscall.Credential {
	t.Helper()
	u, err := user.Lookup(name)
	require.NoError(t, err, "the user pgbouncer runs as")
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	require.NoError(t, err)
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	require.NoError(t, err)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

// pingOnce opens one connection to dsn and runs a query on it.
func pingOnce(driverName, dsn string) error {
	db, err := sql.Open(driverName, dsn)
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
func warmPool(t testing.TB, driverName, dsn string) {
	t.Helper()
	db, err := sql.Open(driverName, dsn)
	require.NoError(t, err)
	defer db.Close()
	var txs []*sql.Tx
	pids := map[int]bool{}
	for range PgbouncerPoolSize {
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
	require.Len(t, pids, PgbouncerPoolSize, "the pooler opened its server connections")
}

// freePort returns a loopback port nothing listens on right now.
func freePort(t testing.TB) int {
	t.Helper()
	n, err := loopbackPort()
	require.NoError(t, err)
	return n
}
