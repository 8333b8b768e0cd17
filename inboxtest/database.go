package inboxtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

// DefaultPostgresDSN is the PostgreSQL the tests use when INBOX_TEST_DATABASE_URL is unset: this machine's, as the
// CI sets it up.
const DefaultPostgresDSN = "postgres://root@127.0.0.1:5432/test?sslmode=disable"

// DefaultMySQLDSN is the MariaDB or MySQL the tests use when MYSQL_TEST_DSN is unset.
const DefaultMySQLDSN = "root@tcp(127.0.0.1:3306)/test?parseTime=true"

// InheritedDatabasesEnv is set, by RunInOwnDatabases, in the environment of a test process that runs in databases
// of its own, and so in that of every process it starts.
const InheritedDatabasesEnv = "INBOXTEST_INHERITED_DATABASES"

// Database names a server on which a test binary creates a database of its own, and the environment variable
// through which its tests, and the processes they start, find it.
type Database struct {
	// Driver is the database/sql driver to connect with, registered by the caller: "postgres" or "pgx" for
	// PostgreSQL, "mysql" for MariaDB or MySQL (a DSN in go-sql-driver/mysql's format).
	Driver string
	// EnvVar holds the DSN: read before the run, it names the server; during the run it names the database
	// created for it.
	EnvVar string
	// DefaultDSN is the server's DSN when EnvVar is unset or empty.
	DefaultDSN string
	// Private starts, when EnvVar is unset or empty, a PostgreSQL server of the run's own (StartPostgres) in
	// place of DefaultDSN's, and stops it when the run ends.
	Private bool
}

// PostgresDatabase is the PostgreSQL of this project's tests, INBOX_TEST_DATABASE_URL or DefaultPostgresDSN,
// reached through driver.
func PostgresDatabase(driver string) Database {
	return Database{Driver: driver, EnvVar: "INBOX_TEST_DATABASE_URL", DefaultDSN: DefaultPostgresDSN}
}

// PrivatePostgresDatabase is PostgresDatabase for a package whose tests must not share a server's transaction IDs
// with other programs: unless INBOX_TEST_DATABASE_URL names a server, RunInOwnDatabases starts one for the run and
// stops it at the end (a few seconds). watermill-sql's PostgreSQL subscriber needs it: see RunInOwnDatabases.
func PrivatePostgresDatabase(driver string) Database {
	d := PostgresDatabase(driver)
	d.Private = true
	return d
}

// MySQLDatabase is the MariaDB or MySQL of this project's tests, MYSQL_TEST_DSN or DefaultMySQLDSN, reached through
// go-sql-driver/mysql, which the caller registers.
func MySQLDatabase() Database {
	return Database{Driver: "mysql", EnvVar: "MYSQL_TEST_DSN", DefaultDSN: DefaultMySQLDSN}
}

// DSN returns the DSN of d's server, or of the database RunInOwnDatabases created on it: d.EnvVar's value, or
// d.DefaultDSN when that is unset or empty.
func (d Database) DSN() string {
	if dsn := os.Getenv(d.EnvVar); dsn != "" {
		return dsn
	}
	return d.DefaultDSN
}

// SkipWhenShort skips t under -short, which runs only the tests that need no database, and does nothing
// otherwise: without -short a test that needs the database named by what fails when it is missing.
func SkipWhenShort(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s; run without -short", what)
	}
}

