package inboxtest

import (
	"testing"

	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// DefaultPostgresDSN is the PostgreSQL the tests use when INBOX_TEST_DATABASE_URL is unset: this machine's, as the
// CI sets it up.
const DefaultPostgresDSN = testkit.DefaultPostgresDSN

// DefaultMySQLDSN is the MariaDB or MySQL the tests use when MYSQL_TEST_DSN is unset.
const DefaultMySQLDSN = testkit.DefaultMySQLDSN

// InheritedDatabasesEnv is set, by RunInOwnDatabases, in the environment of a test process that runs in databases
// of its own, and so in that of every process it starts.
const InheritedDatabasesEnv = testkit.InheritedDatabasesEnv

// Database names a server on which a test binary creates a database of its own, and the environment variable
// through which its tests, and the processes they start, find it.
type Database = testkit.Database

// PostgresDatabase is the PostgreSQL of this project's tests, INBOX_TEST_DATABASE_URL or DefaultPostgresDSN,
// reached through driver.
func PostgresDatabase(driver string) Database { return testkit.PostgresDatabase(driver) }

// PrivatePostgresDatabase is PostgresDatabase for a package whose tests must not share a server's transaction IDs
// with other programs: unless INBOX_TEST_DATABASE_URL names a server, RunInOwnDatabases starts one for the run and
// stops it at the end (a few seconds). watermill-sql's PostgreSQL subscriber needs it: see RunInOwnDatabases.
func PrivatePostgresDatabase(driver string) Database { return testkit.PrivatePostgresDatabase(driver) }

// MySQLDatabase is the MariaDB or MySQL of this project's tests, MYSQL_TEST_DSN or DefaultMySQLDSN, reached through
// go-sql-driver/mysql, which the caller registers.
func MySQLDatabase() Database { return testkit.MySQLDatabase() }

// SkipWhenShort skips t under -short, which runs only the tests that need no database, and does nothing
// otherwise: without -short a test that needs the database named by what fails when it is missing.
func SkipWhenShort(t testing.TB, what string) { testkit.SkipWhenShort(t, what) }

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
	return testkit.RunInOwnDatabases(m, dbs...)
}

// LeaveOutExamplesWhenShort adds the test binary's Examples to -skip under -short: an Example that needs a
// database cannot skip itself as a test does. TestMain calls it before RunInOwnDatabases.
func LeaveOutExamplesWhenShort() { testkit.LeaveOutExamplesWhenShort() }
