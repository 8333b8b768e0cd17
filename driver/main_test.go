package driver_test

import (
	"os"
	"testing"

	_ "github.com/lib/pq"

	"github.com/effectively-once/watermill-inbox/inboxtest"
)

// TestMain runs the tests in a database of their own, dropped at the end.
func TestMain(m *testing.M) {
	os.Exit(inboxtest.RunInOwnDatabases(m, inboxtest.PostgresDatabase("postgres")))
}
