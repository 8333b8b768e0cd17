package pgxinbox_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
)

// Behind pgbouncer in transaction pooling mode, pgx works once it stops reusing prepared statements across
// transactions (default_query_exec_mode=cache_describe), natively and through its database/sql driver, in both
// modes; at its defaults it fails loudly, with the setting to change named in the error.

// proxiedDatabases returns the inbox's Database behind the pooler at dsn, natively and through database/sql.
func proxiedDatabases(t *testing.T, dsn string, mode pgx.QueryExecMode) map[string]*inbox.Database {
	t.Helper()
	setting := map[pgx.QueryExecMode]string{ // the DSN's spelling of the mode
		pgx.QueryExecModeCacheStatement: "cache_statement",
		pgx.QueryExecModeCacheDescribe:  "cache_describe",
	}[mode]
	require.NotEmpty(t, setting, "a mode this test knows how to spell")
	db := openStdlib(t, dsn+"&default_query_exec_mode="+setting)
	return map[string]*inbox.Database{
		"native": pgxinbox.Database(openPoolIn(t, dsn, mode)),
		"stdlib": inbox.On(driver.StdSQL(db)),
	}
}

func TestPgbouncer_WithCacheDescribeEveryEffectLandsOnce(t *testing.T) {
	t.Parallel()
	dsn := inboxtest.StartPgbouncer(t, testDSN(), "pgx")
	for name, database := range proxiedDatabases(t, dsn, pgx.QueryExecModeCacheDescribe) {
		for mode, opts := range map[string][]inbox.Option{
			"transaction": nil,
			"lease":       {inbox.WithLease(10 * time.Second)},
		} {
			t.Run(name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				b := newBundle(t)
				ib, err := database.New(b.Options(opts...)...)
				require.NoError(t, err)
				calls := &inboxtest.CallCounter{}
				ids := inboxtest.EventIDs("evt", 30)
				errs := inboxtest.DeliverCopies(t, ib.Middleware(b.creditAnyTx(calls)), ids, 3)
				require.Empty(t, errs)
				calls.RequireOnceEach(t, ids)
				if mode == "transaction" {
					require.Equal(t, len(ids), b.Balance(t), "each effect on the transaction committed once")
				}
				require.Equal(t, len(ids), b.Rows(t, "wallet-credits"))
			})
		}
	}
}

func TestPgbouncer_AtPgxsDefaultsTheErrorNamesTheSetting(t *testing.T) {
	t.Parallel()
	dsn := inboxtest.StartPgbouncer(t, testDSN(), "pgx")
	for name, database := range proxiedDatabases(t, dsn, pgx.QueryExecModeCacheStatement) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t)
			// The schema check, too, meets the cache's statements: a failure there holds the message back for the
			// reject delay, which this test need not wait out.
			ib, err := database.New(b.Options(inbox.WithAutoMigrate(false), inbox.WithRejectDelay(10*time.Millisecond))...)
			require.NoError(t, err)
			h := ib.Middleware(b.creditAnyTx(&inboxtest.CallCounter{}))
			// Between two messages, another client holds a transaction open on the server connection the pooler
			// would hand back first (the one used last), so that the next message gets another one, where the
			// statements pgx cached were never prepared.
			holder, err := pgx.Connect(context.Background(), dsn+"&default_query_exec_mode=simple_protocol")
			require.NoError(t, err)
			t.Cleanup(func() { _ = holder.Close(context.Background()) })
			var failure error
			for n := 0; n < 16*inboxtest.PgbouncerPoolSize && failure == nil; n++ {
				msg := newMsg(fmt.Sprintf("evt-%d", n))
				msg.SetContext(context.Background())
				_, failure = h(msg)
				if n%2 == 1 || failure != nil {
					continue
				}
				held, err := holder.Begin(context.Background())
				require.NoError(t, err)
				_, err = held.Exec(context.Background(), "SELECT 1")
				require.NoError(t, err)
				_, failure = h(newMsg(fmt.Sprintf("evt-%d-held", n)))
				require.NoError(t, held.Rollback(context.Background()))
			}
			require.Error(t, failure, "pgx's statement cache meets a server connection it did not prepare on")
			require.ErrorContains(t, failure, "default_query_exec_mode=cache_describe")
		})
	}
}

// In batch mode the members' first statements go in one pipeline, each after its savepoint, both pgx's cached
// statements: a failure there names the setting to change too.
func TestPgbouncer_AtPgxsDefaultsABatchsPipelineErrorNamesTheSetting(t *testing.T) {
	t.Parallel()
	dsn := inboxtest.StartPgbouncer(t, testDSN(), "pgx")
	b := newBundle(t)
	ib, err := pgxinbox.New(openPoolIn(t, dsn, pgx.QueryExecModeCacheStatement), b.Options(inbox.WithAutoMigrate(false),
		inbox.WithRejectDelay(10*time.Millisecond), inbox.WithBatch(time.Millisecond, 16))...)
	require.NoError(t, err)
	// The server connection the pooler hands a batch may lack the statements pgx prepared on another one for the same
	// client connection.
	h := ib.Middleware(b.Credit(1, nil))
	const pipelineFailed = "pipeline the statements of"
	var mu sync.Mutex
	var failures []string
	for round := 0; round < 50 && len(failures) == 0; round++ {
		var wg sync.WaitGroup
		for n := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := h(newMsg(fmt.Sprintf("evt-%d-%d", round, n))); err != nil && strings.Contains(err.Error(), pipelineFailed) {
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	require.NotEmpty(t, failures, "a batch's pipeline meets a server connection without pgx's statements")
	for _, failure := range failures {
		require.Contains(t, failure, "default_query_exec_mode=cache_describe")
	}
}

// creditAnyTx counts each event's calls and credits account 1 on the transaction the inbox gives, pgx's or
// database/sql's; in lease mode there is none, and it only counts.
func (b *testBundle) creditAnyTx(calls *inboxtest.CallCounter) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		calls.Call(msg.Metadata.Get("event_id"))
		const credit = `UPDATE %s SET balance = balance + 1 WHERE id = 1`
		if tx, ok := pgxinbox.TxFromContext(ctx); ok {
			_, err := tx.Exec(ctx, fmt.Sprintf(credit, b.Accounts))
			return nil, err
		}
		if tx, ok := inbox.TxFromContext(ctx); ok {
			_, err := tx.ExecContext(ctx, fmt.Sprintf(credit, b.Accounts))
			return nil, err
		}
		return nil, nil
	}
}
