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
	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/prommetrics"
)

// TestMain runs the tests in a database of their own, dropped at the end.
func TestMain(m *testing.M) {
	os.Exit(inboxtest.RunInOwnDatabases(m, inboxtest.PostgresDatabase("postgres")))
}

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
	require.NoError(t, inbox.OnSQL(db).Migrate(context.Background(), inbox.WithTable(table)))
	t.Cleanup(func() {
		_, _ = db.Exec(`DROP TABLE IF EXISTS ` + table + `, ` + table + `_produced, ` + table + `_migrations, ` +
			table + `_locks, ` + table + `_consumers CASCADE`) // CASCADE: the view goes with the table
		_, _ = db.Exec(`DROP FUNCTION IF EXISTS ` + table + `_unfinished_claim()`)
	})
	return db, table
}

// consumerSince registers consumer in the consumers table of the inbox table, as if its first claim had been ago
// (an interval such as "3 days"), and returns the id its rows carry.
func consumerSince(t *testing.T, db *sql.DB, table, consumer, ago string) int {
	t.Helper()
	var id int
	require.NoError(t, db.QueryRow(`INSERT INTO `+table+`_consumers AS c (name, created_at) VALUES ($1, now() - $2::interval)
		ON CONFLICT (name) DO UPDATE SET created_at = least(c.created_at, excluded.created_at) RETURNING id`, consumer, ago).Scan(&id))
	return id
}

// minutesAgo is an SQL expression for the time ago (an interval such as "2 hours") as the inbox table's
// processed_at stores it: minutes since 1970, rounded down.
func minutesAgo(ago string) string {
	return "(floor(extract(epoch FROM now() - interval '" + ago + "') / 60))::integer"
}

func msgWithID(id string) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), nil)
	msg.Metadata.Set(inbox.DefaultIDMetadataKey, id)
	msg.SetContext(context.Background())
	return msg
}

// deadLetters is a dead-letter publisher that keeps nothing.
type deadLetters struct{}

func (deadLetters) Publish(string, ...*message.Message) error { return nil }
func (deadLetters) Close() error                              { return nil }

