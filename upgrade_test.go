package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// TestMigrate_TheCompactLayoutKeepsEveryOldRowADuplicate fills an inbox table of the layout before migration 007
// (001 to 006, as the previous release created it) with rows of both modes and produced messages, migrates it, and
// redelivers every old ID: none runs its handler again, the produced messages come back as they were stored, and
// the lease-mode rows keep their meaning.
func TestMigrate_TheCompactLayoutKeepsEveryOldRowADuplicate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		idType      inbox.IDType
		partitioned bool
	}{
		{"Text", inbox.IDTypeText, false},
		{"UUID", inbox.IDTypeUUID, false},
		{"UUIDPartitionedByHand", inbox.IDTypeUUID, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testUpgrade(t, c.idType, c.partitioned)
		})
	}
}

func testUpgrade(t *testing.T, idType inbox.IDType, partitioned bool) {
	ctx := context.Background()
	db := openDB(t)
	table := testkit.UniqueName("inbox_upgrade")
	t.Cleanup(func() { dropInboxTables(db, table) })
	opts := []inbox.SharedOption{inbox.WithTable(table), inbox.WithIDType(idType)}
	maint := maintenanceOptions(opts)
	if partitioned {
		// As docs/guides/retention.md showed it for the earlier layout: the parent created by hand before Migrate, by
		// ranges of message_id, with a default partition.
		for _, stmt := range []string{
			`CREATE TABLE ` + table + ` (processed_at timestamptz NOT NULL DEFAULT now(), consumer text NOT NULL,
				message_id uuid NOT NULL, state text NOT NULL DEFAULT 'done', PRIMARY KEY (consumer, message_id))
				PARTITION BY RANGE (message_id)`,
			`CREATE TABLE ` + table + `_low PARTITION OF ` + table + ` FOR VALUES FROM (MINVALUE) TO ('80000000-0000-0000-0000-000000000000')`,
			`CREATE TABLE ` + table + `_rest PARTITION OF ` + table + ` DEFAULT`,
		} {
			_, err := db.Exec(stmt)
			require.NoError(t, err)
		}
	}
	createPreviousLayout(t, db, table, maint...)

	newID := func(n int) string {
		if idType == inbox.IDTypeUUID {
			return uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "old-%d", n)).String()
		}
		return fmt.Sprintf("evt-%d", n)
	}
	const wallet, payments = "wallet-credits", "payments"
	// Transaction mode: 300 finished messages over the last 300 hours, the first one with a produced message.
	var walletIDs []string
	for n := range 300 {
		id := newID(n)
		walletIDs = append(walletIDs, id)
		_, err := db.Exec(`INSERT INTO `+table+` (consumer, message_id, state, processed_at)
			VALUES ($1, $2, 'done', now() - $3 * interval '1 hour')`, wallet, id, 300-n)
		require.NoError(t, err)
	}
	produced := producedAsStored(t, db, wallet, walletIDs[0], idType)
	_, err := db.Exec(`INSERT INTO `+table+`_produced (consumer, message_id, produced) VALUES ($1, $2, $3)`,
		wallet, walletIDs[0], produced.json)
	require.NoError(t, err)

	// Lease mode: one row in each state a later copy treats differently.
	leaseDone, leaseFailed, leaseHeld, leaseReleased := newID(1000), newID(1001), newID(1002), newID(1003)
	for _, row := range []struct {
		id, state, lease string
		attempts         int
	}{
		{leaseDone, "done", "", 1},
		{leaseFailed, "failed", "", 3},
		{leaseHeld, "processing", "1 hour", 1},
		{leaseReleased, "released", "", 1},
	} {
		var lockedUntil, token any
		if row.lease != "" {
			lockedUntil, token = time.Now().Add(time.Hour), uuid.NewString()
		}
		_, err := db.Exec(`INSERT INTO `+table+` (consumer, message_id, state, attempts, locked_until, lease_token, last_error)
			VALUES ($1, $2, $3, $4, $5, $6, CASE WHEN $3 = 'failed' THEN 'provider unavailable' END)`,
			payments, row.id, row.state, row.attempts, lockedUntil, token)
		require.NoError(t, err)
	}

	before := stateCounts(t, db, `SELECT consumer, state, count(*) FROM `+table+` GROUP BY 1, 2`)
	var oldest time.Time
	require.NoError(t, db.QueryRow(`SELECT min(processed_at) FROM `+table+` WHERE consumer = $1`, wallet).Scan(&oldest))

	start := time.Now()
	require.NoError(t, inbox.OnSQL(db).Migrate(ctx, maint...))
	t.Logf("migration 007 moved %d rows in %s", 304, time.Since(start))

	after := stateCounts(t, db, `SELECT consumer, state, count(*) FROM `+table+`_view GROUP BY 1, 2`)
	require.Equal(t, before, after, "every row moved, with its consumer and state")
	var version int
	require.NoError(t, db.QueryRow(`SELECT max(version) FROM `+table+`_migrations`).Scan(&version))
	require.Equal(t, 7, version)
	if partitioned {
		var kind string
		var parts []byte
		require.NoError(t, db.QueryRow(`SELECT c.relkind::text,
				(SELECT string_agg(p.relname, ',' ORDER BY p.relname) FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhrelid
				 WHERE i.inhparent = c.oid)
			FROM pg_class c WHERE c.oid = $1::regclass`, table).Scan(&kind, &parts))
		require.Equal(t, "p", kind, "still partitioned")
		require.Equal(t, table+"_low,"+table+"_rest", string(parts), "the same partitions, by name")
		var low int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM `+table+`_low`).Scan(&low))
		require.NotZero(t, low, "rows went back to their partitions")
	}

	// Every old ID of the transaction mode is a duplicate: no handler runs, and the stored message comes back.
	var calls atomic.Int64
	count := func(*message.Message) ([]*message.Message, error) { calls.Add(1); return nil, nil }
	wallets, err := inbox.New(db, inboxOptions(opts, inbox.WithConsumer(wallet))...)
	require.NoError(t, err)
	h := wallets.Middleware(count)
	for n, id := range walletIDs {
		out, err := h(newMsg(id))
		require.NoError(t, err, id)
		if n == 0 {
			require.Len(t, out, 1, "the produced message is sent again")
			require.Equal(t, produced.uuid, out[0].UUID)
			require.Equal(t, produced.payload, string(out[0].Payload))
		}
	}
	require.Zero(t, calls.Load(), "no old ID ran its handler again")
	_, err = h(newMsg(newID(5000)))
	require.NoError(t, err)
	require.EqualValues(t, 1, calls.Load(), "a new ID still runs")

	// Lease mode: done and dead-lettered rows are acked without running, a live lease is waited for, and a
	// released one runs again, as before the migration.
	leases, err := inbox.New(db, inboxOptions(opts, inbox.WithConsumer(payments), inbox.WithLease(time.Minute),
		inbox.WithRejectDelay(10*time.Millisecond))...)
	require.NoError(t, err)
	calls.Store(0)
	lh := leases.Middleware(count)
	_, err = lh(newMsg(leaseDone))
	require.NoError(t, err)
	_, err = lh(newMsg(leaseFailed))
	require.NoError(t, err)
	require.Zero(t, calls.Load(), "finished and dead-lettered rows do not run")
	heldCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	held := newMsg(leaseHeld)
	held.SetContext(heldCtx)
	_, err = lh(held)
	require.Error(t, err, "the live lease is still held")
	require.Zero(t, calls.Load())
	_, err = lh(newMsg(leaseReleased))
	require.NoError(t, err)
	require.EqualValues(t, 1, calls.Load(), "a released row runs its next attempt")

	// How far back the consumer remembers survives the move: since its oldest row.
	ms, err := inbox.OnSQL(db).Remembers(ctx, maint...)
	require.NoError(t, err)
	require.Len(t, ms, 2)
	require.Equal(t, wallet, ms[1].Consumer)
	require.WithinDuration(t, oldest, ms[1].Oldest, time.Second)

	// The cleanup walks the migrated table, partitioned or not: the 201 rows of 100 hours and more go, with the
	// produced message of the oldest, in batches smaller than a page holds; the rest stay.
	res, err := inbox.OnSQL(db).Cleanup(ctx, inbox.CleanupParams{Retention: 99*time.Hour + 30*time.Minute, BatchSize: 37}, maint...)
	require.NoError(t, err)
	require.EqualValues(t, 201, res.Deleted)
	var left, producedLeft int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM `+table+`_view WHERE consumer = $1`, wallet).Scan(&left))
	require.Equal(t, 300+1-201, left)
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM `+table+`_produced`).Scan(&producedLeft))
	require.Zero(t, producedLeft, "the produced message went with its row")
	ms, err = inbox.OnSQL(db).Remembers(ctx, maint...)
	require.NoError(t, err)
	require.InDelta(t, (99*time.Hour + 30*time.Minute).Seconds(), ms[1].Age.Seconds(), 5, "remembers since the cutoff")
}

// createPreviousLayout creates the inbox table as migrations 001 to 006 leave it, recorded in its versions table as
// Migrate records them.
func createPreviousLayout(t *testing.T, db *sql.DB, table string, opts ...inbox.MaintenanceOption) {
	t.Helper()
	tx, err := db.Begin()
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.Exec(`CREATE TABLE ` + table + `_migrations (version integer PRIMARY KEY, name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`)
	require.NoError(t, err)
	for _, m := range applyPreviousLayout(t, tx.Exec, opts...) {
		_, err = tx.Exec(`INSERT INTO `+table+`_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit())
}

