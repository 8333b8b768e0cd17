package inboxtest

import (
	"database/sql"
	"testing"

	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// PostgresSecurity proves, over one way of reaching PostgreSQL, that no value from a message, an option or a
// handler's error runs as SQL or reaches the table changed, whatever a session of the inbox's connection was set to
// by whoever shares the pool (a handler, a pool hook, the application): its client_encoding, backslash_quote and
// standard_conforming_strings. A value is stored exactly as it came, or refused: inbox.ErrInvalidEventID for an ID
// the inbox documents as unstorable; inbox.ErrClientEncoding, the message nacked and never dead-lettered, on a
// session whose client_encoding is not UTF8 in a database that converts, which is any but SQL_ASCII. A probe table,
// which the hostile values try to drop, must keep its rows.
//
// Every case runs the inbox over a pool of one connection, so that the session a case sets is the session the
// inbox's statements run on; the cases check that the backend stayed the same. A driver's test package calls
// Matrix from a test and each Fuzz method from a fuzz test of its own.
type PostgresSecurity = testkit.PostgresSecurity

// SessionConn is the inbox's pool of one connection, as a driver reaches it.
type SessionConn = testkit.SessionConn

// StdSQLSession is a SessionConn over a database/sql pool of one connection.
func StdSQLSession(db *sql.DB) SessionConn { return testkit.StdSQLSession(db) }

// OpenSessionDB opens a database/sql pool of at most conns connections to dsn with synchronous_commit off (the
// cases commit a few times each, and what they prove does not depend on a commit surviving a crash of the server),
// and fails the test, loudly, when it cannot.
func OpenSessionDB(t testing.TB, driverName, dsn string, conns int) *sql.DB {
	return testkit.OpenSessionDB(t, driverName, dsn, conns)
}

// WithoutCommitWaits returns dsn with synchronous_commit off in its sessions' options.
func WithoutCommitWaits(t testing.TB, dsn string) string { return testkit.WithoutCommitWaits(t, dsn) }

// WithSessionOptions returns dsn, a PostgreSQL key=value string or URL, with options (such as "-c lock_timeout=1s")
// as its sessions' options.
func WithSessionOptions(t testing.TB, dsn, options string) string {
	return testkit.WithSessionOptions(t, dsn, options)
}
