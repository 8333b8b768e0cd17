package inbox_test

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// freshTable returns an inbox table name that nothing has created yet, and drops whatever the test creates under
// it when the test ends.
func freshTable(t *testing.T, db *sql.DB) string {
	t.Helper()
	table := testkit.UniqueName("inbox_fresh")
	t.Cleanup(func() {
		_, _ = db.Exec(`DROP TABLE IF EXISTS ` + table + `_produced, ` + table + `, ` + table + `_migrations, ` + table + `_locks, ` +
			table + `_consumers CASCADE`)
		_, _ = db.Exec(`DROP FUNCTION IF EXISTS ` + table + `_unfinished_claim()`)
	})
	return table
}

// createByHand applies the shipped migrations for table the way a user's own migration tool would, after edit has
// had its say on each file's SQL.
func createByHand(t *testing.T, db *sql.DB, table string, edit func(version int, up string) string) {
	t.Helper()
	ms, err := inbox.OnSQL(nil).Migrations(inbox.WithTable(table))
	require.NoError(t, err)
	for _, m := range ms {
		_, err := db.Exec(edit(m.Version, m.Up))
		require.NoError(t, err, "migration %d", m.Version)
	}
}

// createOldLayout creates table in the layout of versions 1 to 6, as a user's own tool applied them before the
// compact layout, with one row of consumer c: evt-old, done.
func createOldLayout(t *testing.T, db *sql.DB, table string) {
	t.Helper()
	applyPreviousLayout(t, db.Exec, inbox.WithTable(table))
	_, err := db.Exec(`INSERT INTO ` + table + ` (consumer, message_id) VALUES ('c', 'evt-old')`)
	require.NoError(t, err)
}

// varchar64 turns both message_id columns of the first migration into varchar(64).
func varchar64(version int, up string) string {
	if version != 1 {
		return up
	}
	return strings.ReplaceAll(up, "message_id   text        NOT NULL,", "message_id   varchar(64) NOT NULL,")
}

func noop(*message.Message) ([]*message.Message, error) { return nil, nil }

