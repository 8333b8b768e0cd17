package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/watermill-inbox/internal/require"
)

// freshV3Main is a user's program that reads deposits from watermill-sql v3's subscriber and adds the inbox with
// the card's one line and no option. It publishes two events, one of them twice, waits until both are applied,
// and prints what its handler saw: whether the transaction it got was the subscriber's, and the balance.
const freshV3Main = `package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/lib/pq"

	inbox "github.com/effectively-once/watermill-inbox"
)

func main() {
	db, err := sql.Open("postgres", os.Getenv("DATABASE_URL"))
	check(err)
	_, err = db.Exec("CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL); INSERT INTO accounts VALUES (1, 0)")
	check(err)
	check(inbox.OnSQL(db).Migrate(context.Background()))
	pub, err := wsql.NewPublisher(db, wsql.PublisherConfig{SchemaAdapter: wsql.DefaultPostgreSQLSchema{}, AutoInitializeSchema: true}, nil)
	check(err)
	sub, err := wsql.NewSubscriber(db, wsql.SubscriberConfig{ConsumerGroup: "wallet", SchemaAdapter: wsql.DefaultPostgreSQLSchema{},
		OffsetsAdapter: wsql.DefaultPostgreSQLOffsetsAdapter{}, InitializeSchema: true, PollInterval: 20 * time.Millisecond}, nil)
	check(err)

	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	check(err)
	router.AddMiddleware(inbox.Middleware(db))
	var joined, separate atomic.Int64
	router.AddConsumerHandler("wallet-credits", "deposits", sub, func(msg *message.Message) error {
		tx, _ := inbox.TxFromContext(msg.Context())
		if theirs, ok := wsql.TxFromContext(msg.Context()); ok && theirs == tx {
			joined.Add(1)
		} else {
			separate.Add(1)
		}
		_, err := tx.ExecContext(msg.Context(), "UPDATE accounts SET balance = balance + 100 WHERE id = 1")
		return err
	})
	go func() { check(router.Run(context.Background())) }()
	<-router.Running()

	for _, id := range []string{"evt-1", "evt-1", "evt-2"} {
		msg := message.NewMessage(watermill.NewUUID(), nil)
		msg.Metadata.Set(inbox.DefaultIDMetadataKey, id)
		check(pub.Publish("deposits", msg))
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		var rows int
		check(db.QueryRow("SELECT count(*) FROM watermill_inbox").Scan(&rows))
		if rows == 2 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	check(router.Close())
	var balance int
	check(db.QueryRow("SELECT balance FROM accounts WHERE id = 1").Scan(&balance))
	fmt.Printf("joined=%d separate=%d balance=%d\n", joined.Load(), separate.Load(), balance)
}

func check(err error) {
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
}
`

// TestTheCardsLineJoinsWatermillSQLv3sSubscriberInAFreshModule: a fresh module whose program adds the inbox with
// inbox.Middleware(db), and nothing else, applies messages from watermill-sql v3's subscriber once each, in the
// subscriber's own transaction. The program runs on a database of its own, created and dropped by the test, so
// that the inbox's default table is its alone.
func TestTheCardsLineJoinsWatermillSQLv3sSubscriberInAFreshModule(t *testing.T) {
	t.Parallel()
	admin := openDB(t)
	name := fmt.Sprintf("inbox_fresh_v3_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
	_, err := admin.Exec(`CREATE DATABASE ` + name)
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := admin.Exec(`DROP DATABASE IF EXISTS ` + name + ` WITH (FORCE)`); err != nil {
			t.Errorf("drop the program's database: %v", err)
		}
	})
	dsn, err := url.Parse(testDSN())
	require.NoError(t, err)
	dsn.Path = "/" + name

	dir, goBin, env := freshModule(t, map[string]string{"main.go": freshV3Main})
	cmd := exec.Command(goBin, "run", ".")
	cmd.Dir = dir
	cmd.Env = append(env, "DATABASE_URL="+dsn.String())
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go run:\n%s", out)
	require.Contains(t, string(out), "joined=2 separate=0 balance=200",
		"each event applies once, the copy skipped, and the handler gets the subscriber's transaction")

	db, err := sql.Open(testDriver, dsn.String())
	require.NoError(t, err)
	defer db.Close()
	var rows int
	require.NoError(t, db.QueryRowContext(context.Background(), `SELECT count(*) FROM watermill_inbox`).Scan(&rows))
	require.Equal(t, 2, rows)
	require.NotContains(t, strings.ToLower(string(out)), "error")
}

// freshModule writes files into a new module that requires this checkout of the library, tidies it, and returns
// its directory, the go command and the environment to run it in: no workspace, modules from this machine's cache
// first (a file proxy), then the usual proxy, and extra. go.sum is the library's, so tidy needs no checksum
// database.
func freshModule(t *testing.T, files map[string]string, extra ...string) (dir, goBin string, env []string) {
	t.Helper()
	repo, err := filepath.Abs(".")
	require.NoError(t, err)
	goSum, err := os.ReadFile("go.sum")
	require.NoError(t, err)
	dir = t.TempDir()
	userMod := "module example.com/wallet\n\ngo 1.24\n\nrequire github.com/effectively-once/watermill-inbox v0.0.0\n\n" +
		"replace github.com/effectively-once/watermill-inbox => " + repo + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(userMod), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), goSum, 0o644))
	for name, text := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
	}
	goBin, err = exec.LookPath("go")
	require.NoError(t, err, "go must be on PATH")
	proxy := "file://" + filepath.Join(goEnv(t, goBin, "GOMODCACHE"), "cache", "download") + "," + goEnv(t, goBin, "GOPROXY")
	env = append(append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOSUMDB=off", "GOPROXY="+proxy), extra...)
	tidy := exec.Command(goBin, "mod", "tidy")
	tidy.Dir, tidy.Env = dir, env
	out, err := tidy.CombinedOutput()
	require.NoError(t, err, "go mod tidy:\n%s", out)
	return dir, goBin, env
}
