package inbox_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

func TestMigrate(t *testing.T) {
	t.Parallel()

	t.Run("ManyInstancesStartingAtOnceApplyEachVersionOnce", func(t *testing.T) {
		t.Parallel()
		db := openDB(t)
		table := testkit.UniqueName("inbox_test")
		t.Cleanup(func() {
			_, _ = db.Exec(`DROP TABLE IF EXISTS ` + table + `, ` + table + `_produced, ` + table + `_locks, ` +
				table + `_migrations, ` + table + `_consumers CASCADE`)
			_, _ = db.Exec(`DROP FUNCTION IF EXISTS ` + table + `_unfinished_claim()`)
		})
		const instances = 8
		errs := make(chan error, instances)
		var wg sync.WaitGroup
		for range instances {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- inbox.OnSQL(db).Migrate(context.Background(), inbox.WithTable(table))
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		ms, err := inbox.OnSQL(nil).Migrations(inbox.WithTable(table))
		require.NoError(t, err)
		var applied int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM `+table+`_migrations`).Scan(&applied))
		require.Equal(t, len(ms), applied)
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM `+table).Scan(&n), "the inbox table exists")
	})

	t.Run("TheInboxTableKeepsEightColumnsSoItsNullBitmapFitsTheTupleHeader", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		var columns int
		require.NoError(t, b.db.QueryRow(`SELECT count(*) FROM pg_attribute
			WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, b.Table).Scan(&columns))
		require.Equal(t, 8, columns, "a ninth column adds 8 bytes to every row: see migrations/001_inbox.up.sql")
	})

	// The produced table has no foreign key since the compact layout (migrations/007_compact.up.sql says why): the
	// cleanup and Forget delete a row's produced messages with it.
	t.Run("ProducedMessagesGoWithTheirInboxRowWhenForgetOrTheCleanupDeletesIt", func(t *testing.T) {
		t.Parallel()
		ib, b := setup(t)
		h := ib.Middleware(func(*message.Message) ([]*message.Message, error) {
			return []*message.Message{message.NewMessage("out-1", nil)}, nil
		})
		for _, id := range []string{"evt-1", "evt-2", "evt-3"} {
			_, err := h(newMsg(id))
			require.NoError(t, err)
		}
		produced := func() (ids []string) {
			rows, err := b.db.Query(`SELECT message_id FROM ` + b.Table + `_produced ORDER BY message_id`)
			require.NoError(t, err)
			defer rows.Close()
			for rows.Next() {
				var id string
				require.NoError(t, rows.Scan(&id))
				ids = append(ids, id)
			}
			require.NoError(t, rows.Err())
			return ids
		}
		require.Equal(t, []string{"evt-1", "evt-2", "evt-3"}, produced())

		row, err := inbox.OnSQL(b.db).Forget(context.Background(), inbox.ForgetParams{Consumer: "wallet-credits", ID: "evt-1"}, inbox.WithTable(b.Table))
		require.NoError(t, err)
		require.True(t, row.HadProduced)
		require.Equal(t, []string{"evt-2", "evt-3"}, produced())

		_, err = b.db.Exec(`UPDATE `+b.Table+` SET processed_at = processed_at - 60*24*30
			WHERE message_id = 'evt-2' AND consumer_id = (SELECT id FROM `+b.Table+`_consumers WHERE name = $1)`, "wallet-credits")
		require.NoError(t, err)
		res, err := inbox.OnSQL(b.db).Cleanup(context.Background(), inbox.CleanupParams{}, inbox.WithTable(b.Table))
		require.NoError(t, err)
		require.EqualValues(t, 1, res.Deleted)
		require.Equal(t, []string{"evt-3"}, produced(), "the row the cleanup kept keeps its produced messages")
	})

	t.Run("RunningAgainChangesNothing", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		require.NoError(t, inbox.OnSQL(b.db).Migrate(context.Background(), inbox.WithTable(b.Table)))
		require.NoError(t, inbox.OnSQL(b.db).Migrate(context.Background(), inbox.WithTable(b.Table)))
	})

	t.Run("RejectsAnInvalidTableNameBeforeAnySQL", func(t *testing.T) {
		t.Parallel()
		db := openDB(t)
		for _, name := range []string{`x"; DROP TABLE accounts; --`, "Inbox", "1inbox", "inbox-table", "", "public.inbox"} {
			err := inbox.OnSQL(db).Migrate(context.Background(), inbox.WithTable(name))
			require.ErrorIs(t, err, inbox.ErrInvalidOption, name)
		}
	})

	t.Run("DownRevertsUp", func(t *testing.T) {
		t.Parallel()
		db := openDB(t)
		table := testkit.UniqueName("inbox_test")
		ms, err := inbox.OnSQL(nil).Migrations(inbox.WithTable(table))
		require.NoError(t, err)
		for _, m := range ms {
			_, err := db.Exec(m.Up)
			require.NoError(t, err)
		}
		for i := len(ms) - 1; i >= 0; i-- {
			_, err := db.Exec(ms[i].Down)
			require.NoError(t, err)
		}
		var exists bool
		require.NoError(t, db.QueryRow(`SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists))
		require.False(t, exists)
	})
}

func TestMigrations_AreTheShippedFilesForTheConfiguredTable(t *testing.T) {
	t.Parallel()
	ms, err := inbox.OnSQL(nil).Migrations()
	require.NoError(t, err)
	require.NotEmpty(t, ms)
	for i, m := range ms {
		require.Equal(t, i+1, m.Version, "versions are consecutive from 1")
		file, err := os.ReadFile(fmt.Sprintf("dialect/postgres/migrations/%03d_%s.up.sql", m.Version, m.Name))
		require.NoError(t, err)
		require.Equal(t, string(file), m.Up, "the default table's migration is the file users apply themselves")
	}
	for variant, opts := range map[string][]inbox.MaintenanceOption{
		"uuid":        {inbox.WithIDType(inbox.IDTypeUUID)},
		"partitioned": {inbox.WithIDType(inbox.IDTypeUUID), inbox.WithPartitions(24 * time.Hour)},
	} {
		vs, err := inbox.OnSQL(nil).Migrations(opts...)
		require.NoError(t, err)
		file, err := os.ReadFile("dialect/postgres/migrations/" + variant + "/001_inbox.up.sql")
		require.NoError(t, err)
		require.Equal(t, string(file), vs[0].Up, "a variant's first migration is its own file")
		require.Equal(t, ms[0].Down, vs[0].Down, "and is undone as the plain one is")
		require.Equal(t, ms[1:], vs[1:], "the variant changes the first migration only")
	}

	custom, err := inbox.OnSQL(nil).Migrations(inbox.WithTable("billing_inbox"))
	require.NoError(t, err)
	for _, m := range custom {
		require.NotContains(t, m.Up, inbox.DefaultTable)
		require.NotContains(t, m.Down, inbox.DefaultTable)
	}
	require.Contains(t, custom[0].Up, `CREATE TABLE IF NOT EXISTS "billing_inbox"`)
}
