package mysqlinbox_test

import (
	"context"
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/mysqlinbox"
)

// TestSuite_MariaDBRollbackOnTimeout runs the cases of handlers whose transaction the server rolled back against a
// MariaDB started with innodb_rollback_on_timeout, which rolls a transaction back whole on a lock-wait timeout
// too: a server of its own, in a temporary directory, since the option is read only at startup.
func TestSuite_MariaDBRollbackOnTimeout(t *testing.T) {
	inboxtest.SkipWhenShort(t, "MariaDB's server binaries")
	db := startMariaDB(t, "--innodb-rollback-on-timeout=ON")
	var on bool
	if err := db.QueryRow("SELECT @@innodb_rollback_on_timeout").Scan(&on); err != nil || !on {
		t.Fatalf("the server's innodb_rollback_on_timeout: %v, %v", on, err)
	}
	inboxtest.RunCases(t, inboxtest.HarnessFunc(func(testing.TB) inboxtest.Conn {
		return inboxtest.StdSQL(db, mysqlinbox.Database(db), mariaDB)
	}), "AHandlerThatCarriesOnAfterTheDatabaseRolledBackItsTransactionAppliesItsEventOnce")
}

// startMariaDB starts a MariaDB server of the test's own with the options args, reachable on a unix socket only,
// and returns a pool on its database test; the server stops when the test ends. It fails the test, saying what to
// install, when MariaDB's server binaries are not on this machine.
func startMariaDB(t *testing.T, args ...string) *sql.DB {
	t.Helper()
	find := func(name string) string {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		if p := filepath.Join("/usr/sbin", name); fileExists(p) {
			return p
		}
		t.Fatalf("%s is not installed: apt-get install mariadb-server", name)
		return ""
	}
	server, install := find("mariadbd"), find("mariadb-install-db")
	dir, err := os.MkdirTemp("", "mdb") // short: a unix socket's path has a limit of about 100 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	data, sock := filepath.Join(dir, "data"), filepath.Join(dir, "sock")
	if out, err := exec.Command(install, "--no-defaults", "--datadir="+data, "--user=root",
		"--auth-root-authentication-method=normal", "--skip-test-db").CombinedOutput(); err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	cmd := exec.Command(server, append([]string{"--no-defaults", "--datadir=" + data, "--user=root", "--socket=" + sock,
		"--skip-networking", "--innodb-buffer-pool-size=32M", "--log-error=" + filepath.Join(dir, "error.log")}, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start mariadbd: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	root, err := sql.Open("mysql", "root@unix("+sock+")/")
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for { // the server is up when it answers
		if err = root.PingContext(ctx); err == nil {
			break
		}
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("mariadbd exited: %v\n%s", err, log)
		case <-ctx.Done():
			t.Fatalf("mariadbd did not answer within a minute: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if _, err := root.Exec("CREATE DATABASE test"); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", "root@unix("+sock+")/test?parseTime=true")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
