package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/lib/pq"
)

// inboxTable is the harness's own inbox table, so that no measurement touches the tables of the library's or the
// example's tests, which may run against the same database at the same time.
const inboxTable = "harness_inbox"

// partitionedTable is the harness's inbox table of managed partitions, the partitioned variant's: uuid IDs, one
// partition an hour.
const partitionedTable = "harness_inbox_partitioned"

// partitionPeriod is partitionedTable's WithPartitions period.
const partitionPeriod = time.Hour

// partitionedOptions are the inbox options of partitionedTable, for Migrate.
func partitionedOptions() []inbox.MaintenanceOption {
	return []inbox.MaintenanceOption{inbox.WithTable(partitionedTable), inbox.WithIDType(inbox.IDTypeUUID), inbox.WithPartitions(partitionPeriod)}
}

// Every row the harness writes carries the run's ID, so runs (and parallel test processes) never see each other's
// rows and a run can be counted and deleted on its own.
const schemaSQL = `
-- What was published: the denominator for losses.
CREATE TABLE IF NOT EXISTS harness_events (
    run_id   text   NOT NULL,
    event_id text   NOT NULL,
    seq      int    NOT NULL,
    account  int    NOT NULL,
    amount   bigint NOT NULL,
    PRIMARY KEY (run_id, event_id)
);
-- The balances the credits change: an increment, so applying a credit twice shows.
CREATE TABLE IF NOT EXISTS harness_accounts (
    run_id  text   NOT NULL,
    account int    NOT NULL,
    balance bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, account)
);
-- One row per applied credit. No unique key on purpose: a duplicate must be able to land, or it cannot be counted.
-- consumer and written_at say who wrote a row and when, which is how a zombie's write is told from its successor's.
CREATE TABLE IF NOT EXISTS harness_ledger (
    run_id     text        NOT NULL,
    event_id   text        NOT NULL,
    account    int         NOT NULL,
    amount     bigint      NOT NULL,
    consumer   text        NOT NULL,
    written_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS harness_ledger_run_event ON harness_ledger (run_id, event_id);
-- Which messages already stalled once (zombie runs): a stall happens the first time a message is handled, by
-- whichever consumer gets it first, and never again.
CREATE TABLE IF NOT EXISTS harness_stalls (
    run_id   text        NOT NULL,
    event_id text        NOT NULL,
    consumer text        NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (run_id, event_id)
);`

// creditSQL is the side effect of one credit event, the same for every variant: one round trip that moves the
// balance and writes the ledger row. Under the inbox it runs on the inbox's transaction; otherwise on the
// variant's own.
const creditSQL = `WITH moved AS (
    UPDATE harness_accounts SET balance = balance + $4 WHERE run_id = $1 AND account = $3
)
INSERT INTO harness_ledger (run_id, event_id, account, amount, consumer) VALUES ($1, $2, $3, $4, $5)`

// claimSQL is the inbox's claim as the library runs it, for the PostgreSQL-only ceiling of the throughput
// measurement: the ceiling must do the same work per message, minus Kafka and Watermill. $1 is the consumer's id
// in the consumers table (registerConsumer), resolved once per run as an Inbox resolves it once per process.
const claimSQL = `INSERT INTO ` + inboxTable + ` (consumer_id, message_id, state) VALUES ($1, $2, 'd')
ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING true`

// runConsumerIn picks the rows of inbox table table of a run: every run is a consumer of its own, named by the
// run's ID, and the rows carry the consumer's id rather than its name.
func runConsumerIn(table string) string {
	return `consumer_id = (SELECT id FROM ` + table + `_consumers WHERE name = $1)`
}

// claimCommitsSQL counts the transactions that claimed run $1's inbox rows, in whichever of the harness's inbox
// tables its variant claims in (the other holds none of them).
var claimCommitsSQL = `(SELECT count(DISTINCT xmin::text) FROM ` + inboxTable + ` WHERE ` + runConsumerIn(inboxTable) + `) +
    (SELECT count(DISTINCT xmin::text) FROM ` + partitionedTable + ` WHERE ` + runConsumerIn(partitionedTable) + `)`

// registerConsumerSQL returns the id of consumer $1, registering it if the consumers table does not list it yet.
// It looks first and inserts only when it must, so that finding a known consumer draws no value from the identity
// sequence. Two registrations of one new name at once leave the second with no row (its snapshot predates the
// first's commit); the caller tries again.
const registerConsumerSQL = `WITH known AS (
    SELECT id FROM ` + inboxTable + `_consumers WHERE name = $1
), registered AS (
    INSERT INTO ` + inboxTable + `_consumers (name) SELECT $1 WHERE NOT EXISTS (SELECT 1 FROM known)
    ON CONFLICT (name) DO NOTHING RETURNING id
)
SELECT id FROM known UNION ALL SELECT id FROM registered`

