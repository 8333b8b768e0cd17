package pgxinbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
)

// The security tests over pgx's database/sql driver and over pgx itself: inboxtest.PostgresSecurity says what they
// prove. pgx keeps working when the session's client_encoding changes: it sends its parameters as they are, and
// the server reads them in the session's encoding. The fuzz tests run with
// go test -run '^$' -fuzz FuzzSecurity_EventID -fuzztime 60s . (and the same for the other two).

// pgxSecurity reaches the database over pgx's database/sql driver, or, native, over a pgxpool.Pool.
func pgxSecurity(native bool) inboxtest.PostgresSecurity {
	open := func(t testing.TB, dsn string) inboxtest.SessionConn {
		return inboxtest.StdSQLSession(inboxtest.OpenSessionDB(t, "pgx", dsn, 1))
	}
	if native {
		open = func(t testing.TB, dsn string) inboxtest.SessionConn {
			return nativeSession{openPoolWith(t, dsn, func(cfg *pgxpool.Config) { cfg.MaxConns = 1 })}
		}
	}
	return inboxtest.PostgresSecurity{DSN: testDSN(), Driver: "pgx", Open: open}
}

func TestSecurity_AHostileEventIDIsStoredExactlyOrRefusedUnderEverySessionSetting(t *testing.T) {
	t.Parallel()
	t.Run("OverPgxsDatabaseSQLDriver", func(t *testing.T) {
		t.Parallel()
		pgxSecurity(false).Matrix(t)
	})
	t.Run("OverPgxNative", func(t *testing.T) {
		t.Parallel()
		pgxSecurity(true).Matrix(t)
	})
}

func FuzzSecurity_EventID(f *testing.F) { pgxSecurity(true).FuzzEventID(f) }

func FuzzSecurity_EventIDOverDatabaseSQL(f *testing.F) { pgxSecurity(false).FuzzEventID(f) }

func FuzzSecurity_ConsumerName(f *testing.F) { pgxSecurity(true).FuzzConsumerName(f) }

func FuzzSecurity_ErrorText(f *testing.F) { pgxSecurity(true).FuzzErrorText(f) }

// nativeSession is the inbox's pgxpool.Pool of one connection.
type nativeSession struct{ pool *pgxpool.Pool }

func (c nativeSession) Exec(ctx context.Context, query string) error {
	_, err := c.pool.Exec(ctx, query)
	return err
}

func (c nativeSession) ExecInTx(ctx context.Context, query string) error {
	tx, ok := pgxinbox.TxFromContext(ctx)
	if !ok {
		return errors.New("no pgx.Tx in the handler's context")
	}
	_, err := tx.Exec(ctx, query)
	return err
}

func (c nativeSession) NewInbox(opts ...inbox.Option) (*inbox.Inbox, error) {
	return pgxinbox.New(c.pool, opts...)
}

func (c nativeSession) Backend(ctx context.Context) (pid int, err error) {
	return pid, c.pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid)
}
