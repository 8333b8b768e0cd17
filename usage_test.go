package inbox_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
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
	repo, err := filepath.Abs(".")
	require.NoError(t, err)
	goSum, err := os.ReadFile("go.sum")
	require.NoError(t, err)

	dir := t.TempDir()
	// The user's module points the library at this checkout; go.sum is the library's, so tidy finds every
	// checksum it needs without asking the checksum database.
	userMod := "module example.com/wallet\n\ngo 1.24\n\nrequire github.com/effectively-once/watermill-inbox v0.0.0\n\n" +
		"replace github.com/effectively-once/watermill-inbox => " + repo + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(userMod), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), goSum, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(freshModuleMain), 0o644))

	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "go must be on PATH")
	// An empty module cache of the user's own: after tidy and build it holds exactly what they made the go command
	// fetch. Modules come from this machine's cache first (file proxy), then from the usual proxy.
	modCache := filepath.Join(t.TempDir(), "modcache")
	proxy := "file://" + filepath.Join(goEnv(t, goBin, "GOMODCACHE"), "cache", "download") + "," + goEnv(t, goBin, "GOPROXY")
	run := func(args ...string) string {
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOMODCACHE="+modCache, "GOPROXY="+proxy)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %v:\n%s", args, out)
		return string(out)
	}
	t.Cleanup(func() {
		cmd := exec.Command(goBin, "clean", "-modcache")
		cmd.Env = append(os.Environ(), "GOMODCACHE="+modCache)
		_ = cmd.Run()
	})
	run("mod", "tidy")
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
