package inbox_test

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/lib/pq"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

func TestANilHandleIsRefusedWhenTheInboxIsBuilt(t *testing.T) {
	t.Parallel()
	db := inbox.On(driver.StdSQL(nil))

	t.Run("New", func(t *testing.T) {
		_, err := db.New(inbox.WithConsumer("wallet-credits"))
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
		require.ErrorContains(t, err, "*sql.DB is nil")
	})
	t.Run("Migrate", func(t *testing.T) {
		err := db.Migrate(context.Background())
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
	})
	t.Run("NewCleaner", func(t *testing.T) {
		_, err := db.NewCleaner(inbox.CleanerConfig{})
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
	})
	t.Run("OtherOperationsReturnAnErrorInsteadOfPanicking", func(t *testing.T) {
		_, err := db.ReadStats(context.Background())
		require.Error(t, err)
	})
}

// unknownDriver is lib/pq's driver under a type the inbox does not know, as a tracing wrapper would be: the inbox
// cannot tell the server from it and asks the server.
type unknownDriver struct{ sqldriver.Driver }

func openUnknownDriver(t *testing.T) *sql.DB {
	t.Helper()
	testkit.SkipWhenShort(t, "PostgreSQL")
	c, err := pq.NewConnector(testDSN())
	require.NoError(t, err)
	db := sql.OpenDB(unknownConnector{c})
	t.Cleanup(func() { db.Close() })
	return db
}

type unknownConnector struct{ c sqldriver.Connector }

func (u unknownConnector) Connect(ctx context.Context) (sqldriver.Conn, error) {
	return u.c.Connect(ctx)
}
func (u unknownConnector) Driver() sqldriver.Driver { return unknownDriver{u.c.Driver()} }

func TestAnUnknownDriverOverPostgreSQLPassesTheCheckOfTheServer(t *testing.T) {
	t.Parallel()
	db := openUnknownDriver(t)
	table := testkit.UniqueName("inbox_unknown_driver")
	pg := openDB(t)
	t.Cleanup(func() { dropInboxTables(pg, table) })
	ib, err := inbox.New(db, inbox.WithTable(table), inbox.WithConsumer("wallet-credits"))
	require.NoError(t, err)
	var calls atomic.Int64
	h := ib.Middleware(func(*message.Message) ([]*message.Message, error) { calls.Add(1); return nil, nil })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg := newMsg("evt-1")
	msg.SetContext(ctx)
	_, err = h(msg)
	require.NoError(t, err)
	require.EqualValues(t, 1, calls.Load())
}

func TestAnUnknownDriverOverADatabaseThatIsDownIsBuiltAndHoldsTheFirstMessageBack(t *testing.T) {
	t.Parallel()
	c, err := pq.NewConnector("postgres://root@127.0.0.1:1/test?sslmode=disable&connect_timeout=1")
	require.NoError(t, err)
	db := sql.OpenDB(unknownConnector{c})
	t.Cleanup(func() { db.Close() })
	ib, err := inbox.New(db, inbox.WithConsumer("wallet-credits"), inbox.WithRejectDelay(50*time.Millisecond))
	require.NoError(t, err, "which database this is can wait for the database")

	start := time.Now()
	_, err = ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })(newMsg("evt-1"))
	require.ErrorContains(t, err, "check which database this is")
	require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond, "held back for the reject delay")
}
