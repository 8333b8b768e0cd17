package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
)

// startPgBouncer runs a pgbouncer of the test's own in transaction pooling mode, in front of the test database on
// 127.0.0.1:5432, and returns a lib/pq DSN through it. It stops with the test.
func startPgBouncer(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		bin = "/usr/sbin/pgbouncer"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("pgbouncer is not installed (apt-get install pgbouncer): %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())

	// pgbouncer refuses to run as root, so it runs as postgres and needs to read and write its directory.
	dir, err := os.MkdirTemp("", "inbox-pgbouncer-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o777))
	conf := filepath.Join(dir, "pgbouncer.ini")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "users.txt"), []byte(`"root" ""`+"\n"), 0o644))
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf(`[databases]
test = host=127.0.0.1 port=5432 dbname=test
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
default_pool_size = 4
ignore_startup_parameters = extra_float_digits
logfile = %s
`, port, filepath.Join(dir, "users.txt"), filepath.Join(dir, "pgbouncer.log"))), 0o644))

	args := []string{conf}
	if os.Geteuid() == 0 {
		args = []string{"-u", "postgres", conf}
	}
	cmd := exec.Command(bin, args...)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	dsn := fmt.Sprintf("postgres://root@127.0.0.1:%d/test?sslmode=disable", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		db, err := sql.Open("postgres", dsn)
		require.NoError(t, err)
		err = db.Ping()
		db.Close()
		if err == nil {
			return dsn
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Fatalf("pgbouncer did not accept connections on port %d: %v\n%s", port, err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The schema check before the first message runs parameterized catalog queries. lib/pq sends each as two round
// trips, and pgbouncer in transaction mode may hand them to two server connections outside a transaction, which
// then fails with "unnamed prepared statement does not exist" (26000): the check runs in a transaction for that.
func TestMiddleware_TheOneLineWorksBehindPgBouncerInTransactionMode(t *testing.T) {
	t.Parallel()
	dsn := startPgBouncer(t)
	db, err := sql.Open("postgres", dsn) // lib/pq with its defaults: unnamed statements, two round trips each
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(16)
	table := freshTable(t, openDB(t))

	const instances = 8
	var wg sync.WaitGroup
	errs := make(chan error, instances*2)
	for n := range instances {
		h := inbox.Middleware(db, inbox.WithTable(table), inbox.WithConsumer(fmt.Sprintf("consumer-%d", n)),
			inbox.WithRejectDelay(100*time.Millisecond))(noop)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, id := range []string{"evt-1", "evt-2"} {
				_, err := h(newMsg(id))
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, inbox.Migrate(context.Background(), db, inbox.WithTable(table)))
	var rows int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM `+table).Scan(&rows))
	require.Equal(t, instances*2, rows)
}
