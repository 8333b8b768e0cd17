// Package demotest runs an example's command the way a reader does, for the examples' tests.
package demotest

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/lib/pq"

	"github.com/effectively-once/watermill-inbox/example/internal/demoenv"
	"github.com/effectively-once/watermill-inbox/inboxtest"
)

// NeedsDatabase skips the test under -short, which runs only the tests that need no database. Without -short it
// does nothing: an example's run then fails, loudly, when PostgreSQL is missing.
func NeedsDatabase(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL; run without -short")
	}
}

// Help builds the command in the test's package directory and returns what its -h prints, failing the test when
// -h is not a clean exit.
func Help(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "example")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(ctx, bin, "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("-h: %v\n%s", err, out)
	}
	return string(out)
}

// RunInOwnDatabase is an example package's TestMain: it runs the tests with DATABASE_URL naming a database of
// their own, created on the server DATABASE_URL (or demoenv.DefaultDatabaseURL) names and dropped at the end.
func RunInOwnDatabase(m *testing.M) int {
	return inboxtest.RunInOwnDatabases(m, inboxtest.Database{
		Driver: "postgres", EnvVar: "DATABASE_URL", DefaultDSN: demoenv.DefaultDatabaseURL,
	})
}
