package mysqlinbox_test

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"os"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/go-sql-driver/mysql"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/mysqlinbox"
)

func TestANilHandleIsRefusedWhenTheInboxIsBuilt(t *testing.T) {
	t.Parallel()
	_, err := mysqlinbox.New(nil)
	require.ErrorIs(t, err, inbox.ErrInvalidOption)
	_, err = mysqlinbox.Database(nil).New(inbox.WithConsumer("wallet-credits"))
	require.ErrorIs(t, err, inbox.ErrInvalidOption)
	err = mysqlinbox.Database(nil).Migrate(context.Background())
	require.ErrorIs(t, err, inbox.ErrInvalidOption)
	_, err = mysqlinbox.Database(nil).NewCleaner(inbox.CleanerConfig{})
	require.ErrorIs(t, err, inbox.ErrInvalidOption)
}

// postgresDSN is the PostgreSQL of the tests that give mysqlinbox the wrong database: INBOX_TEST_DATABASE_URL, or
// this machine's default.
func postgresDSN() string {
	if dsn := os.Getenv("INBOX_TEST_DATABASE_URL"); dsn != "" {
		return dsn
	}
	return "postgres://root@127.0.0.1:5432/test?sslmode=disable"
}

// openPostgres opens PostgreSQL through c, and fails the test, loudly, when it is unreachable; under -short it
// skips the test instead.
func openPostgres(t *testing.T, c sqldriver.Connector) *sql.DB {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL; run without -short")
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("PostgreSQL is not reachable at %s (set INBOX_TEST_DATABASE_URL): %v", postgresDSN(), err)
	}
	return db
}

// unknownDriver is a driver under a type the inbox does not know, as a tracing wrapper's would be: the inbox
// cannot tell the server from it, and asks the server before the first message.
type unknownDriver struct{ sqldriver.Driver }

type unknownConnector struct{ c sqldriver.Connector }

func (u unknownConnector) Connect(ctx context.Context) (sqldriver.Conn, error) {
	return u.c.Connect(ctx)
}
func (u unknownConnector) Driver() sqldriver.Driver { return unknownDriver{u.c.Driver()} }

// openMySQLUnknown opens the tests' MariaDB through unknownDriver.
func openMySQLUnknown(t *testing.T) *sql.DB {
	t.Helper()
	openDB(t) // the guard: skips under -short, fails without the database
	cfg, err := mysql.ParseDSN(testDSN())
	require.NoError(t, err)
	c, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	db := sql.OpenDB(unknownConnector{c})
	t.Cleanup(func() { db.Close() })
	return db
}

func TestThePostgreSQLInboxRefusesMariaDB(t *testing.T) {
	t.Parallel()

	t.Run("WhenTheDriverTellsAtConstruction", func(t *testing.T) {
		db := openDB(t)
		_, err := inbox.New(db, inbox.WithConsumer("wallet-credits"))
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
		require.ErrorContains(t, err, "use the mysqlinbox module")

		err = inbox.OnSQL(db).Migrate(context.Background())
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
		require.ErrorContains(t, err, "use the mysqlinbox module")
	})

	t.Run("WhenTheServerTellsAtTheFirstMessage", func(t *testing.T) {
		db := openMySQLUnknown(t)
		ib, err := inbox.New(db, inbox.WithTable(inboxtest.UniqueName("inbox_wrong")), inbox.WithConsumer("wallet-credits"),
			inbox.WithRejectDelay(time.Millisecond))
		require.NoError(t, err, "without a known driver, the server is asked only when the database is used")
		called := false
		_, err = ib.Middleware(func(*message.Message) ([]*message.Message, error) { called = true; return nil, nil })(newMsg("evt-1"))
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
		require.ErrorContains(t, err, "MariaDB")
		require.ErrorContains(t, err, "use the mysqlinbox module")
		require.False(t, called)

		err = inbox.OnSQL(db).Migrate(context.Background())
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
		require.ErrorContains(t, err, "use the mysqlinbox module")
	})
}

func TestTheMySQLInboxRefusesPostgreSQL(t *testing.T) {
	t.Parallel()

	t.Run("WhenTheDriverTellsAtConstruction", func(t *testing.T) {
		c, err := pq.NewConnector(postgresDSN())
		require.NoError(t, err)
		db := openPostgres(t, c)
		_, err = mysqlinbox.New(db, inbox.WithConsumer("wallet-credits"))
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
		require.ErrorContains(t, err, "use inbox.New, inbox.On or the pgxinbox module")

		err = mysqlinbox.Database(db).Migrate(context.Background())
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
	})

	t.Run("WhenTheServerTellsAtMigrate", func(t *testing.T) {
		c, err := pq.NewConnector(postgresDSN())
		require.NoError(t, err)
		db := openPostgres(t, unknownConnector{c})
		err = mysqlinbox.Database(db).Migrate(context.Background(), inbox.WithTable(inboxtest.UniqueName("inbox_wrong")))
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
		require.ErrorContains(t, err, "this database is PostgreSQL")
		require.ErrorContains(t, err, "use inbox.New, inbox.On or the pgxinbox module")
	})
}
