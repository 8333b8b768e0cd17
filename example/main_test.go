package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/effectively-once/watermill-inbox/example/internal/demotest"
)

func TestMain(m *testing.M) { os.Exit(demotest.RunInOwnDatabase(m)) }

// The run needs PostgreSQL (DATABASE_URL, or the local default) and fails, never skips, when it is missing: a green
// test that proved nothing would be worse than a red one.
func TestRunCreditsEachUniqueEventOnceAndSkipsResentCopies(t *testing.T) {
	demotest.NeedsDatabase(t)
	cfg := configFromEnv()
	// Always the in-process broker: the test must not depend on, or write to, a cluster that KAFKA_BROKERS names.
	cfg.Brokers = nil
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	res, err := run(ctx, cfg)
	require.NoError(t, err)

	require.Empty(t, res.wrongBalances())
	require.Len(t, res.Balances, cfg.Accounts)
	require.Equal(t, cfg.Events, res.Applied, "ledger lines: each unique credit exactly once")
	require.Equal(t, cfg.Resends, res.Resent)
	require.NotZero(t, res.Skipped)
	// A rebalance may redeliver an original too, so there can be more skips than resends, never fewer.
	require.GreaterOrEqual(t, res.Skipped, int64(res.Resent))
}

func TestWrongBalancesNamesEachAccountOffItsSum(t *testing.T) {
	t.Parallel()
	res := result{
		Balances: map[int64]int64{1: 100, 2: 250, 3: 300},
		Expected: map[int64]int64{1: 100, 2: 200, 3: 300, 4: 50},
	}
	require.Equal(t, []string{"account 2 has 250, want 200", "account 4 has 0, want 50"}, res.wrongBalances())
	require.Empty(t, result{Balances: res.Expected, Expected: res.Expected}.wrongBalances())
}

// A reader's first question is what the example connects to: -h names both variables and what happens without them.
func TestHelpNamesTheEnvironmentAndItsDefaults(t *testing.T) {
	t.Parallel()
	help := demotest.Help(t)
	require.Contains(t, help, "DATABASE_URL")
	require.Contains(t, help, "postgres://root@127.0.0.1:5432/test?sslmode=disable")
	require.Contains(t, help, "KAFKA_BROKERS")
	require.Contains(t, help, "inside the process")
	require.Contains(t, help, "-v")
}
