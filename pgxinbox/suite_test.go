package pgxinbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
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

// TestSuite_PgxNativePlainBegin is TestSuite_PgxNative with the round-trip savings switched off
// (pgxinbox.PlainBegin): every transaction sends BEGIN on its own, and nothing is pipelined.
func TestSuite_PgxNativePlainBegin(t *testing.T) {
	t.Parallel()
	inboxtest.Run(t, inboxtest.HarnessFunc(func(t testing.TB) inboxtest.Conn {
		return pgxPlainConn{pgxConn{openPool(t, testDSN())}}
	}))
}

// pgxPlainConn is the suite's view of a pgx pool behind pgxinbox.PlainBegin.
type pgxPlainConn struct{ pgxConn }

func (c pgxPlainConn) Database() *inbox.Database {
	return pgxinbox.Database(pgxinbox.PlainBegin(c.pool))
}
func (c pgxPlainConn) Pool() driver.Pool { return pgxinbox.Pool(pgxinbox.PlainBegin(c.pool)) }

// TestSuite_PgxBeginnerOfItsOwn runs the suite's batch-mode cases over a Beginner that is not one of pgx's, as a
// user's wrapper of the pool (for tracing, say) is: the inbox begins with its BeginTx, and a batch member's
// handler still gets a pgx.Tx that refuses to end the batch and closes when the handler returns.
func TestSuite_PgxBeginnerOfItsOwn(t *testing.T) {
	t.Parallel()
	inboxtest.RunCases(t, inboxtest.HarnessFunc(func(t testing.TB) inboxtest.Conn {
		return pgxOwnConn{pgxConn{openPool(t, testDSN())}}
	}),
		"BatchModeNacksOnlyTheFailingMessagesAndAppliesTheOthersOnce",
		"InBatchModeAHandlerThatSwallowsAFailedStatementCostsOnlyItsOwnMessage",
		"InBatchModeAHandlerCannotCommitOrRollBackTheBatch",
		"InBatchModeAGoroutineThatOutlivesItsHandlerCannotWriteIntoTheBatch",
		"InBatchModeCopiesOfAppliedMessagesReturnTheirProducedMessagesWithoutRunning",
		"AHandlerThatLeavesARowUnscannedAndProducesMessagesIsAppliedOnceOrDeadLetteredWithTheReason",
	)
}

// ownBeginner is a Beginner of the user's: it has the pool's BeginTx and nothing else of it.
type ownBeginner struct{ pool *pgxpool.Pool }

func (b ownBeginner) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	return b.pool.BeginTx(ctx, opts)
}

// pgxOwnConn is the suite's view of a pgx pool behind a Beginner of the user's.
type pgxOwnConn struct{ pgxConn }

func (c pgxOwnConn) Database() *inbox.Database { return pgxinbox.Database(ownBeginner{c.pool}) }
func (c pgxOwnConn) Pool() driver.Pool         { return pgxinbox.Pool(ownBeginner{c.pool}) }

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