func TestMiddleware_Schema(t *testing.T) {
	t.Parallel()

	t.Run("TheOneLineWorksOnAFreshDatabase", func(t *testing.T) {
		t.Parallel()
		db := openDB(t)
		table := freshTable(t, db)
		logs := &recordingLogger{}
		var calls atomic.Int64
		h := inbox.Middleware(db, inbox.WithTable(table), inbox.WithConsumer("wallet-credits"), inbox.WithLogger(logs))(
			func(msg *message.Message) ([]*message.Message, error) {
				calls.Add(1)
				_, ok := inbox.TxFromContext(msg.Context())
				require.True(t, ok)
				return nil, nil
			})
		for range 2 {
			_, err := h(newMsg("evt-1"))
			require.NoError(t, err)
		}
		require.EqualValues(t, 1, calls.Load(), "the table was created, and the copy found the first one's row")
		require.NoError(t, inbox.OnSQL(db).Migrate(context.Background(), inbox.WithTable(table)), "and it is the table Migrate makes")
		require.Len(t, logs.Find("migrated its schema"), 1)
	})

	t.Run("InstancesStartingTogetherOnAFreshDatabaseCreateTheTableOnce", func(t *testing.T) {
		t.Parallel()
		db := openDB(t)
		table := freshTable(t, db)
		const instances = 6
		errs := make(chan error, instances)
		var wg sync.WaitGroup
		for n := range instances {
			ib, err := inbox.New(db, inbox.WithTable(table), inbox.WithConsumer("wallet-credits"))
			require.NoError(t, err)
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := ib.Middleware(noop)(newMsg("evt-" + string(rune('a'+n))))
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		var rows, versions int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM `+table).Scan(&rows))
		require.Equal(t, instances, rows)
		ms, err := inbox.OnSQL(nil).Migrations()
		require.NoError(t, err)
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM `+table+`_migrations`).Scan(&versions))
		require.Equal(t, len(ms), versions, "each version applied once")
	})

	t.Run("WithoutAutoMigrateAMissingTableIsNackedAfterTheRejectDelayNeverDeadLettered", func(t *testing.T) {
		t.Parallel()
		db := openDB(t)
		table := freshTable(t, db)
		dlq := &testkit.RecordingPublisher{}
		const delay = 100 * time.Millisecond
		ib, err := inbox.New(db, inbox.WithTable(table), inbox.WithConsumer("c"), inbox.WithAutoMigrate(false),
			inbox.WithDeadLetter(dlq, "dlq"), inbox.WithRejectDelay(delay))
		require.NoError(t, err)
		var calls atomic.Int64
		h := ib.Middleware(func(*message.Message) ([]*message.Message, error) { calls.Add(1); return nil, nil })
		for range 2 {
			start := time.Now()
			_, err = h(newMsg("evt-1"))
			require.ErrorIs(t, err, inbox.ErrSchemaMissing)
			require.GreaterOrEqual(t, time.Since(start), delay, "each redelivery waits: no hot loop")
		}
		require.Zero(t, calls.Load())
		require.Empty(t, dlq.Messages("dlq"), "the message is fine; the configuration is not")
		var exists bool
		require.NoError(t, db.QueryRow(`SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists))
		require.False(t, exists, "nothing was created")
	})

	t.Run("ATableDroppedWhileRunningIsCheckedAgainNotRetriedInAHotLoop", func(t *testing.T) {
		t.Parallel()
		const delay = 100 * time.Millisecond
		ib, b := setup(t, inbox.WithAutoMigrate(false), inbox.WithRejectDelay(delay))
		h := ib.Middleware(noop)
		_, err := h(newMsg("evt-1"))
		require.NoError(t, err)

		_, err = b.db.Exec(`DROP TABLE ` + b.Table + `_produced, ` + b.Table + ` CASCADE`) // with its view
		require.NoError(t, err)
		// The first delivery's claim finds the table gone; it and every redelivery after it (the inbox checks
		// again) wait the delay: no hot loop.
		for range 3 {
			start := time.Now()
			_, err = h(newMsg("evt-2"))
			require.ErrorIs(t, err, inbox.ErrSchemaMissing)
			require.GreaterOrEqual(t, time.Since(start), delay, "a delivery waits: no hot loop")
		}
	})

	t.Run("ATableDroppedUnderLeaseModeIsNotRetriedInAHotLoop", func(t *testing.T) {
		t.Parallel()
		const delay = 100 * time.Millisecond
		ib, b := setup(t, inbox.WithAutoMigrate(false), inbox.WithRejectDelay(delay), inbox.WithLease(time.Minute))
		h := ib.Middleware(noop)
		_, err := h(newMsg("evt-1"))
		require.NoError(t, err)
		_, err = b.db.Exec(`DROP TABLE ` + b.Table + `_produced, ` + b.Table + ` CASCADE`) // with its view
		require.NoError(t, err)
		for range 2 {
			start := time.Now()
			_, err = h(newMsg("evt-2"))
			require.ErrorIs(t, err, inbox.ErrSchemaMissing)
			require.GreaterOrEqual(t, time.Since(start), delay, "a delivery waits: no hot loop")
		}
	})

	t.Run("WithoutAutoMigrateATableOfTheOldLayoutIsReportedAsOutdatedAndLeftAsItIs", func(t *testing.T) {
		t.Parallel()
		db := openDB(t)
		table := freshTable(t, db)
		createOldLayout(t, db, table)
		dlq := &testkit.RecordingPublisher{}
		const delay = 50 * time.Millisecond
		ib, err := inbox.New(db, inbox.WithTable(table), inbox.WithConsumer("c"), inbox.WithAutoMigrate(false),
			inbox.WithDeadLetter(dlq, "dlq"), inbox.WithRejectDelay(delay))
		require.NoError(t, err)
		var calls atomic.Int64
		h := ib.Middleware(func(*message.Message) ([]*message.Message, error) { calls.Add(1); return nil, nil })
		for range 2 {
			start := time.Now()
			_, err = h(newMsg("evt-new"))
			require.ErrorIs(t, err, inbox.ErrSchemaDrift)
			require.ErrorContains(t, err, "table "+table+" has the layout of an older version of the inbox: run inbox.Migrate")
			require.GreaterOrEqual(t, time.Since(start), delay, "a redelivery waits: no hot loop")
		}
		require.Zero(t, calls.Load())
		require.Empty(t, dlq.Messages("dlq"), "the message is fine; the table is not")
		var rows int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM `+table+` WHERE consumer = 'c'`).Scan(&rows))
		require.Equal(t, 1, rows, "the table keeps its old layout and its row")
	})

	t.Run("WithAutoMigrateTheFirstMessageMovesATableOfTheOldLayoutAndItsRows", func(t *testing.T) {
		t.Parallel()
		db := openDB(t)
		table := freshTable(t, db)
		createOldLayout(t, db, table)
		var calls atomic.Int64
		h := inbox.Middleware(db, inbox.WithTable(table), inbox.WithConsumer("c"))(
			func(*message.Message) ([]*message.Message, error) { calls.Add(1); return nil, nil })
		_, err := h(newMsg("evt-new"))
		require.NoError(t, err)
		_, err = h(newMsg("evt-old"))
		require.NoError(t, err)
		require.EqualValues(t, 1, calls.Load(), "the new message was applied; the old one is still a duplicate")

		var states []string
		rows, err := db.Query(`SELECT message_id || ' ' || state FROM ` + table + `_view WHERE consumer = 'c' ORDER BY message_id`)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			states = append(states, s)
		}
		require.NoError(t, rows.Err())
		require.Equal(t, []string{"evt-new done", "evt-old done"}, states)
		require.NoError(t, inbox.OnSQL(db).Migrate(context.Background(), inbox.WithTable(table)), "and it is the table Migrate makes")
	})

	t.Run("ATableItsUsersOwnToolMigratedToTheCompactLayoutIsUsedAsItIs", func(t *testing.T) {
		t.Parallel()
		db := openDB(t)
		table := freshTable(t, db)
		createByHand(t, db, table, func(_ int, up string) string { return up })
		require.NoError(t, inbox.OnSQL(db).Migrate(context.Background(), inbox.WithTable(table)),
			"no versions are recorded, and the migrations before the compact layout do not fit it")
		_, err := inbox.Middleware(db, inbox.WithTable(table), inbox.WithConsumer("c"))(noop)(newMsg("evt-1"))
		require.NoError(t, err)
	})

	t.Run("ATableAppliedByHandThatLacksAnObjectIsReportedByName", func(t *testing.T) {
		t.Parallel()
		db := openDB(t)
		table := freshTable(t, db)
		createByHand(t, db, table, func(version int, up string) string {
			if version == 6 {
				return "SELECT 1" // as if this version's file had been left out: the locks table is missing
			}
			return up
		})
		err := inbox.OnSQL(db).Migrate(context.Background(), inbox.WithTable(table))
		require.ErrorIs(t, err, inbox.ErrSchemaDrift)
		require.ErrorContains(t, err, "table "+table+"_locks does not exist")
	})

	t.Run("RefusesADriftedTableAndSaysWhatDiffers", func(t *testing.T) {
		t.Parallel()
		db := openDB(t)
		table := freshTable(t, db)
		createByHand(t, db, table, varchar64)
		dlq := &testkit.RecordingPublisher{}
		const delay = 50 * time.Millisecond
		ib, err := inbox.New(db, inbox.WithTable(table), inbox.WithConsumer("c"), inbox.WithDeadLetter(dlq, "dlq"), inbox.WithRejectDelay(delay))
		require.NoError(t, err)
		var calls atomic.Int64
		h := ib.Middleware(func(*message.Message) ([]*message.Message, error) { calls.Add(1); return nil, nil })
		id := strings.Repeat("e", 100) // a valid ID the drifted column cannot hold
		for range 2 {
			start := time.Now()
			_, err = h(newMsg(id))
			require.ErrorIs(t, err, inbox.ErrSchemaDrift)
			require.ErrorContains(t, err, "message_id is character varying(64)")
			require.GreaterOrEqual(t, time.Since(start), delay, "a redelivery waits: no hot loop")
		}
		require.Zero(t, calls.Load())
		require.Empty(t, dlq.Messages("dlq"), "the message is fine; the table is not")
	})
}

