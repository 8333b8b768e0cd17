package inbox_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

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
		"22P02": dialect.IDRefused, "22021": dialect.IDRefused, "54000": dialect.IDRefused,
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
