package driver_test

import (
	"os"
	"testing"

	_ "github.com/lib/pq"

	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// TestMain runs the tests in a database of their own, dropped at the end.
func TestMain(m *testing.M) {
	os.Exit(testkit.RunInOwnDatabases(m, testkit.PostgresDatabase("postgres")))
}