func TestMigrate_VerifiesTheSchemaItLeavesBehind(t *testing.T) {
	t.Parallel()

	t.Run("ReportsAnInboxTableDroppedWhileItsVersionsRemain", func(t *testing.T) {
		t.Parallel()
		db := openDB(t)
		table := freshTable(t, db)
		require.NoError(t, inbox.OnSQL(db).Migrate(context.Background(), inbox.WithTable(table)))
		_, err := db.Exec(`DROP TABLE ` + table + `_produced, ` + table + ` CASCADE`) // with its view
		require.NoError(t, err)
		err = inbox.OnSQL(db).Migrate(context.Background(), inbox.WithTable(table))
		require.ErrorIs(t, err, inbox.ErrSchemaDrift)
		require.ErrorContains(t, err, "table "+table+" does not exist")
	})

	t.Run("ReportsAnExistingTableOfAnotherShapeAndRecordsNothing", func(t *testing.T) {
		t.Parallel()
		db := openDB(t)
		table := freshTable(t, db)
		_, err := db.Exec(`CREATE TABLE ` + table + ` (processed_at timestamptz NOT NULL DEFAULT now(),
			consumer text NOT NULL, message_id varchar(64) NOT NULL, state text NOT NULL DEFAULT 'done',
			PRIMARY KEY (consumer, message_id))`)
		require.NoError(t, err)
		err = inbox.OnSQL(db).Migrate(context.Background(), inbox.WithTable(table))
		require.ErrorIs(t, err, inbox.ErrSchemaDrift)
		require.ErrorContains(t, err, "column message_id is character varying(64), want text or uuid")
		var recorded bool
		require.NoError(t, db.QueryRow(`SELECT to_regclass($1) IS NOT NULL`, table+"_migrations").Scan(&recorded))
		require.False(t, recorded, "the migration rolled back whole")
	})

	t.Run("ReportsAMissingIndexADisabledTriggerAndAWrongPrimaryKey", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		for _, stmt := range []string{
			`DROP INDEX ` + b.Table + `_processing`,
			`ALTER TABLE ` + b.Table + ` DISABLE TRIGGER ` + b.Table + `_unfinished_claim`,
			`ALTER TABLE ` + b.Table + `_produced DROP CONSTRAINT ` + b.Table + `_produced_pkey`,
		} {
			_, err := b.db.Exec(stmt)
			require.NoError(t, err, stmt)
		}
		err := inbox.OnSQL(b.db).Migrate(context.Background(), inbox.WithTable(b.Table))
		require.ErrorIs(t, err, inbox.ErrSchemaDrift)
		require.ErrorContains(t, err, "index "+b.Table+"_processing does not exist")
		require.ErrorContains(t, err, "trigger "+b.Table+"_unfinished_claim is disabled")
		require.ErrorContains(t, err, "table "+b.Table+"_produced has no primary key, want (message_id, consumer_id)")
	})
}
