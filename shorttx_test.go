package inbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/watermill-inbox/internal/require"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/dialect/postgres"
	"github.com/effectively-once/watermill-inbox/internal/store"
)

// pgError is a driver error with a SQLSTATE code, as lib/pq's and pgx's errors have.
type pgError string

func (e pgError) Error() string    { return "pg error " + string(e) }
func (e pgError) SQLState() string { return string(e) }

func TestRetryConflicts(t *testing.T) {
	t.Parallel()

	t.Run("RunsAgainAfterSerializationFailuresAndDeadlocks", func(t *testing.T) {
		t.Parallel()
		fails := []error{pgError("40001"), pgError("40P01")}
		calls := 0
		err := dialect.RetryConflicts(context.Background(), postgres.Dialect(), 5, time.Millisecond, func() error {
			calls++
			if calls <= len(fails) {
				return fails[calls-1]
			}
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, 3, calls)
	})

	t.Run("GivesUpAfterTheBoundAndSaysSo", func(t *testing.T) {
		t.Parallel()
		calls := 0
		err := dialect.RetryConflicts(context.Background(), postgres.Dialect(), 4, time.Millisecond, func() error { calls++; return pgError("40001") })
		require.Equal(t, 4, calls)
		require.ErrorIs(t, err, pgError("40001"))
		require.ErrorContains(t, err, "after 4 tries")
	})

	t.Run("DoesNotRunOtherFailuresAgain", func(t *testing.T) {
		t.Parallel()
		for _, fail := range []error{pgError("23505"), pgError("22021"), errors.New("connection refused")} {
			calls := 0
			err := dialect.RetryConflicts(context.Background(), postgres.Dialect(), 5, time.Millisecond, func() error { calls++; return fail })
			require.Equal(t, 1, calls, "%v", fail)
			require.Equal(t, fail, err)
		}
	})

	t.Run("StopsWaitingWhenTheContextEnds", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		calls := 0
		err := dialect.RetryConflicts(ctx, postgres.Dialect(), 5, time.Hour, func() error { calls++; cancel(); return pgError("40P01") })
		require.Equal(t, 1, calls)
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, err, pgError("40P01"))
	})
}

func TestPoolerHint_ExplainsAPreparedStatementAProxyLostOnceHoweverOftenWrapped(t *testing.T) {
	t.Parallel()
	for _, code := range []pgError{"26000", "42P05"} {
		err := store.PoolerHint(postgres.Dialect(), code)
		require.ErrorIs(t, err, code)
		require.Contains(t, err.Error(), "default_query_exec_mode=cache_describe")
		again := store.PoolerHint(postgres.Dialect(), fmt.Errorf("inbox: claim: %w", err))
		require.Equal(t, 1, strings.Count(again.Error(), "transaction-pooling proxy"), "explained once: %v", again)
	}
	other := pgError("23505")
	require.Equal(t, error(other), store.PoolerHint(postgres.Dialect(), other))
	require.NoError(t, store.PoolerHint(postgres.Dialect(), nil))
}