// stallSQL records that a message stalled; it returns a row only the first time, for one consumer.
const stallSQL = `INSERT INTO harness_stalls (run_id, event_id, consumer) VALUES ($1, $2, $3)
ON CONFLICT DO NOTHING RETURNING true`

// migrate creates the harness's tables and its inbox table. Tests of several packages may start at once, and two
// concurrent CREATE TABLE IF NOT EXISTS can still collide in the catalog, hence the advisory lock.
func migrate(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('watermill-inbox-harness'))`); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, schemaSQL); err != nil {
		return fmt.Errorf("harness schema: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	if err := inbox.OnSQL(db).Migrate(ctx, inbox.WithTable(inboxTable)); err != nil {
		return err
	}
	// Migrating a partitioned table again also creates the partitions it lacks up to PartitionsAhead, so a table
	// made days ago still has the partition of this hour.
	return inbox.OnSQL(db).Migrate(ctx, partitionedOptions()...)
}

// registerConsumer returns the id the inbox table stores for consumer, registering the name if it is new.
func registerConsumer(ctx context.Context, db *sql.DB, consumer string) (int, error) {
	for try := 0; try < 3; try++ {
		var id int
		err := db.QueryRowContext(ctx, registerConsumerSQL, consumer).Scan(&id)
		if err == nil {
			return id, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return 0, fmt.Errorf("register consumer %s: %w", consumer, err)
		}
	}
	return 0, fmt.Errorf("consumer %s was not registered after three tries", consumer)
}

// event is one credit as published and as recorded in harness_events.
type event struct {
	ID      string
	Seq     int
	Account int
	Amount  int64
}

// seedRun creates the run's accounts at zero and records the events that are about to be published.
func seedRun(ctx context.Context, db *sql.DB, run string, accounts int, events []event) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `INSERT INTO harness_accounts (run_id, account)
		SELECT $1, a FROM generate_series(1, $2) a`, run, accounts); err != nil {
		return err
	}
	stmt, err := tx.PrepareContext(ctx, `COPY harness_events (run_id, event_id, seq, account, amount) FROM STDIN`)
	if err != nil {
		return err
	}
	for _, e := range events {
		if _, err := stmt.ExecContext(ctx, run, e.ID, e.Seq, e.Account, e.Amount); err != nil {
			return err
		}
	}
	if _, err := stmt.ExecContext(ctx); err != nil {
		return err
	}
	if err := stmt.Close(); err != nil {
		return err
	}
	return tx.Commit()
}

// tally is what a run left in the database.
type tally struct {
	Events     int   // published
	Rows       int   // ledger rows
	Duplicates int   // ledger rows beyond the first for an event
	Losses     int   // published events without a ledger row
	Strays     int   // ledger rows for events never published: must be 0, or the counting is broken
	Balance    int64 // sum of the run's balances
	Credited   int64 // sum of the ledger's amounts: equals Balance, or a credit moved money without a row
	Commits    int   // transactions that claimed the run's inbox rows: one per event, fewer in batch mode; 0 without the inbox
}

// count tallies a run. Duplicates and losses are counted per event ID, not from totals, so that a loss and a
// duplicate cannot cancel out.
func count(ctx context.Context, db *sql.DB, run string) (tally, error) {
	var t tally
	err := db.QueryRowContext(ctx, `
		WITH per_event AS (
		    SELECT event_id, count(*) AS n FROM harness_ledger WHERE run_id = $1 GROUP BY event_id
		)
		SELECT
		    (SELECT count(*) FROM harness_events WHERE run_id = $1),
		    (SELECT coalesce(sum(n), 0) FROM per_event),
		    (SELECT coalesce(sum(n - 1), 0) FROM per_event),
		    (SELECT count(*) FROM harness_events e WHERE e.run_id = $1
		        AND NOT EXISTS (SELECT 1 FROM per_event p WHERE p.event_id = e.event_id)),
		    (SELECT count(*) FROM per_event p WHERE NOT EXISTS
		        (SELECT 1 FROM harness_events e WHERE e.run_id = $1 AND e.event_id = p.event_id)),
		    (SELECT coalesce(sum(balance), 0) FROM harness_accounts WHERE run_id = $1),
		    (SELECT coalesce(sum(amount), 0) FROM harness_ledger WHERE run_id = $1),
		    `+claimCommitsSQL, run).
		Scan(&t.Events, &t.Rows, &t.Duplicates, &t.Losses, &t.Strays, &t.Balance, &t.Credited, &t.Commits)
	if err != nil {
		return t, fmt.Errorf("count run %s: %w", run, err)
	}
	if t.Strays != 0 || t.Balance != t.Credited {
		return t, fmt.Errorf("run %s: the ledger disagrees with itself (%d stray rows, balance %d vs credited %d)",
			run, t.Strays, t.Balance, t.Credited)
	}
	return t, nil
}

// ledgerRows returns how many ledger rows a run has so far, for progress lines and for waiting on a drain.
func ledgerRows(ctx context.Context, db *sql.DB, run string) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM harness_ledger WHERE run_id = $1`, run).Scan(&n)
	return n, err
}

