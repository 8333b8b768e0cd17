package prommetrics_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/lib/pq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/prommetrics"
)

// openTable connects to the test database (INBOX_TEST_DATABASE_URL, or this machine's default), failing loudly
// when it cannot, and migrates an inbox table no other test uses.
func openTable(t *testing.T) (*sql.DB, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL; run without -short")
	}
	dsn := os.Getenv("INBOX_TEST_DATABASE_URL")
	if dsn == "" {
		dsn = "postgres://root@127.0.0.1:5432/test?sslmode=disable"
	}
	db, err := sql.Open("postgres", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("PostgreSQL is not reachable at %s (set INBOX_TEST_DATABASE_URL): %v", dsn, err)
	}
	table := fmt.Sprintf("inbox_test_prom_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	require.NoError(t, inbox.Migrate(context.Background(), db, inbox.WithTable(table)))
	t.Cleanup(func() {
		_, _ = db.Exec(`DROP TABLE IF EXISTS ` + table + `, ` + table + `_produced, ` + table + `_migrations`)
	})
	return db, table
}

func msgWithID(id string) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), nil)
	msg.Metadata.Set(inbox.DefaultIDMetadataKey, id)
	msg.SetContext(context.Background())
	return msg
}

func TestObserver_CountsWhatTheInboxReportsOnTheGivenRegistry(t *testing.T) {
	db, table := openTable(t)
	reg := prometheus.NewPedanticRegistry()
	obs, err := prommetrics.NewObserver(reg)
	require.NoError(t, err)

	ib, err := inbox.New(db, inbox.WithTable(table), inbox.WithConsumer("wallet-credits"), inbox.WithObserver(obs))
	require.NoError(t, err)
	h := ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	for _, id := range []string{"evt-1", "evt-1", "evt-2"} {
		_, err := h(msgWithID(id))
		require.NoError(t, err)
	}
	obs.DeadLettered("wallet-credits", "missing_id")
	obs.LeaseTakenOver("payments")
	_, err = db.Exec(`INSERT INTO ` + table + ` (consumer, message_id, processed_at)
		SELECT 'wallet-credits', 'old-' || g, now() - interval '30 days' FROM generate_series(1, 25) g`)
	require.NoError(t, err)
	_, err = inbox.Cleanup(context.Background(), db, inbox.CleanupParams{BatchSize: 10}, inbox.WithTable(table), inbox.WithObserver(obs))
	require.NoError(t, err)

	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP watermill_inbox_claims_total Messages the inbox claimed for a consumer, counted before the handler ran.
# TYPE watermill_inbox_claims_total counter
watermill_inbox_claims_total{consumer="wallet-credits"} 2
# HELP watermill_inbox_duplicates_skipped_total Copies of messages a consumer had applied before, skipped without running the handler.
# TYPE watermill_inbox_duplicates_skipped_total counter
watermill_inbox_duplicates_skipped_total{consumer="wallet-credits"} 1
# HELP watermill_inbox_dead_letters_total Messages published to the dead-letter topic, by reason (missing_id, invalid_id, attempts_exhausted, ...).
# TYPE watermill_inbox_dead_letters_total counter
watermill_inbox_dead_letters_total{consumer="wallet-credits",reason="missing_id"} 1
# HELP watermill_inbox_lease_takeovers_total Lease-mode messages taken over from a holder whose lease had expired: it died or hung mid-handler.
# TYPE watermill_inbox_lease_takeovers_total counter
watermill_inbox_lease_takeovers_total{consumer="payments"} 1
# HELP watermill_inbox_rows_cleaned_total Inbox rows deleted by the cleanup after their retention ran out.
# TYPE watermill_inbox_rows_cleaned_total counter
watermill_inbox_rows_cleaned_total 25
`)))

	_, err = prommetrics.NewObserver(reg)
	require.Error(t, err, "a second set of the same counters on one registry is refused")

	two := prometheus.NewPedanticRegistry()
	for _, table := range []string{"billing_inbox", "shipping_inbox"} {
		_, err = prommetrics.NewObserver(prometheus.WrapRegistererWith(prometheus.Labels{"table": table}, two))
		require.NoError(t, err, "registerers wrapped with a label per table tell two tables apart")
	}
}

func TestRegisterOldestRowAge(t *testing.T) {
	t.Run("ExportsHowFarBackEachConsumerRemembersAtScrapeTime", func(t *testing.T) {
		db, table := openTable(t)
		reg := prometheus.NewPedanticRegistry()
		require.NoError(t, prommetrics.RegisterOldestRowAge(reg, db, 0, inbox.WithTable(table)))
		n, err := testutil.GatherAndCount(reg, "watermill_inbox_oldest_row_age_seconds")
		require.NoError(t, err)
		require.Zero(t, n, "no rows, no consumers")

		_, err = db.Exec(`INSERT INTO ` + table + ` (consumer, message_id, processed_at)
			VALUES ('wallet-credits', 'a', now() - interval '2 hours'), ('wallet-credits', 'b', now()),
			       ('payments', 'c', now() - interval '3 days')`)
		require.NoError(t, err)
		ages := gatherAges(t, reg)
		require.InDelta(t, 2*time.Hour.Seconds(), ages["wallet-credits"], 60)
		require.InDelta(t, 3*24*time.Hour.Seconds(), ages["payments"], 60)
	})

	t.Run("CountsAFailedQueryWithoutFailingTheScrape", func(t *testing.T) {
		db, table := openTable(t)
		reg := prometheus.NewPedanticRegistry()
		require.NoError(t, prommetrics.RegisterOldestRowAge(reg, db, time.Second, inbox.WithTable(table+"_missing")))
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP watermill_inbox_oldest_row_age_errors_total Scrapes whose query for watermill_inbox_oldest_row_age_seconds failed or timed out.
# TYPE watermill_inbox_oldest_row_age_errors_total counter
watermill_inbox_oldest_row_age_errors_total 1
`)))
	})

	t.Run("ChecksTheOptionsAtRegistration", func(t *testing.T) {
		db, _ := openTable(t)
		err := prommetrics.RegisterOldestRowAge(prometheus.NewRegistry(), db, 0, inbox.WithTable("Not A Table"))
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
	})
}

func gatherAges(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	ages := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "watermill_inbox_oldest_row_age_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			ages[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	return ages
}
