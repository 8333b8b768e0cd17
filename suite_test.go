package inbox_test

import (
	"testing"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/inboxtest"
)

// TestSuite_LibPQ runs the behaviour suite over database/sql with lib/pq. The pgxinbox module runs it with pgx's
// database/sql driver and with pgx natively, and the mysqlinbox module on MariaDB.
func TestSuite_LibPQ(t *testing.T) {
	t.Parallel()
	inboxtest.Run(t, inboxtest.HarnessFunc(func(t testing.TB) inboxtest.Conn {
		db := openDB(t)
		return inboxtest.StdSQL(db, inbox.On(driver.StdSQL(db)), inboxtest.PostgreSQL)
	}))
}