// claimCommits returns how many transactions claimed a run's inbox rows. A row's xmin is the ID of the transaction
// that inserted it, so the rows one statement claimed share it: a batch claims all its messages in one statement
// before any handler runs. The ledger cannot tell the same: each handler of a batch writes in a savepoint, a
// subtransaction with an ID of its own. (IDs wrap around after four billion transactions; a run is far shorter.)
func claimCommits(ctx context.Context, db *sql.DB, run string) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT `+claimCommitsSQL, run).Scan(&n)
	return n, err
}

// partitionSpread is where a run's rows lie in partitionedTable: how many partitions hold them, and how many are
// in the default partition, which only IDs outside every partition's range reach.
func partitionSpread(ctx context.Context, db *sql.DB, run string) (partitions, inDefault int, err error) {
	err = db.QueryRowContext(ctx, `SELECT count(DISTINCT tableoid),
		    count(*) FILTER (WHERE tableoid = '`+partitionedTable+`_default'::regclass)
		FROM `+partitionedTable+` WHERE `+runConsumerIn(partitionedTable), run).Scan(&partitions, &inDefault)
	if err != nil {
		return 0, 0, fmt.Errorf("partitions of run %s: %w", run, err)
	}
	return partitions, inDefault, nil
}

// creditedEvents returns how many distinct events of a run have a ledger row: progress that duplicates do not
// inflate.
func creditedEvents(ctx context.Context, db *sql.DB, run string) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT count(DISTINCT event_id) FROM harness_ledger WHERE run_id = $1`, run).Scan(&n)
	return n, err
}

// write is one ledger row of an event, for telling who wrote an event's credit and when.
type write struct {
	Consumer string
	At       time.Time
}

// writesOf returns the ledger rows of the given events, oldest first.
func writesOf(ctx context.Context, db *sql.DB, run string, ids []string) (map[string][]write, error) {
	rows, err := db.QueryContext(ctx, `SELECT event_id, consumer, written_at FROM harness_ledger
		WHERE run_id = $1 AND event_id = ANY($2) ORDER BY written_at`, run, pq.Array(ids))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]write{}
	for rows.Next() {
		var id string
		var w write
		if err := rows.Scan(&id, &w.Consumer, &w.At); err != nil {
			return nil, err
		}
		out[id] = append(out[id], w)
	}
	return out, rows.Err()
}

// cleanup deletes a counted run's rows; the tables would otherwise grow by a million rows per throughput run. The
// run's consumer goes too: its id is never given out again, but the consumers table stays as small as the runs
// in flight. (The produced table has no foreign key to the inbox table, so its rows are deleted on their own.)
func cleanup(ctx context.Context, db *sql.DB, run string) error {
	for _, q := range []string{
		`DELETE FROM harness_ledger WHERE run_id = $1`,
		`DELETE FROM harness_events WHERE run_id = $1`,
		`DELETE FROM harness_accounts WHERE run_id = $1`,
		`DELETE FROM harness_stalls WHERE run_id = $1`,
		`DELETE FROM ` + inboxTable + ` WHERE ` + runConsumerIn(inboxTable),
		`DELETE FROM ` + inboxTable + `_produced WHERE ` + runConsumerIn(inboxTable),
		`DELETE FROM ` + inboxTable + `_consumers WHERE name = $1`,
		`DELETE FROM ` + partitionedTable + ` WHERE ` + runConsumerIn(partitionedTable),
		`DELETE FROM ` + partitionedTable + `_produced WHERE ` + runConsumerIn(partitionedTable),
		`DELETE FROM ` + partitionedTable + `_consumers WHERE name = $1`,
	} {
		if _, err := db.ExecContext(ctx, q, run); err != nil {
			return fmt.Errorf("clean up run %s: %w", run, err)
		}
	}
	return nil
}
