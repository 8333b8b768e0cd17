package main_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/effectively-once/watermill-inbox/inboxtest"
)

// The binary under test, built once by TestMain from this directory's source.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "watermill-inbox-cli")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "watermill-inbox")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the CLI: %v\n%s", err, out)
		os.Exit(1)
	}
	code := inboxtest.RunInOwnDatabases(m, inboxtest.PostgresDatabase("postgres"), inboxtest.MySQLDatabase())
	os.RemoveAll(dir)
	os.Exit(code)
}

func testDSN() string { return inboxtest.PostgresDatabase("postgres").DSN() }

// result is what one run of the binary did.
type result struct {
	code           int
	stdout, stderr string
}

// cli runs the binary with args and DATABASE_URL unset, so only --dsn reaches a database.
func cli(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run %v: %v", args, err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// newTable returns a table name no other test uses, a connection to check on it, and drops what migrate creates
// when the test ends. It fails loudly without PostgreSQL, and skips the test under -short.
func newTable(t *testing.T) (*sql.DB, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL; run without -short")
	}
	db, err := sql.Open("postgres", testDSN())
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("PostgreSQL is not reachable at %s (set INBOX_TEST_DATABASE_URL): %v", testDSN(), err)
	}
	table := fmt.Sprintf("inbox_test_cli_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	t.Cleanup(func() {
		_, _ = db.Exec(`DROP TABLE IF EXISTS ` + table + `, ` + table + `_produced, ` + table + `_migrations, ` +
			table + `_locks, ` + table + `_consumers CASCADE`) // CASCADE: the view goes with the table
		_, _ = db.Exec(`DROP FUNCTION IF EXISTS ` + table + `_unfinished_claim()`)
	})
	return db, table
}

// consumerID registers consumer in the consumers table of the inbox table, if it is not yet, and returns the id its
// rows carry in the compact layout.
func consumerID(t *testing.T, db *sql.DB, table, consumer string) int {
	t.Helper()
	var id int
	require.NoError(t, db.QueryRow(`INSERT INTO `+table+`_consumers (name) VALUES ($1)
		ON CONFLICT (name) DO UPDATE SET name = excluded.name RETURNING id`, consumer).Scan(&id))
	return id
}