// applyPreviousLayout runs, through exec, the migrations of the layout before the compact one (001 to 006) for
// the table opts name, and returns them.
func applyPreviousLayout(t *testing.T, exec func(string, ...any) (sql.Result, error), opts ...inbox.MaintenanceOption) []inbox.Migration {
	t.Helper()
	ms, err := inbox.OnSQL(nil).Migrations(opts...)
	require.NoError(t, err)
	var applied []inbox.Migration
	for _, m := range ms {
		if m.Version > 6 {
			break
		}
		_, err := exec(m.Up)
		require.NoError(t, err, "migration %d", m.Version)
		applied = append(applied, m)
	}
	return applied
}

// dropInboxTables drops the inbox table and everything the inbox made beside it.
func dropInboxTables(db *sql.DB, table string) {
	for _, q := range testkit.PostgreSQL.DropInbox(table) {
		_, _ = db.Exec(q)
	}
}

// storedProduced is a produced message as the inbox stores it, and what its replay must carry.
type storedProduced struct {
	json, uuid, payload string
}

// producedAsStored applies id once for consumer in a scratch inbox of the current layout, with a handler that
// produces one message, and returns the produced column the inbox stored: the format did not change with the
// layout, so it is what the previous release stored for the same message.
func producedAsStored(t *testing.T, db *sql.DB, consumer, id string, idType inbox.IDType) storedProduced {
	t.Helper()
	scratch := testkit.UniqueName("inbox_scratch")
	t.Cleanup(func() { dropInboxTables(db, scratch) })
	ib, err := inbox.New(db, inbox.WithTable(scratch), inbox.WithIDType(idType), inbox.WithConsumer(consumer))
	require.NoError(t, err)
	out, err := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		return []*message.Message{message.NewMessage("", []byte(`{"credited":100}`))}, nil
	})(newMsg(id))
	require.NoError(t, err)
	require.Len(t, out, 1)
	var p storedProduced
	require.NoError(t, db.QueryRow(`SELECT produced::text FROM `+scratch+`_produced`).Scan(&p.json))
	p.uuid, p.payload = out[0].UUID, string(out[0].Payload)
	return p
}

// stateCounts runs a query of (consumer, state, count) rows and returns them keyed "consumer/state".
func stateCounts(t *testing.T, db *sql.DB, query string) map[string]int {
	t.Helper()
	rows, err := db.Query(query)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var consumer, state string
		var n int
		require.NoError(t, rows.Scan(&consumer, &state, &n))
		out[consumer+"/"+state] = n
	}
	require.NoError(t, rows.Err())
	return out
}
