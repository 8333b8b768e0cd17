package pgxinbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
)

// TestSuite_PgxNative runs the behaviour suite over a pgx v5 pool, with the handler's effect on the pgx.Tx that
// pgxinbox.TxFromContext returns.
func TestSuite_PgxNative(t *testing.T) {
	t.Parallel()
	inboxtest.Run(t, inboxtest.HarnessFunc(func(t testing.TB) inboxtest.Conn {
		return pgxConn{openPool(t, testDSN())}
	}))
}

// pgxConn is the suite's view of a pgx pool.
type pgxConn struct{ pool *pgxpool.Pool }

func (c pgxConn) Dialect() inboxtest.Dialect { return inboxtest.PostgreSQL }
func (c pgxConn) Database() *inbox.Database  { return pgxinbox.Database(c.pool) }
func (c pgxConn) Pool() driver.Pool          { return pgxinbox.Pool(c.pool) }

func (c pgxConn) ExecInHandler(ctx context.Context, query string, args ...any) error {
	tx, ok := pgxinbox.TxFromContext(ctx)
	if !ok {
		return errors.New("no pgx transaction in the handler's context")
	}
	_, err := tx.Exec(ctx, query, args...)
	return err
}

func (c pgxConn) LeaveRowUnscannedInHandler(ctx context.Context, query string) error {
	tx, ok := pgxinbox.TxFromContext(ctx)
	if !ok {
		return errors.New("no pgx transaction in the handler's context")
	}
	_ = tx.QueryRow(ctx, query)
	return nil
}

func (c pgxConn) EndInHandler(ctx context.Context, commit bool) error {
	tx, ok := pgxinbox.TxFromContext(ctx)
	if !ok {
		return errors.New("no pgx transaction in the handler's context")
	}
	if commit {
		return tx.Commit(ctx)
	}
	return tx.Rollback(ctx)
}

// TestSuite_PgxStdlib runs the behaviour suite over database/sql with pgx v5's driver.
func TestSuite_PgxStdlib(t *testing.T) {
	t.Parallel()
	inboxtest.Run(t, inboxtest.HarnessFunc(func(t testing.TB) inboxtest.Conn {
		db := openStdlib(t, testDSN())
		return inboxtest.StdSQL(db, inbox.On(driver.StdSQL(db)), inboxtest.PostgreSQL)
	}))
}