// remembers finds the row of the stats table whose leading columns match columns and whose last column matches
// last, and returns its remembers column.
func remembers(t *testing.T, stdout, columns, last string) time.Duration {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s*` + columns + `\s+(\S+)\s+` + last + `\s*$`).FindStringSubmatch(stdout)
	require.NotNil(t, m, "no row matches %q:\n%s", columns, stdout)
	return parseDays(t, m[1])
}

// parseDays reads a duration as the CLI writes it: Go's form, after a whole number of days such as "14d".
func parseDays(t *testing.T, s string) time.Duration {
	t.Helper()
	var total time.Duration
	if i := strings.IndexByte(s, 'd'); i > 0 {
		n, err := strconv.Atoi(s[:i])
		require.NoError(t, err, s)
		total, s = time.Duration(n)*24*time.Hour, s[i+1:]
	}
	if s != "" {
		rest, err := time.ParseDuration(s)
		require.NoError(t, err, s)
		total += rest
	}
	return total
}

// requireNear fails the test unless got is within tolerance of want.
func requireNear(t *testing.T, want, got, tolerance time.Duration) {
	t.Helper()
	if d := got - want; d < -tolerance || d > tolerance {
		t.Fatalf("got %v, want %v within %v", got, want, tolerance)
	}
}

// minutesAgo is an SQL expression for the time ago (an interval such as "2 days") as processed_at stores it:
// minutes since 1970, rounded down.
func minutesAgo(ago string) string {
	return "(floor(extract(epoch FROM now() - interval '" + ago + "') / 60))::integer"
}

func TestCLI_HelpAndUsageErrors(t *testing.T) {
	t.Parallel()
	help := cli(t, "help")
	require.Equal(t, 0, help.code)
	require.Contains(t, help.stdout, "Exit codes:")
	for _, cmd := range []string{"migrate", "cleanup", "stats", "forget"} {
		require.Contains(t, help.stdout, "  "+cmd+" ", "help lists %s", cmd)
		sub := cli(t, cmd, "-h")
		require.Equal(t, 0, sub.code, "%s -h is not an error", cmd)
		require.Contains(t, sub.stderr, "Usage: watermill-inbox "+cmd)
		require.Contains(t, sub.stderr, "-dsn")
	}

	none := cli(t)
	require.Equal(t, 2, none.code)
	require.Contains(t, none.stderr, "Usage:")
	unknown := cli(t, "vacuum")
	require.Equal(t, 2, unknown.code)
	require.Contains(t, unknown.stderr, `unknown command "vacuum"`)
	badFlag := cli(t, "cleanup", "--window", "fortnight")
	require.Equal(t, 2, badFlag.code)
	missing := cli(t, "forget", "--consumer", "wallet-credits")
	require.Equal(t, 2, missing.code)
	require.Contains(t, missing.stderr, "--consumer and --id are required")
	badTable := cli(t, "stats", "--dsn", testDSN(), "--table", "Robert'); DROP TABLE students;--")
	require.Equal(t, 2, badTable.code, "an invalid table name is a usage error, and never reaches SQL")
}

// A user of the CLI knows its flags and commands, not the library's Go options: every complaint names the flag
// or the command to use, and says the library's words once.
func TestCLI_ErrorsNameFlagsAndCommandsNotGoOptions(t *testing.T) {
	t.Parallel()
	unreachable := "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=2"

	badTable := cli(t, "stats", "--dsn", unreachable, "--table", "Bad-Name")
	require.Equal(t, 2, badTable.code)
	require.Contains(t, badTable.stderr, `watermill-inbox stats: --table "Bad-Name": want a table name of lower-case letters`)
	require.NotContains(t, badTable.stderr, "WithTable")

	badType := cli(t, "migrate", "--dsn", unreachable, "--id-type", "int")
	require.Equal(t, 2, badType.code)
	require.Contains(t, badType.stderr, `watermill-inbox migrate: --id-type "int": want text or uuid`)
	require.NotContains(t, badType.stderr, "WithIDType")

	for _, batch := range []string{"0", "-1", "1000001"} {
		res := cli(t, "cleanup", "--dsn", unreachable, "--batch", batch)
		require.Equal(t, 2, res.code, "--batch %s is a usage error, found before connecting", batch)
		require.Contains(t, res.stderr, "watermill-inbox cleanup: --batch "+batch+": want 1 to ")
		require.NotContains(t, res.stderr, "CleanupParams")
	}
	negPause := cli(t, "cleanup", "--dsn", unreachable, "--pause", "-1s")
	require.Equal(t, 2, negPause.code)
	require.Contains(t, negPause.stderr, "--pause must not be negative")

	db, table := newTable(t)
	common := []string{"--dsn", testDSN(), "--table", table}
	for _, cmd := range [][]string{{"stats"}, {"cleanup"}, {"forget", "--consumer", "c", "--id", "e"}} {
		res := cli(t, append(cmd, common...)...)
		require.Equal(t, 1, res.code, "%s of a table that does not exist", cmd[0])
		require.Equal(t, "watermill-inbox "+cmd[0]+": table "+table+" does not exist in this database: "+
			"create it with 'watermill-inbox migrate --table "+table+"' (and the same --dsn)\n", res.stderr)
	}

	require.Equal(t, 0, cli(t, append([]string{"migrate"}, common...)...).code)
	_, err := db.Exec(`INSERT INTO `+table+` (consumer_id, message_id, state, attempts, processed_at, locked_until)
		VALUES ($1, 'live', 'p', 1, `+minutesAgo("0")+`, now() + interval '1 hour')`, consumerID(t, db, table, "payments"))
	require.NoError(t, err)
	missing := cli(t, append([]string{"forget", "--consumer", "payments", "--id", "evt-9"}, common...)...)
	require.Equal(t, 3, missing.code)
	require.Equal(t, "watermill-inbox forget: "+table+` has no row for consumer "payments" and ID "evt-9": nothing to forget`+"\n", missing.stderr)
	live := cli(t, append([]string{"forget", "--consumer", "payments", "--id", "live"}, common...)...)
	require.Equal(t, 5, live.code)
	require.Equal(t, "watermill-inbox forget: the row of payments/live is being processed under a live lease: "+
		"retry when it has ended, or add --force (its call may then run twice)\n", live.stderr)
}

// Cleanup's output is one summary on stdout, counted in words that agree with their numbers; the library's log
// lines are for --verbose.
func TestCLI_CleanupPrintsOneSummaryWithSingularsForOne(t *testing.T) {
	t.Parallel()
	db, table := newTable(t)
	common := []string{"--dsn", testDSN(), "--table", table}
	require.Equal(t, 0, cli(t, append([]string{"migrate"}, common...)...).code)
	_, err := db.Exec(`INSERT INTO `+table+` (consumer_id, message_id, processed_at) VALUES ($1, 'recent', `+minutesAgo("0")+`)`,
		consumerID(t, db, table, "wallet-credits"))
	require.NoError(t, err)

	nothing := cli(t, append([]string{"cleanup", "--window", "14d"}, common...)...)
	require.Equal(t, 0, nothing.code, nothing.stderr)
	require.Regexp(t, `^deleted 0 rows of `+table+` older than 14d \(before [0-9T:Z-]+\) in 2 batches, \S+\n$`, nothing.stdout)
	require.Empty(t, nothing.stderr, "no log line unless --verbose")

	_, err = db.Exec(`INSERT INTO `+table+` (consumer_id, message_id, processed_at) VALUES ($1, 'old', `+minutesAgo("20 days")+`)`,
		consumerID(t, db, table, "wallet-credits"))
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO `+table+` (consumer_id, message_id, state, attempts, processed_at, locked_until)
		VALUES ($1, 'stuck', 'p', 2, `+minutesAgo("30 days")+`, now() - interval '29 days')`, consumerID(t, db, table, "payments"))
	require.NoError(t, err)
	one := cli(t, append([]string{"cleanup", "--window", "14d", "--progress", "0s", "--verbose"}, common...)...)
	require.Equal(t, 0, one.code, one.stderr)
	// A round takes several statements however little it deletes (the span of pages, the walk, a last look for
	// rows the walk did not meet, the summaries), so the batches are plural here.
	require.Regexp(t, `^deleted 1 row of `+table+` older than 14d \(before [0-9T:Z-]+\) in \d+ batches, \S+\n`+
		`left 1 abandoned lease: a 'processing' row whose lease ran out before the cutoff; see 'watermill-inbox stats'\n$`, one.stdout)
	require.Regexp(t, regexp.MustCompile(`(?m)^cleanup: 1 row deleted in 2 batches`), one.stderr)
	require.Contains(t, one.stderr, "Inbox cleanup finished", "--verbose shows the library's log")

	stats := cli(t, append([]string{"stats"}, common...)...)
	require.Equal(t, 0, stats.code, stats.stderr)
	require.Contains(t, stats.stdout, "1 'processing' row has an expired lease")
}

