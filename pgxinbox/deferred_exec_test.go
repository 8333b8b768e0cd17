package pgxinbox_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
)

// deferrer is what the inbox's batch mode asks of a transaction that can hold a statement back: the functions of
// its pool's TxCaps, on it.
type deferrer struct {
	caps driver.TxCaps
	tx   driver.Tx
}

func (d deferrer) DeferExec(query string)             { d.caps.DeferExec(d.tx, query) }
func (d deferrer) EndDeferred() (ran bool, err error) { return d.caps.EndDeferred(d.tx) }

// executing counts the round trips that ran statements: not those that only prepared them (pgx's statement cache
// prepares a statement new to the connection in a round trip of its own, once).
func (c *tripCounter) executing() int64 {
	return c.turns[turnBegin].Load() + c.turns[turnCommit].Load() + c.turns[turnStatement].Load() + c.turns[turnPipeline].Load()
}

func TestDeferredExec(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	begin := func(t *testing.T) (*tripCounter, *testBundle, driver.Tx, deferrer) {
		var trips tripCounter
		pool := openCountingPool(t, &trips, pgx.QueryExecModeCacheStatement)
		b := newBundleOn(t, pool)
		p := pgxinbox.Pool(pool)
		tx, err := p.Begin(ctx, driver.TxOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		capser, ok := p.(driver.TxCapser)
		require.True(t, ok, "the inbox's pgx pool tells what its transactions can do")
		caps := capser.TxCaps()
		require.True(t, caps.DeferExec != nil && caps.EndDeferred != nil, "the inbox's pgx transaction holds statements back")
		return &trips, b, tx, deferrer{caps, tx}
	}

	t.Run("AHeldBackStatementRidesWithTheNextInOneRoundTrip", func(t *testing.T) {
		t.Parallel()
		trips, b, tx, d := begin(t)
		_, err := tx.Exec(ctx, `UPDATE `+b.Accounts+` SET balance = balance + $1 WHERE id = 1`, 1)
		require.NoError(t, err)

		trips.reset()
		d.DeferExec("savepoint member")
		require.Zero(t, trips.trips.Load(), "nothing goes before the next statement")
		_, err = tx.Exec(ctx, `UPDATE `+b.Accounts+` SET balance = balance + $1 WHERE id = 1`, 10)
		require.NoError(t, err)
		require.EqualValues(t, 1, trips.executing(), "the savepoint and the statement, in one round trip")
		require.EqualValues(t, 1, trips.turns[turnPipeline].Load())
		ran, err := d.EndDeferred()
		require.True(t, ran)
		require.NoError(t, err)

		_, err = tx.Exec(ctx, "rollback to savepoint member")
		require.NoError(t, err, "the savepoint was set before the statement")
		var balance int
		require.NoError(t, tx.QueryRow(ctx, `SELECT balance FROM `+b.Accounts+` WHERE id = $1`, 1).Scan(&balance))
		require.Equal(t, 1, balance, "the rollback undid the statement after the savepoint, and only that")
	})

	t.Run("AHeldBackStatementNoStatementFollowsIsDropped", func(t *testing.T) {
		t.Parallel()
		trips, b, tx, d := begin(t)
		_, err := tx.Exec(ctx, `UPDATE `+b.Accounts+` SET balance = balance + $1 WHERE id = 1`, 1)
		require.NoError(t, err)
		trips.reset()
		d.DeferExec("savepoint member")
		ran, err := d.EndDeferred()
		require.False(t, ran)
		require.NoError(t, err)
		require.Zero(t, trips.trips.Load())
		_, err = tx.Exec(ctx, `SELECT $1::int`, 1)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "rollback to savepoint member")
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "3B001", pgErr.Code, "no savepoint was ever set")
	})

	t.Run("AStatementWithoutArgumentsSendsItFirst", func(t *testing.T) {
		t.Parallel()
		trips, b, tx, d := begin(t)
		_, err := tx.Exec(ctx, `UPDATE `+b.Accounts+` SET balance = balance + $1 WHERE id = 1`, 1)
		require.NoError(t, err)
		trips.reset()
		d.DeferExec("savepoint member")
		_, err = tx.Exec(ctx, `UPDATE `+b.Accounts+` SET balance = balance + 10 WHERE id = 1`)
		require.NoError(t, err)
		require.EqualValues(t, 2, trips.executing(), "a statement in the simple protocol goes alone, after the savepoint")
		ran, err := d.EndDeferred()
		require.True(t, ran)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "rollback to savepoint member")
		require.NoError(t, err)
	})

	t.Run("AHeldBackStatementTheServerRefusesFailsTheNextAndReportsIt", func(t *testing.T) {
		t.Parallel()
		_, b, tx, d := begin(t)
		_, err := tx.Exec(ctx, `UPDATE `+b.Accounts+` SET balance = balance + $1 WHERE id = 1`, 1)
		require.NoError(t, err)
		d.DeferExec("savepoint") // a syntax error
		_, err = tx.Exec(ctx, `UPDATE `+b.Accounts+` SET balance = balance + $1 WHERE id = 1`, 10)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "42601", pgErr.Code)
		ran, err := d.EndDeferred()
		require.True(t, ran)
		require.ErrorAs(t, err, &pgErr)
	})

	t.Run("AQueryCarriesBeginInOneRoundTrip", func(t *testing.T) {
		t.Parallel()
		trips, _, tx, _ := begin(t)
		trips.reset()
		rows, err := tx.Query(ctx, `SELECT g FROM generate_series(1, $1::int) g`, 3)
		require.NoError(t, err)
		var got []int
		for rows.Next() {
			var n int
			require.NoError(t, rows.Scan(&n))
			got = append(got, n)
		}
		require.NoError(t, rows.Err())
		require.NoError(t, rows.Close())
		require.Equal(t, []int{1, 2, 3}, got)
		require.EqualValues(t, 1, trips.executing(), "BEGIN and the query, in one round trip")
		require.EqualValues(t, 1, trips.turns[turnPipeline].Load())
		var inTx bool
		require.NoError(t, tx.QueryRow(ctx, `SELECT now() = statement_timestamp() AND $1::bool`, true).Scan(&inTx))
		require.False(t, inTx, "the query ran in the transaction, which began before this statement")
		require.NoError(t, tx.Commit(ctx))
	})

	t.Run("AQueryThatFailsWithBeginLeavesTheTransactionFailed", func(t *testing.T) {
		t.Parallel()
		_, _, tx, _ := begin(t)
		rows, err := tx.Query(ctx, `SELECT 1 / $1::int`, 0)
		if err == nil {
			for rows.Next() {
			}
			err = rows.Err()
			require.NoError(t, rows.Close())
		}
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "22012", pgErr.Code)
		_, err = tx.Exec(ctx, `SELECT $1::int`, 1)
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "25P02", pgErr.Code, "the transaction began, and the query's failure failed it")
		require.Error(t, tx.Commit(ctx))
	})
}
