package testkit

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

const DefaultPostgresDSN = "postgres://root@127.0.0.1:5432/test?sslmode=disable"

const DefaultMySQLDSN = "root@tcp(127.0.0.1:3306)/test?parseTime=true"

const InheritedDatabasesEnv = "INBOXTEST_INHERITED_DATABASES"

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

func PostgresDatabase(driver string) Database {
	return Database{Driver: driver, EnvVar: "INBOX_TEST_DATABASE_URL", DefaultDSN: DefaultPostgresDSN}
}

func PrivatePostgresDatabase(driver string) Database {
	d := PostgresDatabase(driver)
	d.Private = true
	return d
}

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

func SkipWhenShort(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s; run without -short", what)
	}
}

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
