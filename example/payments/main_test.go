package main

import (
	"context"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/effectively-once/watermill-inbox/example/internal/demotest"
)

func TestMain(m *testing.M) { os.Exit(demotest.RunInOwnDatabase(m)) }

// The run needs PostgreSQL (DATABASE_URL, or the local default) and fails, never skips, when it is missing: a green
// test that proved nothing would be worse than a red one.
func TestRunChargesEachRequestOnceThroughATakeoverOfAHungCall(t *testing.T) {
	demotest.NeedsDatabase(t)
	cfg := configFromEnv()
	// Always the in-process broker: the test must not depend on, or write to, a cluster that KAFKA_BROKERS names.
	cfg.Brokers = nil
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	res, err := run(ctx, cfg)
	require.NoError(t, err)
	require.Empty(t, res.problems())
	require.EqualValues(t, cfg.Requests, res.Charges, "one charge per request")
	require.Len(t, res.PerPayment, cfg.Requests)

	// The held call: attempt 1 charged, attempt 2 took over with the same key and got that charge back.
	require.Len(t, res.HeldCalls, 2)
	first, second := res.HeldCalls[0], res.HeldCalls[1]
	if first.Attempt > second.Attempt {
		first, second = second, first
	}
	require.Equal(t, 1, first.Attempt)
	require.False(t, first.Replayed)
	require.Equal(t, 2, second.Attempt)
	require.Equal(t, "lease of attempt 1 expired", second.PreviousError)
	require.Equal(t, first.Key, second.Key, "one idempotency key across attempts and copies")
	require.True(t, second.Replayed)
	require.Equal(t, first.ChargeID, second.ChargeID, "the provider replayed the first charge")

	// At least: on a slow machine another call may outlast its lease too, and be taken over the same way.
	require.GreaterOrEqual(t, res.TakenOver, int64(1))
	require.GreaterOrEqual(t, res.LostLeases, int64(1), "attempt 1's late result is refused, not marked done")
	require.GreaterOrEqual(t, res.Replays, int64(1))
	require.Equal(t, res.Charges+res.Replays, res.Calls, "every call either charged or replayed")
	// A rebalance may redeliver an original too, so there can be more skips than resends, never fewer.
	require.GreaterOrEqual(t, res.Skipped, int64(cfg.Resends))
}

func TestProviderChargesOncePerIdempotencyKey(t *testing.T) {
	t.Parallel()
	p, err := startProvider("")
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	c := providerClient{url: p.URL, http: http.DefaultClient}
	ctx := context.Background()

	first, err := c.charge(ctx, "k1", charge{PaymentID: "pay-1", Amount: 100})
	require.NoError(t, err)
	require.False(t, first.Replayed)
	again, err := c.charge(ctx, "k1", charge{PaymentID: "pay-1", Amount: 100})
	require.NoError(t, err)
	require.Equal(t, chargeReply{ID: first.ID, Replayed: true}, again)

	_, err = c.charge(ctx, "k1", charge{PaymentID: "pay-1", Amount: 999})
	require.ErrorContains(t, err, "422", "a key reused with another body is refused")
	_, err = c.charge(ctx, "", charge{PaymentID: "pay-2", Amount: 100})
	require.ErrorContains(t, err, "400")

	other, err := c.charge(ctx, "k2", charge{PaymentID: "pay-1", Amount: 100})
	require.NoError(t, err)
	require.NotEqual(t, first.ID, other.ID, "another key is another charge, even for the same payment")
	require.Equal(t, map[string]int{"pay-1": 2}, p.chargesPerPayment())
	require.EqualValues(t, 2, p.charges.Load())
	require.EqualValues(t, 1, p.replays.Load())
}

func TestProblemsNamesEachPaymentNotChargedExactlyOnce(t *testing.T) {
	t.Parallel()
	res := result{
		Requests:   3,
		PaymentIDs: []string{"pay-1", "pay-2", "pay-3"},
		PerPayment: map[string]int{"pay-1": 1, "pay-2": 2},
		Charges:    3,
	}
	require.Equal(t, []string{"pay-2 charged 2 times, want once", "pay-3 charged 0 times, want once"}, res.problems())
	res.PerPayment["pay-2"], res.PerPayment["pay-3"] = 1, 1
	require.Empty(t, res.problems())
}

func TestRunGivesUpWithoutHangingWhenNoCopyTakesTheHeldCallOver(t *testing.T) {
	demotest.NeedsDatabase(t)
	cfg := configFromEnv()
	cfg.Brokers = nil
	cfg.Lease = time.Minute // outlives the run: no copy can take the held call over
	cfg.Timeout = 3 * time.Second
	start := time.Now()

	_, err := run(context.Background(), cfg)
	require.ErrorContains(t, err, "gave up after 3s")
	require.Less(t, time.Since(start), 15*time.Second, "the held call is let go, so the router closes promptly")
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