func TestObserver_ExportsEveryEventOfRealInboxWorkOnTheGivenRegistry(t *testing.T) {
	db, table := openTable(t)
	reg := prometheus.NewPedanticRegistry()
	obs, err := prommetrics.NewObserver(reg)
	require.NoError(t, err)
	noop := func(*message.Message) ([]*message.Message, error) { return nil, nil }

	// Transaction mode: two claims and a duplicate, then a message without an ID, dead-lettered.
	ib, err := inbox.New(db, inbox.WithTable(table), inbox.WithConsumer("wallet-credits"), inbox.WithObserver(obs),
		inbox.WithDeadLetter(deadLetters{}, "dlq"))
	require.NoError(t, err)
	for _, id := range []string{"evt-1", "evt-1", "evt-2"} {
		_, err := ib.Middleware(noop)(msgWithID(id))
		require.NoError(t, err)
	}
	_, err = ib.Middleware(noop)(message.NewMessage(watermill.NewUUID(), nil))
	require.NoError(t, err)

	// Without a dead-letter topic the message without an ID is nacked instead.
	ib, err = inbox.New(db, inbox.WithTable(table), inbox.WithConsumer("wallet-credits"), inbox.WithObserver(obs),
		inbox.WithRejectDelay(time.Millisecond))
	require.NoError(t, err)
	_, err = ib.Middleware(noop)(message.NewMessage(watermill.NewUUID(), nil))
	require.ErrorIs(t, err, inbox.ErrMissingEventID)

	// A reused event ID, with fingerprints: the second message under evt-9 says something else, and is dead-lettered.
	ib, err = inbox.New(db, inbox.WithTable(table), inbox.WithConsumer("wallet-credits"), inbox.WithObserver(obs),
		inbox.WithDeadLetter(deadLetters{}, "dlq"), inbox.WithFingerprint(inbox.Fingerprint{DeadLetter: true}))
	require.NoError(t, err)
	for _, payload := range []string{"paid", "refunded"} {
		msg := msgWithID("evt-9")
		msg.Payload = []byte(payload)
		_, err := ib.Middleware(noop)(msg)
		require.NoError(t, err)
	}

	// Lease mode: a takeover of a dead holder's lease, and a holder that loses its lease to another.
	ib, err = inbox.New(db, inbox.WithTable(table), inbox.WithConsumer("payments"), inbox.WithObserver(obs),
		inbox.WithLease(time.Minute))
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO `+table+` (consumer_id, message_id, state, attempts, lease_token, locked_until)
		VALUES ($1, 'pay-1', 'p', 1, $2, now() - interval '1 second')`, consumerSince(t, db, table, "payments", "0"), watermill.NewUUID())
	require.NoError(t, err)
	_, err = ib.Middleware(noop)(msgWithID("pay-1"))
	require.NoError(t, err)
	_, err = ib.Middleware(func(*message.Message) ([]*message.Message, error) {
		_, err := db.Exec(`UPDATE `+table+` SET lease_token = $1 WHERE message_id = 'pay-2'`, watermill.NewUUID())
		return nil, err
	})(msgWithID("pay-2"))
	require.ErrorIs(t, err, inbox.ErrLeaseLost)

	// Cleanup of two consumers' expired rows.
	for consumer, n := range map[string]int{"wallet-credits": 25, "archive": 4} {
		_, err = db.Exec(`INSERT INTO `+table+` (consumer_id, message_id, processed_at)
			SELECT $1, $2 || '-old-' || g, `+minutesAgo("30 days")+` FROM generate_series(1, $3::int) g`,
			consumerSince(t, db, table, consumer, "30 days"), consumer, n)
		require.NoError(t, err)
	}
	_, err = inbox.OnSQL(db).Cleanup(context.Background(), inbox.CleanupParams{BatchSize: 10}, inbox.WithTable(table), inbox.WithObserver(obs))
	require.NoError(t, err)

	value := func(name string, labels ...string) float64 {
		t.Helper()
		return sample(t, reg, name, labels)
	}
	require.Equal(t, 3.0, value("watermill_inbox_claims_total", "consumer", "wallet-credits", "mode", "transaction"))
	require.Equal(t, 2.0, value("watermill_inbox_claims_total", "consumer", "payments", "mode", "lease"))
	require.Equal(t, 1.0, value("watermill_inbox_duplicates_skipped_total", "consumer", "wallet-credits", "mode", "transaction"))
	require.Equal(t, 4.0, value("watermill_inbox_claim_duration_seconds", "consumer", "wallet-credits", "mode", "transaction"),
		"claims and duplicates are timed alike")
	require.Equal(t, 3.0, value("watermill_inbox_commit_duration_seconds", "consumer", "wallet-credits", "mode", "transaction"))
	require.Equal(t, 2.0, value("watermill_inbox_commit_duration_seconds", "consumer", "payments", "mode", "lease"))
	require.Equal(t, 1.0, value("watermill_inbox_commit_failures_total", "consumer", "payments", "mode", "lease"))
	require.Equal(t, 3.0, value("watermill_inbox_finished_total", "consumer", "wallet-credits", "mode", "transaction", "outcome", "committed"))
	require.Equal(t, 1.0, value("watermill_inbox_fingerprint_conflicts_total", "action", "dead_lettered", "consumer", "wallet-credits", "mode", "transaction"))
	require.Equal(t, 1.0, value("watermill_inbox_dead_letters_total", "consumer", "wallet-credits", "reason", "fingerprint_conflict"))
	require.Equal(t, 1.0, value("watermill_inbox_finished_total", "consumer", "payments", "mode", "lease", "outcome", "committed"))
	require.Equal(t, 1.0, value("watermill_inbox_finished_total", "consumer", "payments", "mode", "lease", "outcome", "lease_lost"))
	require.Equal(t, 1.0, value("watermill_inbox_dead_letters_total", "consumer", "wallet-credits", "reason", "missing_id"))
	require.Equal(t, 1.0, value("watermill_inbox_nacks_total", "consumer", "wallet-credits", "reason", "missing_id"))
	require.Equal(t, 1.0, value("watermill_inbox_lease_takeovers_total", "consumer", "payments"))
	require.Equal(t, 1.0, value("watermill_inbox_leases_lost_total", "consumer", "payments"))
	require.Equal(t, 25.0, value("watermill_inbox_rows_cleaned_total", "consumer", "wallet-credits"))
	require.Equal(t, 4.0, value("watermill_inbox_rows_cleaned_total", "consumer", "archive"))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP watermill_inbox_leases_lost_total Lease-mode holders whose write was refused because their lease had been taken over: their result is lost.
# TYPE watermill_inbox_leases_lost_total counter
watermill_inbox_leases_lost_total{consumer="payments"} 1
`), "watermill_inbox_leases_lost_total"), "the pedantic registry accepts the metrics as exported")

	_, err = prommetrics.NewObserver(reg)
	require.Error(t, err, "a second set of the same metrics on one registry is refused")

	two := prometheus.NewPedanticRegistry()
	for _, table := range []string{"billing_inbox", "shipping_inbox"} {
		_, err = prommetrics.NewObserver(prometheus.WrapRegistererWith(prometheus.Labels{"table": table}, two))
		require.NoError(t, err, "registerers wrapped with a label per table tell two tables apart")
	}
}

