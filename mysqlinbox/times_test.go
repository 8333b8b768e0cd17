package mysqlinbox_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/mysqlinbox"
)

// openWithoutParseTime opens the tests' database with parseTime off, go-sql-driver/mysql's default, under which
// the driver returns DATETIME values as text.
func openWithoutParseTime(t *testing.T) *sql.DB {
	t.Helper()
	openDB(t) // the guard: skips under -short, fails without the database
	cfg, err := mysql.ParseDSN(testDSN())
	require.NoError(t, err)
	cfg.ParseTime = false
	c, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	db := sql.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	return db
}

func TestEveryOperationWorksWithoutParseTime(t *testing.T) {
	t.Parallel()
	b := newBundle(t) // its db parses times: the reference
	ctx := context.Background()
	db := openWithoutParseTime(t)
	ib, err := mysqlinbox.New(db, b.Options()...)
	require.NoError(t, err)
	h := ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	for _, id := range []string{"evt-old", "evt-new"} {
		_, err = h(newMsg(id))
		require.NoError(t, err)
	}
	_, err = b.db.Exec(`UPDATE ` + b.Table + ` SET processed_at = processed_at - INTERVAL 30 DAY WHERE message_id = 'evt-old'`)
	require.NoError(t, err)
	without, with := mysqlinbox.Database(db), mysqlinbox.Database(b.db)

	t.Run("ReadStats", func(t *testing.T) {
		got, err := without.ReadStats(ctx, inbox.WithTable(b.Table))
		require.NoError(t, err)
		want, err := with.ReadStats(ctx, inbox.WithTable(b.Table))
		require.NoError(t, err)
		require.Len(t, got.Consumers, 1)
		require.True(t, want.Consumers[0].Oldest.Equal(got.Consumers[0].Oldest), "%s, read as %s", want.Consumers[0].Oldest, got.Consumers[0].Oldest)
		require.WithinDuration(t, want.Now, got.Now, 5*time.Second)
		require.Greater(t, got.Consumers[0].Age, 29*24*time.Hour)
	})
	t.Run("Remembers", func(t *testing.T) {
		got, err := without.Remembers(ctx, inbox.WithTable(b.Table))
		require.NoError(t, err)
		want, err := with.Remembers(ctx, inbox.WithTable(b.Table))
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.True(t, want[0].Oldest.Equal(got[0].Oldest), "%s, read as %s", want[0].Oldest, got[0].Oldest)
	})
	t.Run("Forget", func(t *testing.T) {
		_, err := h(newMsg("evt-forget"))
		require.NoError(t, err)
		row, err := without.Forget(ctx, inbox.ForgetParams{Consumer: "wallet-credits", ID: "evt-forget"}, inbox.WithTable(b.Table))
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), row.ProcessedAt, time.Minute)
	})
	t.Run("Cleanup", func(t *testing.T) {
		res, err := without.Cleanup(ctx, inbox.CleanupParams{Retention: 14 * 24 * time.Hour}, inbox.WithTable(b.Table))
		require.NoError(t, err)
		require.EqualValues(t, 1, res.Deleted, "evt-old, and only it")
		require.Equal(t, 1, b.Rows(t, "wallet-credits"))
	})
}

// A connection string's loc other than UTC makes go-sql-driver/mysql read a DATETIME as that zone's wall clock and
// write a time.Time converted to it. The inbox's times are UTC whatever the loc: a row is kept for its whole
// retention, and the ages read are true.
func TestEveryOperationKeepsUTCUnderAnotherLoc(t *testing.T) {
	t.Parallel()
	b := newBundle(t) // its db has the default loc, UTC: the reference
	ctx := context.Background()
	openDB(t)
	cfg, err := mysql.ParseDSN(testDSN())
	require.NoError(t, err)
	cfg.ParseTime = true
	cfg.Loc = time.FixedZone("UTC+14", 14*3600)
	c, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	db := sql.OpenDB(c)
	t.Cleanup(func() { db.Close() })

	ib, err := mysqlinbox.New(db, b.Options()...)
	require.NoError(t, err)
	h := ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	for _, id := range []string{"evt-expired", "evt-kept", "evt-forget"} {
		_, err = h(newMsg(id))
		require.NoError(t, err)
	}
	// 14 days is the retention: one row is 6 hours past it, one 6 hours short of it.
	_, err = b.db.Exec(`UPDATE `+b.Table+` SET processed_at = processed_at - INTERVAL ? HOUR WHERE message_id = 'evt-expired'`, 14*24+6)
	require.NoError(t, err)
	_, err = b.db.Exec(`UPDATE `+b.Table+` SET processed_at = processed_at - INTERVAL ? HOUR WHERE message_id = 'evt-kept'`, 14*24-6)
	require.NoError(t, err)
	zoned := mysqlinbox.Database(db)

	mem, err := zoned.Remembers(ctx, inbox.WithTable(b.Table))
	require.NoError(t, err)
	require.Len(t, mem, 1)
	require.InDelta(t, (14*24 + 6), mem[0].Age.Hours(), 0.1, "the oldest row's age, in hours")
	row, err := zoned.Forget(ctx, inbox.ForgetParams{Consumer: "wallet-credits", ID: "evt-forget"}, inbox.WithTable(b.Table))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), row.ProcessedAt, time.Minute)
	res, err := zoned.Cleanup(ctx, inbox.CleanupParams{Retention: 14 * 24 * time.Hour}, inbox.WithTable(b.Table))
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Deleted, "evt-expired, and only it")
	require.Equal(t, 1, b.Rows(t, "wallet-credits"), "evt-kept stays for its whole retention")
}
