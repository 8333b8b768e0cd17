package inbox_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectively-once/watermill-inbox/internal/require"
)

// freshModuleMain is the README's usage, verbatim where it matters, as a user's program would hold it.
const freshModuleMain = `package main

import (
	"database/sql"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "github.com/lib/pq"

	inbox "github.com/effectively-once/watermill-inbox"
)

func main() {
	db, _ := sql.Open("postgres", "postgres://localhost/app")
	router, _ := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	sub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	router.AddMiddleware(inbox.Middleware(db))
	router.AddConsumerHandler("wallet-credits", "deposits", sub, func(msg *message.Message) error {
		tx, _ := inbox.TxFromContext(msg.Context())
		_, err := tx.ExecContext(msg.Context(), "UPDATE accounts SET balance = balance + $1 WHERE id = $2", 100, 1)
		return err
	})
}
`

func TestOneLineUsageCompilesInAFreshModuleAndStaysLean(t *testing.T) {
	t.Parallel()
	// An empty module cache of the user's own: after tidy and build it holds exactly what they made the go command
	// fetch.
	modCache := filepath.Join(t.TempDir(), "modcache")
	t.Cleanup(func() {
		cmd := exec.Command("go", "clean", "-modcache")
		cmd.Env = append(os.Environ(), "GOMODCACHE="+modCache)
		_ = cmd.Run()
	})
	dir, goBin, env := freshModule(t, map[string]string{"main.go": freshModuleMain}, "GOMODCACHE="+modCache)
	run := func(args ...string) string {
		cmd := exec.Command(goBin, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %v:\n%s", args, out)
		return string(out)
	}
	run("build", "-o", filepath.Join(dir, "wallet"), ".")

	// The card's user stays lean: what only pgx, MySQL, OpenTelemetry or the examples need lives in modules of its
	// own, so none of it is compiled into a program that imports only the root package.
	deps := run("list", "-deps", ".")
	for _, heavy := range []string{"github.com/jackc/pgx", "github.com/jackc/puddle", "github.com/go-sql-driver/mysql",
		"go.opentelemetry.io", "github.com/twmb/franz-go", "github.com/IBM/sarama", "github.com/prometheus"} {
		require.NotContains(t, deps, heavy, "a program importing only the root package compiles %s", heavy)
	}
	for _, seam := range []string{"github.com/effectively-once/watermill-inbox/driver", "github.com/effectively-once/watermill-inbox/dialect"} {
		require.Contains(t, deps, seam, "the list must be the real one")
	}
}

// goEnv returns the go command's setting of name.
func goEnv(t testing.TB, goBin, name string) string {
	t.Helper()
	out, err := exec.Command(goBin, "env", name).Output()
	require.NoError(t, err, "go env %s", name)
	return strings.TrimSpace(string(out))
}

// TestMaintenanceOptions_AMiddlewareOptionDoesNotCompile: a maintenance call takes only the options it can read,
// so one that shapes the middleware, given to it, is a compile error in the user's module rather than an option
// silently ignored. The same program with maintenance options in their place builds, so the test can tell.
func TestMaintenanceOptions_AMiddlewareOptionDoesNotCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a fresh module")
	}
	t.Parallel()
	const program = `package main

import (
	"context"
	"database/sql"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	inbox "github.com/effectively-once/watermill-inbox"
)

var _ = time.Second
var _ watermill.LoggerAdapter

func main() {
	ctx, db := context.Background(), inbox.OnSQL((*sql.DB)(nil))
	p := inbox.ForgetParams{Consumer: "wallet-credits", ID: "evt-1"}
	_, _ = db.Forget(ctx, p, %s)
	_ = db.Migrate(ctx, %s)
	_, _ = db.Cleanup(ctx, inbox.CleanupParams{}, %s)
}
`
	fill := func(forget, migrate, cleanup string) string {
		out := strings.Replace(program, "%s", forget, 1)
		out = strings.Replace(out, "%s", migrate, 1)
		return strings.Replace(out, "%s", cleanup, 1)
	}
	dir, goBin, env := freshModule(t, map[string]string{
		"main.go": fill("inbox.WithTable(\"billing_inbox\")", "inbox.WithIDType(inbox.IDTypeUUID)", "inbox.WithLogger(watermill.NopLogger{})"),
	})
	build := func() (string, error) {
		cmd := exec.Command(goBin, "build", "-o", os.DevNull, ".")
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := build()
	require.NoError(t, err, "the program with maintenance options builds:\n%s", out)

	bad := fill("inbox.WithBatch(time.Millisecond, 8)", "inbox.WithLease(time.Minute)", "inbox.WithConsumer(\"wallet-credits\")")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(bad), 0o644))
	out, err = build()
	require.Error(t, err, "a middleware option given to a maintenance call must not compile:\n%s", out)
	for _, option := range []string{"WithBatch", "WithLease", "WithConsumer"} {
		require.Regexp(t, `inbox\.`+option+`\(.*\) \(value of interface type inbox\.Option\) as inbox\.MaintenanceOption value`, out)
	}
}
