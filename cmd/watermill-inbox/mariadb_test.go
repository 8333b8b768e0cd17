package main_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/effectively-once/watermill-inbox/inboxtest"
)

// mariaDB returns the MariaDB of the tests, in go-sql-driver's form and as a mysql:// URL, a connection, and a
// table name that no other test uses, whose tables are dropped when the test ends. It fails loudly without
// MariaDB, and skips the test under -short.
func mariaDB(t *testing.T) (dsn, asURL string, db *sql.DB, table string) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs MariaDB or MySQL; run without -short")
	}
	dsn = os.Getenv("MYSQL_TEST_DSN")
	if dsn == "" {
		dsn = inboxtest.DefaultMySQLDSN
	}
	db, err := sql.Open("mysql", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("MariaDB is not reachable at %s (set MYSQL_TEST_DSN): %v", dsn, err)
	}
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	u := url.URL{Scheme: "mysql", User: url.UserPassword(cfg.User, cfg.Passwd), Host: cfg.Addr, Path: "/" + cfg.DBName}
	if cfg.Passwd == "" {
		u.User = url.User(cfg.User)
	}
	table = fmt.Sprintf("inbox_test_cli_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	t.Cleanup(func() {
		_, _ = db.Exec("DROP TABLE IF EXISTS `" + table + "_produced`, `" + table + "`, `" + table + "_locks`, `" +
			table + "_migrations`")
	})
	return dsn, u.String(), db, table
}

func TestCLI_OnMariaDBEveryCommandWorksGivenEitherFormOfDSN(t *testing.T) {
	t.Parallel()
	dsn, asURL, db, table := mariaDB(t)

	res := cli(t, "migrate", "--dsn", dsn, "--table", table)
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `^`+table+` is at schema version \d+ \(\w+\)\n$`, res.stdout)
	require.Equal(t, 0, cli(t, "migrate", "--dsn", asURL, "--table", table).code, "the same database as a mysql:// URL")

	// wallet-credits: 250 rows of 20 days ago, which the cleanup deletes, and 5 of two days ago; payments: one
	// message dead-lettered in lease mode yesterday.
	_, err := db.Exec("INSERT INTO `" + table + "` (consumer, message_id, state, processed_at) " +
		"SELECT 'wallet-credits', CONCAT('old-', seq), 'done', UTC_TIMESTAMP(6) - INTERVAL 20 DAY - INTERVAL seq SECOND " +
		"FROM seq_1_to_250")
	require.NoError(t, err, "MariaDB's sequence engine makes the rows")
	_, err = db.Exec("INSERT INTO `" + table + "` (consumer, message_id, state, processed_at) " +
		"SELECT 'wallet-credits', CONCAT('evt-', seq), 'done', UTC_TIMESTAMP(6) - INTERVAL 2 DAY FROM seq_1_to_5")
	require.NoError(t, err)
	_, err = db.Exec("INSERT INTO `" + table + "` (consumer, message_id, state, attempts, processed_at) " +
		"VALUES ('payments', 'gave-up', 'failed', 5, UTC_TIMESTAMP(6) - INTERVAL 1 DAY)")
	require.NoError(t, err)

	res = cli(t, "cleanup", "--dsn", asURL, "--table", table, "--window", "14d", "--batch", "100")
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `^deleted 250 rows of `+table+` older than 14d \(before [0-9T:Z-]+\) in \d+ batches, `, res.stdout)

	res = cli(t, "stats", "--dsn", dsn, "--table", table)
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `^table `+table+`: 6 rows; heap `, res.stdout)
	require.NotContains(t, res.stdout, "consumer ids:", "MariaDB's rows carry their consumer's name: no id to run out of")
	require.Regexp(t, regexp.MustCompile(`(?m)^\s*payments\s+1\s+0\s+1\s`), res.stdout)
	require.Regexp(t, regexp.MustCompile(`(?m)^\s*wallet-credits\s+5\s+5\s+0\s`), res.stdout)

	res = cli(t, "forget", "--dsn", asURL, "--table", table, "--consumer", "payments", "--id", "gave-up")
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `^forgot payments/gave-up: it was failed since [0-9T:Z-]+ after 5 attempts\n$`, res.stdout)
	require.Equal(t, 3, cli(t, "forget", "--dsn", dsn, "--table", table, "--consumer", "payments", "--id", "gave-up").code)
}

func TestCLI_ADSNOfNeitherFormIsAUsageErrorThatNamesTheFormsAndNoSecret(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{"sqlserver://sa:s3cret@db:1433/app", "s3cret-but-no-form"} {
		res := cli(t, "stats", "--dsn", dsn)
		require.Equal(t, 2, res.code, res.stderr)
		require.Contains(t, res.stderr, "mysql:// URL")
		require.Contains(t, res.stderr, "postgres://")
		require.NotContains(t, res.stderr, "s3cret")
	}
}