// sample returns the value of the series of name with exactly labels (name, value pairs): a counter's value, or a
// histogram's count of observations, which must all be positive.
func sample(t *testing.T, g prometheus.Gatherer, name string, labels []string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel())*2 != len(labels) {
				continue
			}
			for i, l := range m.GetLabel() {
				if l.GetName() != labels[2*i] || l.GetValue() != labels[2*i+1] {
					continue series
				}
			}
			if h := m.GetHistogram(); h != nil {
				require.Positive(t, h.GetSampleSum(), "%s%v: every observed duration is above zero", name, labels)
				return float64(h.GetSampleCount())
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

func TestRegisterOldestRowAge(t *testing.T) {
	t.Run("ExportsHowFarBackEachConsumerRemembersAtScrapeTime", func(t *testing.T) {
		db, table := openTable(t)
		reg := prometheus.NewPedanticRegistry()
		require.NoError(t, prommetrics.RegisterOldestRowAge(reg, inbox.OnSQL(db), 0, inbox.WithTable(table)))
		n, err := testutil.GatherAndCount(reg, "watermill_inbox_oldest_row_age_seconds")
		require.NoError(t, err)
		require.Zero(t, n, "no consumers, no gauges")

		// A consumer remembers since its first claim (or the cutoff of the last cleanup, when that is later),
		// which the consumers table records: here two hours and three days ago.
		wallet, payments := consumerSince(t, db, table, "wallet-credits", "2 hours"), consumerSince(t, db, table, "payments", "3 days")
		_, err = db.Exec(`INSERT INTO `+table+` (consumer_id, message_id, processed_at)
			VALUES ($1, 'a', `+minutesAgo("2 hours")+`), ($1, 'b', `+minutesAgo("0")+`), ($2, 'c', `+minutesAgo("3 days")+`)`,
			wallet, payments)
		require.NoError(t, err)
		ages := gatherAges(t, reg)
		require.InDelta(t, 2*time.Hour.Seconds(), ages["wallet-credits"], 60)
		require.InDelta(t, 3*24*time.Hour.Seconds(), ages["payments"], 60)
	})

	t.Run("CountsAFailedQueryWithoutFailingTheScrape", func(t *testing.T) {
		db, table := openTable(t)
		reg := prometheus.NewPedanticRegistry()
		require.NoError(t, prommetrics.RegisterOldestRowAge(reg, inbox.OnSQL(db), time.Second, inbox.WithTable(table+"_missing")))
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP watermill_inbox_oldest_row_age_errors_total Scrapes whose query for watermill_inbox_oldest_row_age_seconds failed or timed out.
# TYPE watermill_inbox_oldest_row_age_errors_total counter
watermill_inbox_oldest_row_age_errors_total 1
`)))
	})

	t.Run("ChecksTheOptionsAtRegistration", func(t *testing.T) {
		db, _ := openTable(t)
		err := prommetrics.RegisterOldestRowAge(prometheus.NewRegistry(), inbox.OnSQL(db), 0, inbox.WithTable("Not A Table"))
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
