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