// RunInOwnDatabases is for TestMain: it creates, on each server of dbs, a database named
// inbox_test_<pid>_<random>, points the server's EnvVar at it, runs m, drops the databases, and returns the exit
// code. The tests of one package run then leave no table behind and meet no other program's tables or locks.
//
// A test binary that a test starts again (a crash test's consumer, a process that must die) inherits the
// variables and runs in its parent's databases: RunInOwnDatabases sets InheritedDatabasesEnv for its children, and
// where that is set it only runs m.
//
// Under -short it connects to nothing and only runs m: the tests that need a database skip themselves. Otherwise
// a server it cannot reach, or a database it cannot create or drop, fails the run with a message on stderr.
//
// A process that dies before m.Run returns (a panic, go test's -timeout) leaves its databases behind; they are
// the only ones named inbox_test_<its pid>_*.
//
// What a separate database cannot keep apart: PostgreSQL's transaction IDs, and so the xmin of every snapshot,
// belong to the whole server. watermill-sql's default PostgreSQL subscriber reads only the rows below that xmin,
// so a transaction that holds an ID open anywhere on the server holds back its messages here too: such tests run on
// a server of their own (PrivatePostgresDatabase).
func RunInOwnDatabases(m *testing.M, dbs ...Database) int {
	if !flag.Parsed() {
		flag.Parse()
	}
	if testing.Short() || os.Getenv(InheritedDatabasesEnv) != "" {
		return m.Run()
	}
	var drops []func() error
	dropAll := func() error {
		var failed error
		for i := len(drops) - 1; i >= 0; i-- {
			if err := drops[i](); err != nil {
				fmt.Fprintln(os.Stderr, "inboxtest:", err)
				failed = err
			}
		}
		return failed
	}
	for _, d := range dbs {
		if d.Private && os.Getenv(d.EnvVar) == "" {
			srv, err := StartPostgres(context.Background())
			if err != nil {
				fmt.Fprintln(os.Stderr, "inboxtest: start a PostgreSQL server for the run:", err)
				dropAll()
				return 1
			}
			drops = append(drops, srv.Stop)
			d.DefaultDSN = srv.DSN()
		}
		dsn, drop, err := d.create()
		if err != nil {
			fmt.Fprintln(os.Stderr, "inboxtest:", err)
			dropAll()
			return 1
		}
		drops = append(drops, drop)
		if err := os.Setenv(d.EnvVar, dsn); err != nil {
			fmt.Fprintln(os.Stderr, "inboxtest:", err)
			dropAll()
			return 1
		}
	}
	if err := os.Setenv(InheritedDatabasesEnv, "1"); err != nil {
		fmt.Fprintln(os.Stderr, "inboxtest:", err)
		dropAll()
		return 1
	}
	code := m.Run()
	if dropAll() != nil && code == 0 {
		code = 1
	}
	return code
}

// create makes the database on d's server and returns its DSN and the function that drops it.
func (d Database) create() (dsn string, drop func() error, err error) {
	server := os.Getenv(d.EnvVar)
	if server == "" {
		server = d.DefaultDSN
	}
	name, err := databaseName()
	if err != nil {
		return "", nil, err
	}
	mysql := d.Driver == "mysql"
	create, dropSQL := `CREATE DATABASE `+name, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`
	if mysql {
		dsn, err = withMySQLDatabase(server, name)
		dropSQL = `DROP DATABASE IF EXISTS ` + name
	} else {
		dsn, err = withPostgresDatabase(server, name)
	}
	if err != nil {
		return "", nil, err
	}
	db, err := sql.Open(d.Driver, server)
	if err != nil {
		return "", nil, fmt.Errorf("open %s: %w", server, err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		return "", nil, fmt.Errorf("the database server is not reachable at %s (set %s): %w", server, d.EnvVar, err)
	}
	if _, err := db.ExecContext(ctx, create); err != nil {
		return "", nil, fmt.Errorf("create the tests' database on %s: %w", server, err)
	}
	drop = func() error {
		db, err := sql.Open(d.Driver, server)
		if err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := db.ExecContext(ctx, dropSQL); err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		return nil
	}
	return dsn, drop, nil
}

// databaseName is inbox_test_<pid>_<8 random hex digits>: the pid says whose it is, the random part keeps apart
// two machines whose processes share a pid and a server.
func databaseName() (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return fmt.Sprintf("inbox_test_%d_%s", os.Getpid(), hex.EncodeToString(b[:])), nil
}

// withPostgresDatabase returns dsn with its database replaced by name, in either of PostgreSQL's forms: a URL, or
// key=value pairs, where a later dbname overrides an earlier one.
func withPostgresDatabase(dsn, name string) (string, error) {
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return dsn + " dbname=" + name, nil
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("parse the PostgreSQL URL %s: %w", dsn, err)
	}
	u.Path, u.RawPath = "/"+name, ""
	return u.String(), nil
}

// withMySQLDatabase returns a go-sql-driver/mysql DSN, [user[:password]@][net[(addr)]]/dbname[?params], with its
// database replaced by name. The driver takes the last slash for the one before the database; so does this.
func withMySQLDatabase(dsn, name string) (string, error) {
	slash := strings.LastIndex(dsn, "/")
	if slash < 0 {
		return "", fmt.Errorf("the MySQL DSN %s has no /dbname", dsn)
	}
	rest := dsn[slash+1:]
	params := ""
	if q := strings.IndexByte(rest, '?'); q >= 0 {
		params = rest[q:]
	}
	return dsn[:slash+1] + name + params, nil
}

// LeaveOutExamplesWhenShort adds the test binary's Examples to -skip under -short: an Example that needs a
// database cannot skip itself as a test does. TestMain calls it before RunInOwnDatabases.
func LeaveOutExamplesWhenShort() {
	flag.Parse()
	if !testing.Short() {
		return
	}
	skip := flag.Lookup("test.skip")
	pattern := "^Example"
	if cur := skip.Value.String(); cur != "" {
		pattern = cur + "|" + pattern
	}
	if err := skip.Value.Set(pattern); err != nil {
		panic(err)
	}
}
