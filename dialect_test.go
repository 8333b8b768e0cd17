package inbox_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/effectively-once/watermill-inbox/internal/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/dialect/postgres"
	"github.com/effectively-once/watermill-inbox/driver"
)

// withoutJoin is PostgreSQL's dialect as a database that cannot guard a claim in a subscriber's transaction.
type withoutJoin struct{ dialect.Dialect }

func (withoutJoin) JoinsSubscriberTx() bool { return false }

type joinNothing struct{}

func (joinNothing) Joined(context.Context) (driver.Tx, bool) { return nil, false }

func TestOnDialect(t *testing.T) {
	t.Parallel()

	t.Run("OnSpeaksPostgreSQL", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "postgres", postgres.Dialect().Name())
		require.True(t, postgres.Dialect().JoinsSubscriberTx())
	})

	t.Run("ADialectThatCannotJoinRefusesJoinersAndTheJoinOption", func(t *testing.T) {
		t.Parallel()
		db, err := sql.Open(testDriver, testDSN()) // New does not reach the database
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		pool := driver.StdSQL(db)
		_, err = inbox.OnDialect(withoutJoin{postgres.Dialect()}, pool, joinNothing{}).New()
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
		_, err = inbox.OnDialect(withoutJoin{postgres.Dialect()}, pool).New(inbox.WithSubscriberTx(true))
		require.ErrorIs(t, err, inbox.ErrInvalidOption)

		_, err = inbox.OnDialect(withoutJoin{postgres.Dialect()}, pool).New()
		require.NoError(t, err)
		_, err = inbox.OnDialect(postgres.Dialect(), pool, joinNothing{}).New(inbox.WithSubscriberTx(true))
		require.NoError(t, err, "PostgreSQL joins")
	})

	t.Run("ANilDialectIsRefused", func(t *testing.T) {
		t.Parallel()
		_, err := inbox.OnDialect(nil, driver.StdSQL(nil)).New()
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
	})
}

func TestPostgresClassifiesBySQLSTATE(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]dialect.ErrorKind{
		"42P01": dialect.NoTable,
		"22P02": dialect.IDRefused, "54000": dialect.IDRefused,
		"22012": dialect.ClientEncoding, "22021": dialect.Untranslatable, "22P05": dialect.Untranslatable,
		"22001": dialect.ValueRefused, "23514": dialect.ValueRefused,
		"40001": dialect.SerializationFailure, "40P01": dialect.LockConflict,
		"26000": dialect.StatementMissing, "42P05": dialect.StatementMissing, "23505": dialect.Other,
		"2200H": dialect.SequenceExhausted,
		"23502": dialect.StaleConsumer,
	} {
		require.Equal(t, want, postgres.Dialect().Classify(codeError(code)), code)
	}
	require.Equal(t, dialect.Other, postgres.Dialect().Classify(nil))
}

type codeError string

func (e codeError) Error() string    { return "pq: " + string(e) }
func (e codeError) SQLState() string { return string(e) }

// A batch claim whose cached consumer id names another consumer now claims nothing, even where its first ID is a
// row of that other consumer: the id's check fails the whole statement before any conflict is looked for.
func TestPostgresBatchClaimOfAStaleConsumerIDClaimsNothing(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	var other int
	require.NoError(t, b.db.QueryRow(`INSERT INTO `+b.Table+`_consumers (name) VALUES ('other') RETURNING id`).Scan(&other))
	_, err := b.db.Exec(`INSERT INTO `+b.Table+` (consumer_id, message_id, state) VALUES ($1, 'evt-1', 'd')`, other)
	require.NoError(t, err)

	d := postgres.Dialect()
	pool := driver.StdSQL(b.db)
	for _, ids := range [][]string{{"evt-1", "evt-2", "evt-3"}, {"evt-0", "evt-1"}} {
		tx, err := pool.Begin(ctx, driver.TxOptions{})
		require.NoError(t, err)
		claimed, err := d.Claims().ClaimBatch(ctx, tx, dialect.ClaimBatchParams{Table: b.Table, Consumer: "wallet-credits",
			ConsumerID: other, IDs: ids, State: "done"})
		require.Error(t, err, "ids %v", ids)
		require.Equal(t, dialect.StaleConsumer, d.Classify(err), "%v", err)
		require.Empty(t, claimed)
		require.NoError(t, tx.Rollback(ctx))
	}
	var rows int
	require.NoError(t, b.db.QueryRow(`SELECT count(*) FROM `+b.Table).Scan(&rows))
	require.Equal(t, 1, rows, "only the other consumer's row")
}
