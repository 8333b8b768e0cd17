package inboxtest

import (
	"context"

	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// PostgresServer is a PostgreSQL server a test or the harness started for itself: a fresh cluster in a temporary
// directory, listening on a free loopback port. It is the only kind of server they restart: restarting whatever
// server a DSN points at would restart someone else's database. Its transaction IDs are its own, so no other
// program's open transaction holds back the snapshots of the tests that run on it (see RunInOwnDatabases).
type PostgresServer = testkit.PostgresServer

// PostgresServerUser is the superuser role StartPostgres creates in its cluster, and the one its DSN connects as.
const PostgresServerUser = testkit.PostgresServerUser

// CompareVersions orders "9.6" before "15" before "17": numerically, part by part.
func CompareVersions(a, b string) int { return testkit.CompareVersions(a, b) }

// StartPostgres creates a cluster in a new temporary directory and starts it on a free loopback port, with the
// newest PostgreSQL server binaries installed. PostgreSQL refuses to run as root, so as root the server runs as the
// postgres user. The caller must call Stop.
func StartPostgres(ctx context.Context) (*PostgresServer, error) { return testkit.StartPostgres(ctx) }
