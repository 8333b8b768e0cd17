package mysqlinbox_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/mysqlinbox"
)

// mariaDB is how the behaviour suite speaks to MariaDB and MySQL: ? placeholders, and times in UTC, as the
// dialect writes processed_at and locked_until.
var mariaDB = inboxtest.Dialect{
	Name:  "MariaDB",
	Param: func(int) string { return "?" },
	Ago: func(d time.Duration) string {
		return fmt.Sprintf("(UTC_TIMESTAMP(6) - INTERVAL %d MICROSECOND)", d.Microseconds())
	},
	ProcessedAgo: func(d time.Duration) string {
		return fmt.Sprintf("(UTC_TIMESTAMP(6) - INTERVAL %d MICROSECOND)", d.Microseconds())
	},
	View:         func(table string) string { return table },
	ViewsEveryTx: true,
	// MariaDB's SET STATEMENT sets the wait for the one statement, leaving the session's as it was.
	BriefLockWait: func(stmt string) []string {
		return []string{"SET STATEMENT innodb_lock_wait_timeout = 1 FOR " + stmt}
	},
	Row: func(string) string { return "consumer = ? AND message_id = ?" },
	DropInbox: func(table string) []string {
		return []string{"DROP TABLE IF EXISTS `" + table + "_produced`, `" + table + "`, `" + table + "_locks`, `" + table + "_migrations`"}
	},
	// The rows carry consumer names, so no migration numbers consumers: the newest, 001, drops the tables, and
	// applying it again makes them anew, empty.
	RollBackNewest: func(table string) ([]string, error) {
		ms, err := mysqlinbox.Dialect().Schema().Migrations(table, "")
		if err != nil {
			return nil, err
		}
		newest := ms[len(ms)-1]
		var stmts []string
		for _, s := range strings.Split(newest.Down, ";\n") {
			if s = strings.TrimSpace(s); s != "" {
				stmts = append(stmts, s)
			}
		}
		return append(stmts, fmt.Sprintf("DELETE FROM `%s_migrations` WHERE version = %d", table, newest.Version)), nil
	},
}

// TestSuite_MariaDB runs the behaviour suite every driver runs against MariaDB through go-sql-driver/mysql.
func TestSuite_MariaDB(t *testing.T) {
	t.Parallel()
	inboxtest.Run(t, inboxtest.HarnessFunc(func(t testing.TB) inboxtest.Conn {
		db := openDB(t)
		return inboxtest.StdSQL(db, mysqlinbox.Database(db), mariaDB)
	}))
}
