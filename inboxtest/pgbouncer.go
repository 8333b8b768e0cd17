package inboxtest

import (
	"testing"

	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// PgbouncerPoolSize is how many server connections the test pooler opens to PostgreSQL. More than one, and handed
// out in turn (server_round_robin), so that two statements of one client that are not in one transaction really
// run on different server connections, as they do behind a busy production pooler.
const PgbouncerPoolSize = testkit.PgbouncerPoolSize

// LockedBuffer is a bytes.Buffer that several goroutines may write to while a test reads it: a child process's
// output, or a logger's that handlers running at once write to.
type LockedBuffer = testkit.LockedBuffer

// StartPgbouncer starts a pgbouncer of its own in transaction pooling mode on a free loopback port, in front of the
// PostgreSQL database upstream names, and returns the DSN that reaches that database through it. It stops the
// pooler when the test ends. The pooler asks clients for no password and logs in to PostgreSQL as upstream's user.
// driverName is the database/sql driver (registered by the caller) it checks the pooler with. It fails the test,
// loudly, when pgbouncer is not installed, and skips it under -short, as the suite does.
func StartPgbouncer(t testing.TB, upstreamDSN, driverName string) string {
	return testkit.StartPgbouncer(t, upstreamDSN, driverName)
}