func TestCLI_ReportsAnUnreachableDatabaseAsAnError(t *testing.T) {
	t.Parallel()
	res := cli(t, "stats", "--dsn", "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=2")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "connect to PostgreSQL")
}

func TestCLI_MigrateCleanupStatsForget(t *testing.T) {
	t.Parallel()
	db, table := newTable(t)
	dsn := testDSN()
	common := []string{"--dsn", dsn, "--table", table}

	res := cli(t, append([]string{"stats"}, common...)...)
	require.Equal(t, 1, res.code, "stats of a table that does not exist fails")
	require.Contains(t, res.stderr, "does not exist")

	res = cli(t, append([]string{"migrate"}, common...)...)
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `^`+table+` is at schema version \d+ \(\w+\)\n$`, res.stdout)
	require.Equal(t, 0, cli(t, append([]string{"migrate"}, common...)...).code, "migrate again is a no-op")

	wallet, payments := consumerID(t, db, table, "wallet-credits"), consumerID(t, db, table, "payments")
	// Since when each consumer remembers: its first claim. wallet-credits claimed its first message three weeks
	// ago, payments a month ago; newcomer was registered 20 hours ago and has applied nothing yet.
	_, err := db.Exec(`UPDATE ` + table + `_consumers SET created_at = now() - CASE name
		WHEN 'wallet-credits' THEN interval '21 days' ELSE interval '30 days' END`)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO ` + table + `_consumers (name, created_at) VALUES ('newcomer', now() - interval '20 hours')`)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO `+table+` (consumer_id, message_id, processed_at)
		SELECT $1, 'old-' || g, floor(extract(epoch FROM now() - interval '20 days' - g * interval '1 second') / 60)::integer
		FROM generate_series(1, 250) g`, wallet)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO `+table+` (consumer_id, message_id, processed_at)
		SELECT $1, 'evt-' || g, `+minutesAgo("2 days")+` FROM generate_series(1, 5) g`, wallet)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO `+table+` (consumer_id, message_id, state, attempts, processed_at, locked_until)
		VALUES ($1, 'live', 'p', 1, `+minutesAgo("0")+`, now() + interval '1 hour'),
		       ($1, 'stuck', 'p', 2, `+minutesAgo("30 days")+`, now() - interval '29 days'),
		       ($1, 'gave-up', 'f', 5, `+minutesAgo("1 day")+`, NULL)`, payments)
	require.NoError(t, err)

	t.Run("CleanupDeletesInBatchesWithProgressAndASummary", func(t *testing.T) {
		res := cli(t, append([]string{"cleanup", "--window", "14d", "--batch", "100", "--progress", "0s"}, common...)...)
		require.Equal(t, 0, res.code, res.stderr)
		summary := regexp.MustCompile(`^deleted 250 rows of ` + table + ` older than 14d \(before [0-9T:Z-]+\) in (\d+) batches, `).
			FindStringSubmatch(res.stdout)
		require.NotNil(t, summary, res.stdout)
		require.Contains(t, res.stdout, "left 1 abandoned lease:")
		// One progress line per batch that deleted rows (--progress 0s), each at most --batch rows after the last,
		// the first a whole batch: the oldest rows fill more than one.
		var deleted, batches []int
		for _, m := range regexp.MustCompile(`(?m)^cleanup: (\d+) rows deleted in (\d+) batches`).FindAllStringSubmatch(res.stderr, -1) {
			n, _ := strconv.Atoi(m[1])
			b, _ := strconv.Atoi(m[2])
			deleted, batches = append(deleted, n), append(batches, b)
		}
		require.GreaterOrEqual(t, len(deleted), 3, "250 rows take at least three batches of 100: %s", res.stderr)
		require.Equal(t, 100, deleted[0])
		for i := 1; i < len(deleted); i++ {
			require.Greater(t, deleted[i], deleted[i-1])
			require.LessOrEqual(t, deleted[i]-deleted[i-1], 100, "no batch deletes more than --batch")
			require.Greater(t, batches[i], batches[i-1])
		}
		require.Equal(t, 250, deleted[len(deleted)-1])
		total, _ := strconv.Atoi(summary[1])
		require.Greater(t, total, batches[len(batches)-1], "the round ends with a batch that found nothing")
		require.NotContains(t, res.stderr, "Inbox cleanup finished", "the library's log is for --verbose")
	})

	t.Run("StatsShowsConsumersStatesMemoryAndSize", func(t *testing.T) {
		res := cli(t, append([]string{"stats"}, common...)...)
		require.Equal(t, 0, res.code, res.stderr)
		// The size line's numbers depend on PostgreSQL's pages, and a tiny table's bytes per row are many.
		require.Regexp(t, `^table `+table+`: 8 rows; heap [^,]+, indexes [^,]+, total .+ \(\d+ bytes per row\)\n`, res.stdout)
		require.Regexp(t, `(?m)^consumer ids: 32,764 of 32,767 left$`, res.stdout, "three names registered")
		// wallet-credits' oldest row is two days old, but it remembers back to the cleanup's cutoff, 14 days (up to
		// a minute more: the cutoff is rounded down to processed_at's whole minutes); its quiet days between are
		// remembered too. So does payments, which first claimed a month ago; newcomer, registered after the cutoff,
		// remembers 20 hours, and has no row. Each is measured from the database's clock at the INSERT to the
		// CLI's when it runs: seconds apart under -race, so the durations are compared with a tolerance.
		day := `\d{4}-\d\d-\d\d \d\d:\d\d:\d\d`
		requireNear(t, 20*time.Hour, remembers(t, res.stdout, `newcomer\s+0\s+0\s+0\s+0\s+0\s+0`, `-`), time.Minute)
		requireNear(t, 14*24*time.Hour+30*time.Second,
			remembers(t, res.stdout, `payments\s+3\s+0\s+1\s+0\s+1\s+1`, day), 2*time.Minute)
		requireNear(t, 14*24*time.Hour+30*time.Second,
			remembers(t, res.stdout, `wallet-credits\s+5\s+5\s+0\s+0\s+0\s+0`, day), 2*time.Minute)
		require.Contains(t, res.stdout, "1 'processing' row has an expired lease")

		short := cli(t, append([]string{"stats", "--warn-below", "7d"}, common...)...)
		require.Equal(t, 4, short.code, "newcomer remembers 20 hours, less than 7 days")
		warning := regexp.MustCompile(`warning: newcomer remembers (\S+), less than 7d`).FindStringSubmatch(short.stderr)
		require.NotNil(t, warning, short.stderr)
		requireNear(t, 20*time.Hour, parseDays(t, warning[1]), time.Minute)
		require.NotContains(t, short.stderr, "wallet-credits", "a quiet consumer whose oldest row is younger than 7 days still remembers 14")
		require.NotContains(t, short.stderr, "payments")
		require.Equal(t, 0, cli(t, append([]string{"stats", "--warn-below", "12h"}, common...)...).code)

		js := cli(t, append([]string{"stats", "--json"}, common...)...)
		require.Equal(t, 0, js.code, js.stderr)
		var st struct {
			Table           string `json:"table"`
			ConsumerIDs     *int64 `json:"consumer_ids"`
			ConsumerIDsLeft *int64 `json:"consumer_ids_left"`
			Consumers       []struct {
				Consumer       string     `json:"consumer"`
				Rows           int64      `json:"rows"`
				ExpiredLeases  int64      `json:"expired_leases"`
				Oldest         *time.Time `json:"oldest"`
				RemembersSince *time.Time `json:"remembers_since"`
				Remembers      float64    `json:"remembers_seconds"`
			} `json:"consumers"`
		}
		require.NoError(t, json.Unmarshal([]byte(js.stdout), &st))
		require.Equal(t, table, st.Table)
		require.NotNil(t, st.ConsumerIDs)
		require.NotNil(t, st.ConsumerIDsLeft)
		require.EqualValues(t, [2]int64{32767, 32764}, [2]int64{*st.ConsumerIDs, *st.ConsumerIDsLeft})
		require.Len(t, st.Consumers, 3)
		require.Equal(t, "newcomer", st.Consumers[0].Consumer)
		require.Nil(t, st.Consumers[0].Oldest, "no row")
		require.InDelta(t, (20 * time.Hour).Seconds(), st.Consumers[0].Remembers, 60)
		require.Equal(t, "payments", st.Consumers[1].Consumer)
		require.EqualValues(t, 1, st.Consumers[1].ExpiredLeases)
		w := st.Consumers[2]
		require.InDelta(t, (14*24*time.Hour + 30*time.Second).Seconds(), w.Remembers, 60)
		require.NotNil(t, w.Oldest)
		require.NotNil(t, w.RemembersSince)
		require.WithinDuration(t, time.Now().Add(-48*time.Hour), *w.Oldest, 2*time.Minute, "the oldest row is two days old")
		require.WithinDuration(t, time.Now().Add(-14*24*time.Hour), *w.RemembersSince, 2*time.Minute)
	})

	t.Run("ForgetRemovesOneRowAndTellsMissingAndLiveRowsApart", func(t *testing.T) {
		res := cli(t, append([]string{"forget", "--consumer", "payments", "--id", "gave-up"}, common...)...)
		require.Equal(t, 0, res.code, res.stderr)
		require.Regexp(t, `^forgot payments/gave-up: it was failed since [0-9T:Z-]+ after 5 attempts\n$`, res.stdout)
		require.Contains(t, res.stderr, "Inbox row forgotten", "the deletion is logged")

		again := cli(t, append([]string{"forget", "--consumer", "payments", "--id", "gave-up"}, common...)...)
		require.Equal(t, 3, again.code)
		require.Contains(t, again.stderr, `has no row for consumer "payments" and ID "gave-up"`)

		live := cli(t, append([]string{"forget", "--consumer", "payments", "--id", "live"}, common...)...)
		require.Equal(t, 5, live.code)
		require.Contains(t, live.stderr, "under a live lease")
		forced := cli(t, append([]string{"forget", "--consumer", "payments", "--id", "live", "--force"}, common...)...)
		require.Equal(t, 0, forced.code, forced.stderr)

		var left int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM `+table+`_view WHERE consumer = 'payments'`).Scan(&left))
		require.Equal(t, 1, left, "only the abandoned lease is left")
	})
}

func TestCLI_PartitionsAreCreatedByMigrateAndDroppedByCleanup(t *testing.T) {
	t.Parallel()
	db, table := newTable(t)
	common := []string{"--dsn", testDSN(), "--table", table}

	refused := cli(t, append([]string{"migrate", "--partitions", "1h"}, common...)...)
	require.Equal(t, 2, refused.code, "partitions need uuid IDs")
	require.Contains(t, refused.stderr, "--partitions 1h")

	migrated := cli(t, append([]string{"migrate", "--id-type", "uuid", "--partitions", "1h"}, common...)...)
	require.Equal(t, 0, migrated.code, migrated.stderr)
	var parts int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM pg_inherits WHERE inhparent = $1::regclass`, table).Scan(&parts))
	require.GreaterOrEqual(t, parts, 50, "the default partition, the hour before and 48 hours ahead")

	// A partition of ten hours ago, named as the cleanup names its own, as if an earlier round had made it.
	from := time.Now().UTC().Add(-10 * time.Hour).Truncate(time.Hour)
	floor := func(t time.Time) string {
		h := fmt.Sprintf("%012x", t.UnixMilli())
		return h[:8] + "-" + h[8:] + "-7000-8000-000000000000"
	}
	_, err := db.Exec(fmt.Sprintf(`CREATE TABLE %s_p%s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
		table, from.Format("20060102t1504"), table, floor(from), floor(from.Add(time.Hour))))
	require.NoError(t, err)

	cleaned := cli(t, append([]string{"cleanup", "--window", "5h", "--partitions", "1h"}, common...)...)
	require.Equal(t, 0, cleaned.code, cleaned.stderr)
	require.Contains(t, cleaned.stdout, "created 0 partitions, dropped 1 partition\n")
	var left int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM pg_inherits WHERE inhparent = $1::regclass`, table).Scan(&left))
	require.Equal(t, parts, left)
}
