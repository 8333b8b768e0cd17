package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/effectively-once/watermill-inbox/internal/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

func TestMiddleware_TheOneLineWorksBehindPgBouncerInTransactionMode(t *testing.T) {
	t.Parallel()
	dsn := testkit.StartPgbouncer(t, testDSN(), "postgres")
	db, err := sql.Open("postgres", dsn) // lib/pq with its defaults: unnamed statements, two round trips each
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(16)
	table := freshTable(t, openDB(t))

	const instances = 8
	var wg sync.WaitGroup
	errs := make(chan error, instances*2)
	for n := range instances {
		h := inbox.Middleware(db, inbox.WithTable(table), inbox.WithConsumer(fmt.Sprintf("consumer-%d", n)),
			inbox.WithRejectDelay(100*time.Millisecond))(noop)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, id := range []string{"evt-1", "evt-2"} {
				_, err := h(newMsg(id))
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, inbox.OnSQL(db).Migrate(context.Background(), inbox.WithTable(table)))
	var rows int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM `+table).Scan(&rows))
	require.Equal(t, instances*2, rows)
}
