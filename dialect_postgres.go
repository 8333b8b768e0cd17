package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// Postgres returns the PostgreSQL dialect: the one On uses, and the package-level functions over a *sql.DB. Every
// statement it runs is in this file, formatted once per table name.
func Postgres() dialect.Dialect { return postgresDialect }

var postgresDialect dialect.Dialect = &postgres{}

type postgres struct {
	queries sync.Map // table name -> *pgQueries
	batches sync.Map // batchKey -> string: the batch claim of one table and size
	reads   sync.Map // batchKey -> string: ReadRows of one table and count of IDs
}

// pgQueries holds every query the inbox runs on one PostgreSQL inbox table.
type pgQueries struct {
	consumerFindSQL  string
	consumerIDSQL    string
	claimSQL         string
	claimFreshSQL    string
	claimAtCommitSQL string
	unclaimSQL       string
	producedSQL      string
	saveSQL          string
	finishSQL        string
	takeoverSQL      string

	leaseClaimSQL    string
	leaseStateSQL    string
	leaseExtendSQL   string
	leaseReleaseSQL  string
	leaseCompleteSQL string
	leaseFailSQL     string

	lockTakeSQL       string
	lockExtendSQL     string
	lockReleaseSQL    string
	consumersSQL      string
	cleanupBatchSQL   string
	spanSQL           string
	spanPagesSQL      string
	spanRestSQL       string
	summarizeSQL      string
	abandonedSQL      string
	memorySQL         string
	statsConsumersSQL string
	statsSizesSQL     string
	statsIDsSQL       string
	forgetSQL         string
	forgetLeftoverSQL string

	compactSQL        string
	versionsCreateSQL string
	versionsReadSQL   string
	versionsRecordSQL string
}

func (pg *postgres) sql(table string) *pgQueries {
	if q, ok := pg.queries.Load(table); ok {
		return q.(*pgQueries)
	}
	q, _ := pg.queries.LoadOrStore(table, newPGQueries(table))
	return q.(*pgQueries)
}

// Savepoint statements, for a claim made inside watermill-sql's subscriber transaction. The name is fixed: a
// savepoint is always released, after a rollback to it too, so they never nest.
const (
	savepointSQL         = `SAVEPOINT watermill_inbox_claim`
	rollbackSavepointSQL = `ROLLBACK TO SAVEPOINT watermill_inbox_claim`
	releaseSavepointSQL  = `RELEASE SAVEPOINT watermill_inbox_claim`
)

// compactVersion is the migration that moves the inbox table to the compact layout (007_compact.up.sql).
const compactVersion = 7

// migrateLockSQL makes concurrent migrators of one table take turns. The lock ends with the transaction, so a
// crashed migrator cannot leave it held; PostgreSQL's DDL is transactional, so the whole migration, its record in
// the versions table and the schema check commit or roll back together.
const migrateLockSQL = `SELECT pg_advisory_xact_lock($1)`

// consumerLockSQL makes the registrations of new consumer names in one table take turns (consumerIDSQL says why).
// A transaction-level advisory lock: it ends with the short registration transaction, whatever becomes of it, and
// stays on one server connection behind a pooler in transaction mode.
const consumerLockSQL = `SELECT pg_advisory_xact_lock($1)`

// Catalog queries of the schema check. Each names its object through to_regclass, which resolves the name with
// the connection's search_path as every inbox query does, and gives NULL, so no row, for a missing object instead
// of an error that would abort the transaction. Names reach them double-quoted, so that they mean exactly the
// configured lower-case name.
const (
	// A table's kind ('r' for a table, 'p' for a partitioned one) and its primary key's columns in key order.
	tableSQL = `SELECT c.relkind::text,
			(SELECT string_agg(a.attname, ', ' ORDER BY k.n)
			 FROM pg_index i
			 CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n)
			 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
			 WHERE i.indrelid = c.oid AND i.indisprimary)
		FROM pg_class c WHERE c.oid = to_regclass($1)`

	// A table's live columns. The last value tells whether an INSERT that leaves the column out still works.
	columnsSQL = `SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
			a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> ''
		FROM pg_attribute a
		WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`

	// A trigger of a table: 'D' in tgenabled means disabled, 'R' firing only for replication sessions.
	triggerSQL = `SELECT t.tgenabled::text FROM pg_trigger t WHERE t.tgrelid = to_regclass($1) AND t.tgname = $2`

	// An index: whether it belongs to the expected table, and whether it is valid (a failed CREATE INDEX
	// CONCURRENTLY leaves an invalid one behind, which no query uses).
	indexSQL = `SELECT i.indrelid IS NOT DISTINCT FROM to_regclass($2), i.indisvalid
		FROM pg_index i WHERE i.indexrelid = to_regclass($1)`
)

func newPGQueries(table string) *pgQueries {
	q := func(s string) string {
		return strings.NewReplacer("{table}", table, "{now_minutes}", nowMinutesSQL).Replace(s)
	}
	return &pgQueries{

		// A consumer's id, when its name is registered: what nearly every process start finds, with no lock.
		consumerFindSQL: q(`SELECT id FROM {table}_consumers WHERE name = $1`),

		// Registers a name that consumerFindSQL did not find, and returns its id (migrations/007_compact.up.sql),
		// once per consumer and process. The ids are smallints, 32,767 per table, and an INSERT draws the next one
		// from the identity sequence for every row it tries, conflicting or not; so it runs only after
		// consumerLockSQL, which makes the registrations of one table take turns, and only for a name the statement
		// finds missing. It is a statement of its own after the lock, so that under READ COMMITTED its snapshot,
		// taken once the lock is held, sees the row of any registration that held the lock before: a process that
		// lost the race finds that row and inserts nothing. ON CONFLICT stays for registrations that skip the
		// lock (a process of an older version): one of those may insert the name between this statement's
		// snapshot and its INSERT, which then returns no row, and the caller runs it again.
		consumerIDSQL: q(`WITH known AS (
				SELECT id FROM {table}_consumers WHERE name = $1
			), registered AS (
				INSERT INTO {table}_consumers (name) SELECT $1 WHERE NOT EXISTS (SELECT 1 FROM known)
				ON CONFLICT (name) DO NOTHING RETURNING id
			)
			SELECT id FROM known UNION ALL SELECT id FROM registered`),

		// The claim is the whole deduplication. The primary key (message_id, consumer_id) makes a second INSERT of
		// the same ID wait for the first transaction to end, then do nothing if it committed: racing copies are
		// serialized by the index, with no lock of ours. RETURNING tells the caller, in the same round trip,
		// whether this transaction owns the row. processed_at comes from the column default, the database clock.
		// state is 'd' (done) in the inbox's own transaction; 'a' (applying) inside a transaction it does not
		// commit (migrations/003_applying_guard.up.sql says why). States travel as text and are cast: not every
		// driver writes PostgreSQL's one-byte "char".
		//
		// The consumer's id ($1) is one the process cached, and the consumers table may have been made anew since
		// (migration 007 rolled back and applied again numbers the consumers in the order of their names), so the
		// row takes its consumer_id from the consumers table, where the id must still name the consumer ($4). A
		// stale id gives NULL, and the NOT NULL of consumer_id fails the statement (not_null_violation, which
		// Classify calls StaleConsumer) before ON CONFLICT looks for a row: a stale id can never find another
		// consumer's row and take it for a duplicate. The check is a probe of the consumers table's primary key
		// in the same round trip. The statement's locks on both tables last until the transaction ends, and the
		// migrations lock the inbox table before they touch either, so the id stays checked for every statement
		// after the claim in its transaction.
		claimSQL: q(`INSERT INTO {table} (consumer_id, message_id, state)
			VALUES ((SELECT id FROM {table}_consumers WHERE id = $1 AND name = $4), $2, $3::text::"char")
			ON CONFLICT (message_id, consumer_id) DO NOTHING
			RETURNING true`),

		// The claim above without its check, for a claim in a subscriber's transaction whose check failed only
		// because the transaction's snapshot, under REPEATABLE READ, is older than the consumer's registration (a
		// consumer's first message, or the first after the consumers table was made anew), and cannot see its row.
		// The id was read again just before, by a transaction that committed (dialect.ClaimParams.Fresh); the
		// consumers table could be made anew between that read and this INSERT only by a migration that took the
		// inbox table's lock and committed within that one round trip, where before the check every claim trusted
		// an id for as long as the process ran.
		claimFreshSQL: q(`INSERT INTO {table} (consumer_id, message_id, state) VALUES ($1, $2, $3::text::"char")
			ON CONFLICT (message_id, consumer_id) DO NOTHING
			RETURNING true`),

		// The claim at commit (WithClaimAtCommit) goes in one round trip with COMMIT, after the handler ran, so
		// it must not do nothing on a row already there: it fails, with a unique violation, the COMMIT after it
		// does not run, and the handler's effect is rolled back with the transaction. A racing copy's INSERT waits
		// for the first one's transaction as the claim above does, and fails if that one commits. The consumer's
		// id is checked as in the claim above: a stale one fails the INSERT, and the message goes the usual way,
		// where its claim finds the id stale again, forgets it and registers the name anew.
		claimAtCommitSQL: q(`INSERT INTO {table} (consumer_id, message_id, state)
			VALUES ((SELECT id FROM {table}_consumers WHERE id = $1 AND name = $3), $2, 'd')`),

		// Runs only in batch mode, for a message whose handler failed, on the row the batch claimed for it and has
		// not committed: the other messages of the batch commit, and its redelivery must find no row. Its id was
		// checked by the batch's claim, in this transaction.
		unclaimSQL: q(`DELETE FROM {table} WHERE message_id = $2 AND consumer_id = $1`),

		// Runs only on a duplicate, which is rare, so the claim above stays one statement. A new statement takes a
		// new snapshot under READ COMMITTED, so it sees the rows whose commit made the claim do nothing. The state
		// tells a finished message from one that lease mode claimed and has not finished, when a consumer's
		// table saw both modes. It trusts the consumer's id without checking it again: it runs after the claim,
		// in the claim's transaction, and the claim checked the id and holds the locks that keep the consumers
		// table from being made anew until the transaction ends (claimSQL says why). The claim that inserted
		// nothing inserted nothing because it found a row, not because of a stale id, which fails it. The one
		// read in a transaction of its own (a subscriber's claim that met a row committed after its snapshot)
		// runs while the subscriber's transaction, whose claim checked the id, still holds those locks.
		producedSQL: q(`SELECT i.state::text, p.produced FROM {table} i
			LEFT JOIN {table}_produced p ON p.message_id = i.message_id AND p.consumer_id = i.consumer_id
			WHERE i.message_id = $2 AND i.consumer_id = $1`),

		// Runs in the claim's transaction, only when the handler produced messages: they commit with the effect
		// they describe, and can be sent again when the router's publish after the commit fails. The produced
		// table has no foreign key to the inbox (007 says why), so a row deleted by hand may have left its
		// produced messages behind: the claim that follows replaces them rather than failing on them.
		saveSQL: q(`INSERT INTO {table}_produced (message_id, consumer_id, produced) VALUES ($2, $1, $3)
			ON CONFLICT (message_id, consumer_id) DO UPDATE SET produced = excluded.produced`),

		// Runs only for a claim made 'applying' in a transaction the inbox does not commit, once the handler
		// succeeded (migrations/003_applying_guard.up.sql says why). Turning the row 'done' and storing the produced
		// messages ($3, NULL for none) is one statement: the owner of the transaction may commit it at any moment
		// (watermill-sql's subscriber does on close and at its ack deadline), and a commit between two statements
		// would leave a 'done' row whose messages a redelivery, skipped as a duplicate, could never send. Both parts
		// read the row as it was before the statement, so both see it 'applying' or neither does; the UPDATE's
		// count tells the caller which.
		finishSQL: q(`WITH saved AS (
				INSERT INTO {table}_produced (message_id, consumer_id, produced)
				SELECT message_id, consumer_id, $3::jsonb FROM {table}
				WHERE message_id = $2 AND consumer_id = $1 AND state = 'a' AND $3::jsonb IS NOT NULL
				ON CONFLICT (message_id, consumer_id) DO UPDATE SET produced = excluded.produced
			)
			UPDATE {table} SET state = 'd' WHERE message_id = $2 AND consumer_id = $1 AND state = 'a'`),

		// Runs only when a transaction-mode claim found a row that lease mode left: a consumer switched modes,
		// or shares a table with a lease-mode handler of the same name. It takes the row, as $3, when lease mode
		// would let a new holder take it: 'released', or 'processing' with a lease run out by the database clock.
		// Under READ COMMITTED a concurrent lease claim makes this UPDATE wait and recheck the row's newest version,
		// so only one of them gets it. Clearing the token fences off the old holder's writes. It leaves consumer_id
		// as it is, and runs after the claim, in its transaction, which checked the consumer's id.
		takeoverSQL: q(`UPDATE {table} SET state = $3::text::"char", locked_until = NULL, lease_token = NULL,
				processed_at = {now_minutes}
			WHERE message_id = $2 AND consumer_id = $1
				AND (state = 'r' OR (state = 'p' AND locked_until <= now()))
			RETURNING true`),

		// Lease mode's claim, committed in a short transaction of its own so the claim is durable before the
		// handler calls out. A new ID is inserted as 'processing'. An existing row is taken only when it is free:
		// 'released' by a failed attempt, or 'processing' with a lease that has run out by the database clock, so
		// consumers with skewed clocks agree on who holds it. The conflict path locks the row, so two takers are
		// serialized and the second finds the first's live lease.
		//
		// It looks first: prior reads the row as the statement's snapshot has it, and a finished row ('done' or
		// 'failed', the common case of a redelivered copy) inserts nothing, so it meets no conflict. Without that
		// the conflict path would lock the row, and write WAL and commit for it, even though its WHERE leaves the
		// row as it is. prior also tells a takeover: 'processing' there means a holder's lease expired. It names
		// $1 and $2 first, which gives them the columns' types (message_id is text or uuid) for the SELECT list.
		//
		// The consumer's id is checked as in claimSQL: checked holds it only while it still names the consumer
		// ($5). A stale one makes prior find nothing, even where the consumer that now has that id has a finished
		// row, so the INSERT goes ahead with a NULL consumer_id and fails; no stale id is ever taken for a
		// duplicate. The read of the row after a claim that took nothing (leaseStateSQL) runs in the same
		// transaction, after that check.
		leaseClaimSQL: q(`WITH checked AS (
				SELECT id FROM {table}_consumers WHERE id = $1 AND name = $5
			), prior AS (
				SELECT state FROM {table} WHERE message_id = $2 AND consumer_id = (SELECT id FROM checked)
			)
			INSERT INTO {table} AS t (processed_at, consumer_id, message_id, state, attempts, lease_token, locked_until)
			SELECT {now_minutes}, (SELECT id FROM checked), $2, 'p', 1, $3::uuid, now() + $4 * interval '1 millisecond'
			WHERE NOT EXISTS (SELECT 1 FROM prior WHERE state IN ('d', 'f'))
			ON CONFLICT (message_id, consumer_id) DO UPDATE SET
				state        = 'p',
				attempts     = coalesce(t.attempts, 0) + 1,
				lease_token  = excluded.lease_token,
				locked_until = excluded.locked_until,
				processed_at = excluded.processed_at,
				last_error   = CASE WHEN t.state = 'p'
					THEN 'lease of attempt ' || t.attempts || ' expired' ELSE t.last_error END
			WHERE t.state = 'r' OR (t.state = 'p' AND t.locked_until <= now())
			RETURNING attempts, coalesce(last_error, ''), (SELECT state = 'p' FROM prior)`),

		// Runs only when the claim returned no row, to tell a finished message from a live lease, in the claim's
		// transaction, which checked the consumer's id. Milliseconds left are computed by the database, whose
		// clock the lease is on.
		// The produced messages come along for the 'done' case, so a duplicate costs this one extra round trip.
		leaseStateSQL: q(`SELECT i.state::text, coalesce(i.attempts, 0),
				greatest(0, extract(epoch FROM i.locked_until - now()) * 1000)::bigint, p.produced
			FROM {table} i
			LEFT JOIN {table}_produced p ON p.message_id = i.message_id AND p.consumer_id = i.consumer_id
			WHERE i.message_id = $2 AND i.consumer_id = $1`),

		// Every write of a holder is a compare-and-set on its lease token and the 'processing' state: once the
		// lease was taken over, the old holder's write matches no row, returns none, and it learns that it lost
		// the lease.
		leaseExtendSQL: q(`UPDATE {table} SET locked_until = now() + $4 * interval '1 millisecond'
			WHERE message_id = $2 AND consumer_id = $1 AND lease_token = $3 AND state = 'p'
			RETURNING 1`),
		leaseReleaseSQL: q(`UPDATE {table} SET state = 'r', locked_until = NULL, last_error = $4,
				processed_at = {now_minutes}
			WHERE message_id = $2 AND consumer_id = $1 AND lease_token = $3 AND state = 'p'
			RETURNING 1`),
		// Marks 'done' and stores the produced messages, if any, in one statement: a crash cannot leave a 'done'
		// row whose messages were never stored, which a redelivery would then skip without sending them.
		leaseCompleteSQL: q(`WITH done AS (
				UPDATE {table} SET state = 'd', locked_until = NULL, processed_at = {now_minutes}
				WHERE message_id = $2 AND consumer_id = $1 AND lease_token = $3 AND state = 'p'
				RETURNING message_id, consumer_id
			), saved AS (
				INSERT INTO {table}_produced (message_id, consumer_id, produced)
				SELECT message_id, consumer_id, $4::jsonb FROM done WHERE $4::jsonb IS NOT NULL
				ON CONFLICT (message_id, consumer_id) DO UPDATE SET produced = excluded.produced
			)
			SELECT 1 FROM done`),
		leaseFailSQL: q(`UPDATE {table} SET state = 'f', locked_until = NULL, last_error = $4,
				processed_at = {now_minutes}
			WHERE message_id = $2 AND consumer_id = $1 AND lease_token = $3 AND state = 'p'
			RETURNING 1`),

		// The cleanup's lock is a row of "{table}_locks" (migrations/006_locks.up.sql), held for a time by the
		// database clock, not a lock of a session or a transaction: the cleanup must not hold one transaction
		// open across its batches (that would keep every deleted row's lock and pin the xmin horizon for the
		// whole round), and a session lock taken through a transaction-pooling proxy is taken on one server
		// connection and released on another. The row is taken when it is missing, or when its holder's time
		// ran out, so a crashed cleaner holds it no longer than that; a live holder's row is left alone, and the
		// instance that finds it skips the round instead of queueing behind it. Two takers at once are
		// serialized by the primary key: the second rechecks held_until on the first's row and takes nothing.
		// The cutoff comes along, from the database clock that wrote processed_at, so every batch of the round
		// agrees on it.
		lockTakeSQL: q(`WITH taken AS (
				INSERT INTO {table}_locks AS l (name, holder, held_until)
				VALUES ($1, $2, now() + $3 * interval '1 millisecond')
				ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, held_until = excluded.held_until
				WHERE l.held_until <= now()
				RETURNING 1
			)
			SELECT EXISTS (SELECT 1 FROM taken), now() - $4 * interval '1 microsecond'`),

		// Runs in each batch's transaction, before its DELETE: a compare-and-set on the holder, so a cleaner
		// whose time ran out (a pause longer than its hold, a stalled process) learns that it lost the lock
		// before it deletes anything, and the row lock it takes keeps a taker waiting until the batch commits.
		lockExtendSQL: q(`UPDATE {table}_locks SET held_until = now() + $3 * interval '1 millisecond'
			WHERE name = $1 AND holder = $2
			RETURNING 1`),

		// Only the holder frees the lock; one whose time ran out finds another holder's row and leaves it.
		lockReleaseSQL: q(`DELETE FROM {table}_locks WHERE name = $1 AND holder = $2`),

		// The consumers table lists every consumer once: the rows carry only ids.
		consumersSQL: q(`SELECT name FROM {table}_consumers ORDER BY name`),

		// One bounded batch of one consumer's expired rows. The cleanup itself walks the table's pages for all
		// consumers at once (spanPagesSQL below); this serves dialect.Dialect's per-consumer contract. Rows of a
		// minute are deleted only once the whole minute lies before the cutoff ($3, in minutes, rounded down), so
		// no row goes early.
		cleanupBatchSQL: q(`WITH picked AS (
				SELECT ctid FROM {table}
				WHERE consumer_id = (SELECT id FROM {table}_consumers WHERE name = $1)
					AND state <> 'p' AND processed_at < $3
				LIMIT $4
			), deleted AS (
				DELETE FROM {table}
				WHERE ctid = ANY (ARRAY(SELECT ctid FROM picked)) AND state <> 'p' AND processed_at < $3
				RETURNING message_id, consumer_id
			), gone AS (
				DELETE FROM {table}_produced p USING deleted d
				WHERE p.message_id = d.message_id AND p.consumer_id = d.consumer_id
			)
			SELECT (SELECT count(*) FROM picked), (SELECT count(*) FROM deleted), $2::timestamptz`),

		// The cleanup's round starts here, before it deletes anything: every consumer's cleaned_before moves to the
		// cutoff, so that Remembers never reports a consumer remembering further back than it does, and the span
		// of pages holding expired rows is found in one pass over the ranges the BRIN index matches. The walk
		// then reads each page of the span once (spanPagesSQL); a B-tree's batches would each descend from where
		// the last one ended, and a BRIN index cannot return rows in order, which makes batches that search the
		// index again read every page of the batches before them. Rows per page come from the planner's
		// statistics, to size the windows.
		spanSQL: q(`WITH marked AS (
				UPDATE {table}_consumers SET cleaned_before = $2
				WHERE cleaned_before IS NULL OR cleaned_before < $2
			)
			SELECT coalesce((min(ctid)::text::point)[0]::bigint, 0), coalesce((max(ctid)::text::point)[0]::bigint, -1),
				(SELECT CASE WHEN sum(relpages) > 0 AND sum(reltuples) > 0 THEN sum(reltuples) / sum(relpages) ELSE 0 END
				 FROM pg_class WHERE relkind = 'r' AND (oid = to_regclass('{rel}')
					OR oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = to_regclass('{rel}'))))
			FROM {rel} WHERE processed_at < $1 AND state <> 'p'`),

		// One window of the walk: a TID range scan (PostgreSQL 14 and later) reads pages $2 to $3-1 and no others,
		// and deletes at most $4 of their expired rows, with their produced messages, in the batch's own short
		// transaction; the caller repeats a window that gave it $4. The DELETE goes by ctid and repeats the
		// conditions: a row that changed after picked read it (a 'released' row claimed again by lease mode) is
		// rechecked in its newest version, which no longer matches, and left. The counts come back per consumer,
		// for the progress callback and the metrics.
		spanPagesSQL: q(`WITH picked AS (
				SELECT ctid FROM {rel}
				WHERE ctid >= format('(%s,0)', $2::bigint)::tid AND ctid < format('(%s,0)', $3::bigint)::tid
					AND processed_at < $1 AND state <> 'p'
				LIMIT $4
			), deleted AS (
				DELETE FROM {rel}
				WHERE ctid = ANY (ARRAY(SELECT ctid FROM picked)) AND processed_at < $1 AND state <> 'p'
				RETURNING message_id, consumer_id
			), gone AS (
				DELETE FROM {table}_produced p USING deleted d
				WHERE p.message_id = d.message_id AND p.consumer_id = d.consumer_id
			)
			SELECT c.name, count(*) FROM deleted d JOIN {table}_consumers c ON c.id = d.consumer_id GROUP BY c.name`),

		// After the walk, until it deletes nothing: any expired row the walk did not meet (one that a scan in
		// another order placed before the span's start, or that moved there), found through the BRIN index.
		// After a complete walk it reads the ranges once and finds nothing.
		spanRestSQL: q(`WITH picked AS (
				SELECT ctid FROM {rel} WHERE processed_at < $1 AND state <> 'p' LIMIT $2
			), deleted AS (
				DELETE FROM {rel}
				WHERE ctid = ANY (ARRAY(SELECT ctid FROM picked)) AND processed_at < $1 AND state <> 'p'
				RETURNING message_id, consumer_id
			), gone AS (
				DELETE FROM {table}_produced p USING deleted d
				WHERE p.message_id = d.message_id AND p.consumer_id = d.consumer_id
			)
			SELECT c.name, count(*) FROM deleted d JOIN {table}_consumers c ON c.id = d.consumer_id GROUP BY c.name`),

		// A BRIN summary only widens: a claim that lands in a page the cleanup freed stretches the range's
		// summary from the oldest row it ever held to now, and from then on every cleanup reads the range. So the
		// ranges the walk emptied are desummarized and summarized again from what they hold now (milliseconds
		// for a day's ranges). Both take a SHARE UPDATE EXCLUSIVE lock, which conflicts with VACUUM and ANALYZE
		// but not with claims or deletes; the caller sets a short lock_timeout and leaves a range it cannot
		// reach to VACUUM, which summarizes every range without a summary. A range whose rows an older snapshot
		// can still see keeps their values until a later round. The index is found by its kind on the walked
		// relation: a partition's has a name PostgreSQL chose. On a partitioned parent there is none to find (its
		// index is one per partition, and the walk's pages are not one partition's), and VACUUM does it.
		summarizeSQL: q(`WITH brin AS (
				SELECT i.indexrelid AS index FROM pg_index i
				JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
				WHERE i.indrelid = to_regclass('{rel}') AND a.amname = 'brin' AND c.relkind = 'i'
				LIMIT 1
			)
			SELECT count(brin_desummarize_range(brin.index, r)), count(brin_summarize_range(brin.index, r))
			FROM brin, generate_series($1::bigint - $1::bigint % 32, $2::bigint - 1, 32) r`),

		// 'processing' rows whose lease ran out before the cutoff: a holder died and no copy came to take over
		// within the retention window. The cleanup leaves them and reports them. Served by "{table}_processing",
		// which holds only 'processing' rows.
		abandonedSQL: q(`SELECT count(*) FROM {table} WHERE state = 'p' AND locked_until < $1`),

		// How far back each consumer remembers: since it was registered, or since the cutoff of the last cleanup
		// (greatest skips the NULL of a consumer never cleaned). One read of a table of a few rows, so a metrics
		// scrape can afford it; a BRIN index cannot find each consumer's oldest row, and this answers the
		// question the alarm asks more exactly besides (a consumer remembers the quiet hours before its oldest
		// row too). now() comes along so the age is measured on the database's clock.
		memorySQL: q(`SELECT name, greatest(created_at, cleaned_before), now() FROM {table}_consumers ORDER BY name`),

		// Exact counts for an operator, so this one reads the whole table: seconds per ten million rows. It is
		// run by hand (the CLI's stats), never by the Cleaner or a scrape.
		statsConsumersSQL: q(`SELECT c.name, count(*),
				count(*) FILTER (WHERE i.state = 'd'),
				count(*) FILTER (WHERE i.state = 'f'),
				count(*) FILTER (WHERE i.state = 'r'),
				count(*) FILTER (WHERE i.state = 'p' AND i.locked_until > now()),
				count(*) FILTER (WHERE i.state = 'p' AND (i.locked_until IS NULL OR i.locked_until <= now())),
				to_timestamp(min(i.processed_at) FILTER (WHERE i.state <> 'p') * 60::bigint)
			FROM {table} i JOIN {table}_consumers c ON c.id = i.consumer_id
			GROUP BY c.name ORDER BY c.name`),

		// Sizes from the catalog, in bytes. to_regclass resolves the name through search_path as the other
		// queries do, and yields NULL instead of an error when the table is missing. pg_table_size counts the
		// heap with its TOAST, free-space and visibility maps, pg_indexes_size every index.
		statsSizesSQL: `SELECT now(), r IS NOT NULL, coalesce(pg_table_size(r), 0), coalesce(pg_indexes_size(r), 0),
				coalesce(pg_total_relation_size(r), 0)
			FROM to_regclass($1) r`,

		// How many consumer ids the table has in all, and how many its identity has not handed out. The catalog
		// row of the one sequence, not the pg_sequences view: the view reads the last value of every sequence of
		// the database, and fails on one a concurrent DROP TABLE removes. The last value is read only by a role
		// that may read the sequence, as the view does, and is NULL before the first value; the greatest id
		// registered stands in for it then, which misses only ids that INSERTs drew and did not keep.
		statsIDsSQL: q(`SELECT s.seqmax - s.seqmin + 1,
				s.seqmax - coalesce(
					CASE WHEN has_sequence_privilege(s.seqrelid, 'SELECT,USAGE') THEN pg_sequence_last_value(s.seqrelid) END,
					(SELECT max(id) FROM {table}_consumers), s.seqmin - 1)
			FROM pg_sequence s
			WHERE s.seqrelid = pg_get_serial_sequence('{table}_consumers', 'id')::regclass`),

		// Removes one row, with its produced messages, so the message can be applied again. A live lease is kept
		// unless forced: deleting it would let the next copy claim the message and call out while the holder is
		// still calling, and the holder's own writes would then fail as if its lease had been taken over.
		forgetSQL: q(`WITH gone AS (
				DELETE FROM {table}
				WHERE message_id = $2 AND consumer_id = (SELECT id FROM {table}_consumers WHERE name = $1)
					AND (state <> 'p' OR locked_until IS NULL OR locked_until <= now() OR $3)
				RETURNING message_id, consumer_id, state, processed_at, attempts, last_error
			), produced AS (
				DELETE FROM {table}_produced p USING gone g
				WHERE p.message_id = g.message_id AND p.consumer_id = g.consumer_id
				RETURNING 1
			)
			SELECT state::text, to_timestamp(processed_at * 60::bigint), coalesce(attempts, 0),
				coalesce(last_error, ''), EXISTS (SELECT 1 FROM produced)
			FROM gone`),

		// Runs only when forgetSQL deleted nothing, to tell a missing row from a live lease.
		forgetLeftoverSQL: q(`SELECT greatest(0, extract(epoch FROM locked_until - now()) * 1000)::bigint
			FROM {table} WHERE message_id = $2 AND consumer_id = (SELECT id FROM {table}_consumers WHERE name = $1)`),

		// Whether the inbox table exists in the compact layout of migration 007 (its rows carry consumer ids).
		compactSQL: q(`SELECT EXISTS (SELECT 1 FROM pg_attribute
				WHERE attrelid = to_regclass('{table}') AND attname = 'consumer_id' AND NOT attisdropped)`),

		// The versions table of Migrate. Users who apply the SQL files with their own tool have none.
		versionsCreateSQL: q(`CREATE TABLE IF NOT EXISTS "{table}_migrations" (
				version    integer     PRIMARY KEY,
				name       text        NOT NULL,
				applied_at timestamptz NOT NULL DEFAULT now()
			)`),
		versionsReadSQL:   q(`SELECT coalesce(max(version), 0) FROM "{table}_migrations"`),
		versionsRecordSQL: q(`INSERT INTO "{table}_migrations" (version, name) VALUES ($1, $2)`),
	}
}

// nowMinutesSQL is the database clock as processed_at stores it: whole minutes since 1970, rounded down.
const nowMinutesSQL = `(floor(extract(epoch FROM now()) / 60))::integer`

// minutes is t as a cutoff on processed_at: a row of minute m holds times up to the end of that minute, so it is
// older than t only when m is before t's minute.
func minutes(t time.Time) int64 {
	return int64(math.Floor(float64(t.Unix()) / 60))
}

// States are one byte in the table (migrations/007_compact.up.sql); the inbox names them.
var stateCodes = map[string]string{"done": "d", "applying": "a", "processing": "p", "released": "r", "failed": "f"}

func stateCode(name string) string {
	if c, ok := stateCodes[name]; ok {
		return c
	}
	return name
}

func stateName(code string) string {
	for name, c := range stateCodes {
		if c == code {
			return name
		}
	}
	return code
}

func (*postgres) Name() string { return "postgres" }

// Speaks is PostgreSQL (dialect.Speaker).
func (*postgres) Speaks() driver.Server { return driver.PostgreSQL }

// Classify reads the SQLSTATE that PostgreSQL drivers expose (lib/pq's *pq.Error and pgx's *pgconn.PgError both
// have a SQLState method).
func (*postgres) Classify(err error) dialect.ErrorKind {
	code := sqlState(err)
	switch {
	case code == "42P01": // undefined_table
		return dialect.NoTable
	// invalid_text_representation (a uuid column), character_not_in_repertoire, program_limit_exceeded (index row size)
	case code == "22P02" || code == "22021" || code == "54000":
		return dialect.IDRefused
	case code == "2200H": // sequence_generator_limit_exceeded: the consumers' smallint ids are all taken
		return dialect.SequenceExhausted
	// data exceptions, other limits, a check constraint
	case strings.HasPrefix(code, "22") || strings.HasPrefix(code, "54") || code == "23514":
		return dialect.ValueRefused
	case code == "40001": // serialization_failure
		return dialect.SerializationFailure
	case code == "40P01" || code == "55P03": // deadlock_detected, lock_not_available (a lock_timeout)
		return dialect.LockConflict
	case code == "26000" || code == "42P05": // invalid_sql_statement_name, duplicate_prepared_statement
		return dialect.StatementMissing
	// not_null_violation: no statement of the inbox writes NULL to a NOT NULL column but a claim whose check of
	// the consumer's id gave none (claimSQL)
	case code == "23502":
		return dialect.StaleConsumer
	}
	return dialect.Other
}

// sqlState returns the SQLSTATE code of a PostgreSQL error from any driver that exposes one, or "" for other
// errors.
func sqlState(err error) string {
	var e interface{ SQLState() string }
	if errors.As(err, &e) {
		return e.SQLState()
	}
	return ""
}

var _ dialect.Locator = (*postgres)(nil) // a rename would switch the check of a joined transaction's database off

// Locate names the database and tells its server by the server's start time rather than by its address: one
// server reached by two routes (a socket, a pooler, another interface) answers two addresses, but one start time.
// Only a restart changes it, and the inbox asks again when two answers differ.
func (*postgres) Locate(ctx context.Context, q driver.Executor) (string, error) {
	var name, started string
	if err := q.QueryRow(ctx, "SELECT current_database(), pg_postmaster_start_time()::text").Scan(&name, &started); err != nil {
		return "", fmt.Errorf("ask which database this is: %w", err)
	}
	return fmt.Sprintf("database %q of the server started at %s", name, started), nil
}

// JoinsSubscriberTx is true: a deferred constraint trigger (migrations/003_applying_guard.up.sql) fails a commit
// that would keep an unfinished claim.
func (*postgres) JoinsSubscriberTx() bool { return true }

// ConsumerID returns the id of the consumer's name, registering the name when the consumers table lacks it, in one
// short transaction: a lookup, and, for a name it did not find, the registration lock and consumerIDSQL. A name
// that a process without the lock registers at the same moment is found by the next try (consumerIDSQL says why);
// three tries are more than that needs.
func (pg *postgres) ConsumerID(ctx context.Context, pool driver.Pool, table, consumer string) (int, error) {
	q := pg.sql(table)
	for try := 0; try < 3; try++ {
		var id int
		err := inShortTx(ctx, pool, pg, func(tx driver.Tx) error {
			err := tx.QueryRow(ctx, q.consumerFindSQL, consumer).Scan(&id)
			if !errors.Is(err, driver.ErrNoRows) {
				return err
			}
			if _, err := tx.Exec(ctx, consumerLockSQL, consumerLockKey(table)); err != nil {
				return fmt.Errorf("lock the registration of consumers: %w", err)
			}
			return tx.QueryRow(ctx, q.consumerIDSQL, consumer).Scan(&id)
		})
		if err == nil {
			return id, nil
		}
		if !errors.Is(err, driver.ErrNoRows) {
			return 0, err
		}
	}
	return 0, fmt.Errorf("consumer %s was not registered after three tries", consumer)
}

func (pg *postgres) Claim(ctx context.Context, tx driver.Executor, p dialect.ClaimParams) (bool, error) {
	if p.Fresh { // never the first statement of its transaction, so never prepared
		return scanTrue(literally(tx).QueryRow(ctx, pg.sql(p.Table).claimFreshSQL, p.ConsumerID, p.ID, stateCode(p.State)))
	}
	return scanTrue(firstRow(ctx, tx, pg.sql(p.Table).claimSQL, p.ConsumerID, p.ID, stateCode(p.State), p.Consumer))
}

// ClaimAtCommit returns the claim as a plain INSERT, for COMMIT to follow in the same round trip.
func (pg *postgres) ClaimAtCommit(p dialect.ClaimParams) (string, []any) {
	return pg.sql(p.Table).claimAtCommitSQL, []any{p.ConsumerID, p.ID, p.Consumer}
}

// batchKey names the batch claim of one table for one number of IDs.
type batchKey struct {
	table string
	n     int
}

// ClaimBatch is the claim above for many IDs in one statement: one round trip and one index descent per ID
// instead of one statement each. The IDs arrive sorted, and the rows are inserted in the order of the VALUES
// list, so two batches that share IDs take their locks in one order. Each ID is its own parameter, so that the
// statement is the same for every driver (no array types); its text is built once per table and size.
// RETURNING spells the IDs as text, which for a uuid column is the canonical form the inbox already uses.
//
// The consumer's id is checked once, in checked, as claimSQL checks it, and every row takes its consumer_id from
// there: a stale id fails the whole batch before any row is looked for. The rows stay a VALUES list of the INSERT,
// so that each ID parameter takes message_id's type (text or uuid) as in claimSQL; a SELECT from a VALUES list
// would make them text, which a uuid column does not take. The read of the rows the claim found (ReadRows) runs
// after it in its transaction, and trusts the id.
func (pg *postgres) ClaimBatch(ctx context.Context, tx driver.Executor, p dialect.ClaimBatchParams) ([]string, error) {
	key := batchKey{p.Table, len(p.IDs)}
	query, ok := pg.batches.Load(key)
	if !ok {
		query, _ = pg.batches.LoadOrStore(key, "WITH checked AS (SELECT id FROM "+p.Table+"_consumers WHERE id = $1 AND name = $3)"+
			" INSERT INTO "+p.Table+" (consumer_id, message_id, state) VALUES "+
			commaList(len(p.IDs), func(k int) string { return fmt.Sprintf(`((SELECT id FROM checked), $%d, $2::text::"char")`, k+4) })+
			" ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING message_id::text")
	}
	args := make([]any, 0, len(p.IDs)+3)
	args = append(args, p.ConsumerID, stateCode(p.State), p.Consumer)
	for _, id := range p.IDs {
		args = append(args, id)
	}
	rows, err := literally(tx).Query(ctx, query.(string), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	claimed := make([]string, 0, len(p.IDs))
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		claimed = append(claimed, id)
	}
	return claimed, rows.Err()
}

// ReadRows is ReadRow for many IDs in one statement: one round trip and one index probe per ID. Batch mode runs it
// only when its claim found rows there already, for those IDs; in a burst of redelivered copies that is every
// message of the batch, which would otherwise each begin a transaction, claim again and read alone. Each ID is its
// own parameter, as in ClaimBatch, and the text is built once per table and count. It trusts the consumer's id
// as producedSQL does: it runs in the batch's transaction after ClaimBatch, which checked the id.
func (pg *postgres) ReadRows(ctx context.Context, q driver.Executor, p dialect.RowsParams) (map[string]dialect.StoredRow, error) {
	key := batchKey{p.Table, len(p.IDs)}
	query, ok := pg.reads.Load(key)
	if !ok {
		query, _ = pg.reads.LoadOrStore(key, "SELECT i.message_id::text, i.state::text, p.produced FROM "+p.Table+
			" i LEFT JOIN "+p.Table+"_produced p ON p.message_id = i.message_id AND p.consumer_id = i.consumer_id"+
			" WHERE i.consumer_id = $1 AND i.message_id IN ("+
			commaList(len(p.IDs), func(k int) string { return "$" + strconv.Itoa(k+2) })+")")
	}
	args := make([]any, 0, len(p.IDs)+1)
	args = append(args, p.ConsumerID)
	for _, id := range p.IDs {
		args = append(args, id)
	}
	rows, err := literally(q).Query(ctx, query.(string), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	found := make(map[string]dialect.StoredRow, len(p.IDs))
	for rows.Next() {
		var id, state string
		var produced []byte
		if err := rows.Scan(&id, &state, &produced); err != nil {
			return nil, err
		}
		found[id] = dialect.StoredRow{State: stateName(state), Produced: produced}
	}
	return found, rows.Err()
}

// commaList joins item(0) to item(n-1) with commas: the rows or the parameters of a statement built for n IDs.
func commaList(n int, item func(k int) string) string {
	var b strings.Builder
	for k := range n {
		if k > 0 {
			b.WriteString(", ")
		}
		b.WriteString(item(k))
	}
	return b.String()
}

func (pg *postgres) Unclaim(ctx context.Context, tx driver.Executor, p dialect.RowParams) error {
	_, err := literally(tx).Exec(ctx, pg.sql(p.Table).unclaimSQL, p.ConsumerID, p.ID)
	return err
}

func (pg *postgres) ReadRow(ctx context.Context, q driver.Executor, p dialect.RowParams) (state string, produced []byte, err error) {
	err = literally(q).QueryRow(ctx, pg.sql(p.Table).producedSQL, p.ConsumerID, p.ID).Scan(&state, &produced)
	return stateName(state), produced, err
}

func (pg *postgres) SaveProduced(ctx context.Context, tx driver.Executor, p dialect.ProducedParams) error {
	_, err := literally(tx).Exec(ctx, pg.sql(p.Table).saveSQL, p.ConsumerID, p.ID, nullable(p.Produced))
	return err
}

func (pg *postgres) Finish(ctx context.Context, tx driver.Executor, p dialect.ProducedParams) (bool, error) {
	n, err := literally(tx).Exec(ctx, pg.sql(p.Table).finishSQL, p.ConsumerID, p.ID, nullable(p.Produced))
	return n == 1, err
}

func (pg *postgres) TakeOver(ctx context.Context, tx driver.Executor, p dialect.ClaimParams) (bool, error) {
	return scanTrue(literally(tx).QueryRow(ctx, pg.sql(p.Table).takeoverSQL, p.ConsumerID, p.ID, stateCode(p.State)))
}

func (*postgres) Savepoint(ctx context.Context, tx driver.Executor, step dialect.SavepointStep) error {
	query := savepointSQL
	switch step {
	case dialect.RollbackSavepoint:
		query = rollbackSavepointSQL
	case dialect.ReleaseSavepoint:
		query = releaseSavepointSQL
	}
	_, err := tx.Exec(ctx, query)
	return err
}

func (pg *postgres) ClaimLease(ctx context.Context, tx driver.Executor, p dialect.LeaseClaimParams) (dialect.LeaseClaim, error) {
	var c dialect.LeaseClaim
	q := pg.sql(p.Table)
	var takeover sql.NullBool
	err := firstRow(ctx, tx, q.leaseClaimSQL, p.ConsumerID, p.ID, p.Token, p.Lease.Milliseconds(), p.Consumer).Scan(&c.Attempt, &c.LastError, &takeover)
	if err == nil {
		c.Claimed, c.Takeover = true, takeover.Bool
		return c, nil
	}
	if !errors.Is(err, driver.ErrNoRows) {
		return c, err
	}
	var remainingMS int64
	if err := literally(tx).QueryRow(ctx, q.leaseStateSQL, p.ConsumerID, p.ID).Scan(&c.State, &c.Attempt, &remainingMS, &c.Produced); err != nil {
		return c, fmt.Errorf("read lease: %w", err)
	}
	c.State = stateName(c.State)
	c.Remaining = time.Duration(remainingMS) * time.Millisecond
	return c, nil
}

func (pg *postgres) ExtendLease(ctx context.Context, tx driver.Executor, p dialect.LeaseWriteParams) (bool, error) {
	return pg.leaseWrite(ctx, tx, pg.sql(p.Table).leaseExtendSQL, p, p.Arg)
}

func (pg *postgres) ReleaseLease(ctx context.Context, tx driver.Executor, p dialect.LeaseWriteParams) (bool, error) {
	return pg.leaseWrite(ctx, tx, pg.sql(p.Table).leaseReleaseSQL, p, p.Arg)
}

func (pg *postgres) CompleteLease(ctx context.Context, tx driver.Executor, p dialect.LeaseWriteParams) (bool, error) {
	raw, _ := p.Arg.([]byte)
	return pg.leaseWrite(ctx, tx, pg.sql(p.Table).leaseCompleteSQL, p, nullable(raw))
}

func (pg *postgres) FailLease(ctx context.Context, tx driver.Executor, p dialect.LeaseWriteParams) (bool, error) {
	return pg.leaseWrite(ctx, tx, pg.sql(p.Table).leaseFailSQL, p, p.Arg)
}

// leaseWrite runs one of the holder's compare-and-set writes, each of which returns a row when it matched. Each is
// the only statement of its transaction.
func (*postgres) leaseWrite(ctx context.Context, tx driver.Executor, query string, p dialect.LeaseWriteParams, arg any) (bool, error) {
	var one int
	err := firstRow(ctx, tx, query, p.ConsumerID, p.ID, p.Token, arg).Scan(&one)
	if errors.Is(err, driver.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (pg *postgres) TakeLock(ctx context.Context, tx driver.Executor, p dialect.LockParams) (taken bool, cutoff time.Time, err error) {
	err = tx.QueryRow(ctx, pg.sql(p.Table).lockTakeSQL, p.Name, p.Holder, p.Hold.Milliseconds(), p.Back.Microseconds()).Scan(&taken, &cutoff)
	return taken, cutoff, err
}

func (pg *postgres) ExtendLock(ctx context.Context, tx driver.Executor, p dialect.LockParams) (bool, error) {
	var one int
	err := tx.QueryRow(ctx, pg.sql(p.Table).lockExtendSQL, p.Name, p.Holder, p.Hold.Milliseconds()).Scan(&one)
	if errors.Is(err, driver.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (pg *postgres) ReleaseLock(ctx context.Context, tx driver.Executor, p dialect.LockParams) error {
	_, err := tx.Exec(ctx, pg.sql(p.Table).lockReleaseSQL, p.Name, p.Holder)
	return err
}

func (pg *postgres) Consumers(ctx context.Context, tx driver.Executor, table string) ([]string, error) {
	var out []string
	err := dialect.ScanRows(ctx, tx, pg.sql(table).consumersSQL, nil, func(r driver.Rows) error {
		var consumer string
		err := r.Scan(&consumer)
		out = append(out, consumer)
		return err
	})
	return out, err
}

func (pg *postgres) CleanupBatch(ctx context.Context, tx driver.Executor, p dialect.CleanupBatchParams) (b dialect.CleanupBatch, err error) {
	err = tx.QueryRow(ctx, pg.sql(p.Table).cleanupBatchSQL, p.Consumer, p.From, minutes(p.Cutoff), p.Limit).Scan(&b.Picked, &b.Deleted, &b.Next)
	return b, err
}

func (pg *postgres) CleanupSpan(ctx context.Context, tx driver.Executor, p dialect.CleanupPagesParams) (sp dialect.Span, err error) {
	err = tx.QueryRow(ctx, walked(pg.sql(p.Table).spanSQL, p), minutes(p.Cutoff), p.Cutoff).Scan(&sp.First, &sp.Last, &sp.RowsPerPage)
	return sp, err
}

func (pg *postgres) CleanupPages(ctx context.Context, tx driver.Executor, p dialect.CleanupPagesParams) (map[string]int64, error) {
	return scanCounts(ctx, tx, walked(pg.sql(p.Table).spanPagesSQL, p), minutes(p.Cutoff), p.From, p.To, p.Limit)
}

func (pg *postgres) CleanupRest(ctx context.Context, tx driver.Executor, p dialect.CleanupPagesParams) (map[string]int64, error) {
	return scanCounts(ctx, tx, walked(pg.sql(p.Table).spanRestSQL, p), minutes(p.Cutoff), p.Limit)
}

// walked puts the relation the walk cleans into one of its statements: the table, or the partition p names.
func walked(query string, p dialect.CleanupPagesParams) string {
	rel := p.Table
	if p.Partition != "" {
		rel = p.Partition
	}
	return strings.ReplaceAll(query, "{rel}", rel)
}

// summarizeLockTimeout bounds the wait of CleanupSummarize for its lock: an autovacuum of the table holds the
// same one (and PostgreSQL cancels it for us only after deadlock_timeout), and VACUUM summarizes the ranges too.
// The caller takes the error, a LockConflict, for "leave it to VACUUM".
const summarizeLockTimeout = `SET LOCAL lock_timeout = '2s'`

func (pg *postgres) CleanupSummarize(ctx context.Context, tx driver.Executor, p dialect.CleanupPagesParams) error {
	if p.To <= p.From {
		return nil
	}
	if _, err := tx.Exec(ctx, summarizeLockTimeout); err != nil {
		return err
	}
	var desummarized, summarized int64
	return tx.QueryRow(ctx, walked(pg.sql(p.Table).summarizeSQL, p), p.From, p.To).Scan(&desummarized, &summarized)
}

// scanCounts runs a statement that returns (consumer, count) rows.
func scanCounts(ctx context.Context, tx driver.Executor, query string, args ...any) (map[string]int64, error) {
	out := map[string]int64{}
	err := dialect.ScanRows(ctx, tx, query, args, func(r driver.Rows) error {
		var consumer string
		var n int64
		err := r.Scan(&consumer, &n)
		out[consumer] += n
		return err
	})
	return out, err
}

func (pg *postgres) CountAbandoned(ctx context.Context, tx driver.Executor, table string, cutoff time.Time) (n int64, err error) {
	err = tx.QueryRow(ctx, pg.sql(table).abandonedSQL, cutoff).Scan(&n)
	return n, err
}

func (pg *postgres) Remembers(ctx context.Context, tx driver.Executor, table string) ([]dialect.Memory, error) {
	return dialect.ScanMemories(ctx, tx, pg.sql(table).memorySQL)
}

func (pg *postgres) Stats(ctx context.Context, tx driver.Executor, table string) (st dialect.Stats, err error) {
	q := pg.sql(table)
	err = tx.QueryRow(ctx, q.statsSizesSQL, table).Scan(&st.Now, &st.Exists, &st.TableBytes, &st.IndexBytes, &st.TotalBytes)
	if err != nil || !st.Exists {
		return st, err
	}
	st.Consumers, err = dialect.ScanConsumerStats(ctx, tx, q.statsConsumersSQL)
	if err != nil {
		return st, err
	}
	err = tx.QueryRow(ctx, q.statsIDsSQL).Scan(&st.ConsumerIDs, &st.ConsumerIDsLeft)
	if errors.Is(err, driver.ErrNoRows) { // an id column without an identity, made by hand: nothing to count
		err = nil
	}
	return st, err
}

func (pg *postgres) Forget(ctx context.Context, tx driver.Executor, p dialect.ForgetParams) (f dialect.Forgotten, err error) {
	q := pg.sql(p.Table)
	err = tx.QueryRow(ctx, q.forgetSQL, p.Consumer, p.ID, p.Force).
		Scan(&f.State, &f.ProcessedAt, &f.Attempts, &f.LastError, &f.HadProduced)
	if err == nil {
		f.State = stateName(f.State)
		f.Deleted = true
		return f, nil
	}
	if !errors.Is(err, driver.ErrNoRows) {
		return f, err
	}
	var remainingMS int64
	err = tx.QueryRow(ctx, q.forgetLeftoverSQL, p.Consumer, p.ID).Scan(&remainingMS)
	if errors.Is(err, driver.ErrNoRows) {
		return dialect.Forgotten{}, nil
	}
	f = dialect.Forgotten{Held: err == nil, Remaining: time.Duration(remainingMS) * time.Millisecond}
	return f, err
}

func (*postgres) Migrations(table string, idType string) ([]dialect.Migration, error) {
	return migrations(table, IDType(idType))
}

// Migrate runs in one transaction: PostgreSQL's DDL is transactional, so a failed migration or schema check
// leaves nothing behind.
func (pg *postgres) Migrate(ctx context.Context, pool driver.Pool, p dialect.MigrateParams) (from, to int, err error) {
	q := pg.sql(p.Table)
	tx, err := pool.Begin(ctx, driver.TxOptions{})
	if err != nil {
		return 0, 0, fmt.Errorf("inbox: migrate: begin: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, rollbackErr(tx.Rollback(ctx)))
			return
		}
		if err = tx.Commit(ctx); err != nil {
			err = fmt.Errorf("inbox: migrate: commit: %w", err)
		}
	}()
	if _, err := tx.Exec(ctx, migrateLockSQL, migrationLockKey(p.Table)); err != nil {
		return 0, 0, fmt.Errorf("inbox: migrate: lock: %w", err)
	}
	versions := p.Table + "_migrations"
	if _, err := tx.Exec(ctx, q.versionsCreateSQL); err != nil {
		return 0, 0, fmt.Errorf("inbox: migrate: create %s: %w", versions, err)
	}
	if err := tx.QueryRow(ctx, q.versionsReadSQL).Scan(&from); err != nil {
		return 0, 0, fmt.Errorf("inbox: migrate: read %s: %w", versions, err)
	}
	if from == 0 {
		// No versions recorded, but a table in the compact layout: the user's own tool applied the files through
		// 007. The migrations before it were written for the old layout (004 indexes its consumer column, 003 and
		// 005 put back a trigger that reads it), and 007 moves from that layout, so none of them may run again;
		// the check below names whatever such a table lacks.
		var compact bool
		if err := tx.QueryRow(ctx, q.compactSQL).Scan(&compact); err != nil {
			return 0, 0, fmt.Errorf("inbox: migrate: read the layout of %s: %w", p.Table, err)
		}
		if compact {
			from = compactVersion
		}
	}
	to = from
	for _, m := range p.Migrations {
		if m.Version <= from {
			continue
		}
		if _, err := tx.Exec(ctx, m.Up); err != nil {
			return from, to, fmt.Errorf("inbox: migrate: apply %03d_%s to %s: %w", m.Version, m.Name, p.Table, err)
		}
		if _, err := tx.Exec(ctx, q.versionsRecordSQL, m.Version, m.Name); err != nil {
			return from, to, fmt.Errorf("inbox: migrate: record %03d_%s: %w", m.Version, m.Name, err)
		}
		to = m.Version
	}
	if p.Check != nil {
		if err := p.Check(ctx, tx, from, to); err != nil {
			return from, to, err
		}
	}
	return from, to, nil
}

// migrationLockKey derives the advisory lock key from the table name, so migrations of two inbox tables do not wait
// for each other. The prefix keeps the key apart from other users of advisory locks hashing the same name.
func migrationLockKey(table string) int64 {
	h := fnv.New64a()
	h.Write([]byte("watermill-inbox:migrate:" + table))
	return int64(h.Sum64())
}

// consumerLockKey derives the key of the table's registration lock as migrationLockKey derives the migration's.
func consumerLockKey(table string) int64 {
	h := fnv.New64a()
	h.Write([]byte("watermill-inbox:consumers:" + table))
	return int64(h.Sum64())
}

func (*postgres) InspectSchema(ctx context.Context, q driver.Executor, table string) (dialect.SchemaReport, error) {
	r, err := inspectSchema(ctx, q, table)
	return dialect.SchemaReport{IDType: string(r.idType), Missing: r.missing, Absent: r.absent, Wrong: r.wrong, Outdated: r.outdated}, err
}

// scanTrue scans a row that is there when a statement took effect, and nothing when it did not.
func scanTrue(row driver.Row) (bool, error) {
	var ok bool
	err := row.Scan(&ok)
	if errors.Is(err, driver.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// nullable turns no produced messages into SQL NULL, and others into a text parameter for the jsonb column: as
// []byte, drivers send bytea, and those that send it in binary format (lib/pq with binary_parameters=yes) would
// hand jsonb a value without its binary version header.
func nullable(raw []byte) any {
	if raw == nil {
		return nil
	}
	return string(raw)
}

// Statements of managed partitions (partitions.go). The DDL names partitions and bounds that the inbox made or
// read from the catalog, checked against partitionBound before they go into a statement; DDL takes no parameters.
const (
	// The table's kind and the database's clock, in one round trip.
	partitionKindSQL = `SELECT coalesce((SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass($1)), false), now()`

	// Each partition and its bounds as PostgreSQL spells them: DEFAULT, or FOR VALUES FROM ('...') TO ('...'); and,
	// with the bound DETACHED, the tables named as the inbox names its partitions ($2, a LIKE pattern) in the
	// table's schema that are no partition: detached by a pass that stopped before it dropped them.
	partitionsSQL = `SELECT c.relname::text, pg_get_expr(c.relpartbound, c.oid)
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = to_regclass($1)
		UNION ALL
		SELECT c.relname::text, 'DETACHED' FROM pg_class c
		WHERE c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = to_regclass($1))
			AND c.relkind = 'r' AND NOT c.relispartition AND c.relname LIKE $2
		ORDER BY 1`

	// DDL waits at most this long for its locks, and the Cleaner tries again next round: creating a partition
	// locks the default partition, and dropping one the whole table, and every claim that arrives meanwhile
	// queues behind the waiting DDL.
	partitionLockTimeout = `SET LOCAL lock_timeout = '1s'`

	// A DETACH takes the whole table's exclusive lock: every claim that arrives while it waits for the claims in
	// flight waits behind it, so it waits briefly, and the caller tries again (partitions.go).
	detachLockTimeoutSQL = `SET LOCAL lock_timeout = '50ms'`

	// The DETACH holds the table's lock until its commit ends; not waiting for the commit's WAL flush shortens the
	// claims' stall by that flush. A crash that loses the commit leaves the partition attached, and the next round
	// detaches it again.
	detachAsyncCommitSQL = `SET LOCAL synchronous_commit = off`
)

// partitionBound is what a bound of a managed partition looks like: a UUID in canonical text.
var partitionBound = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// partitionRange reads the bounds of a range partition from pg_get_expr's text.
var partitionRange = regexp.MustCompile(`^FOR VALUES FROM \('([^']*)'\) TO \('([^']*)'\)$`)

// PartitionedMigrations makes migration 001 create the inbox table partitioned by ranges of message_id, with a
// default partition. Migration 007 later builds the compact table with the same key and the same partitions.
func (*postgres) PartitionedMigrations(table string, ms []dialect.Migration) ([]dialect.Migration, error) {
	const key = "    PRIMARY KEY (consumer, message_id)\n);"
	out := append([]dialect.Migration(nil), ms...)
	for n, m := range out {
		if m.Version != 1 {
			continue
		}
		at := strings.Index(m.Up, key)
		if at < 0 {
			return nil, fmt.Errorf("inbox: migration 001: cannot find the inbox table's primary key to partition it")
		}
		out[n].Up = m.Up[:at] + "    PRIMARY KEY (consumer, message_id)\n) PARTITION BY RANGE (message_id);\n" +
			`CREATE TABLE IF NOT EXISTS "` + table + `_default" PARTITION OF "` + table + `" DEFAULT;` +
			m.Up[at+len(key):]
		return out, nil
	}
	return nil, fmt.Errorf("inbox: no migration 001 to partition")
}

func (*postgres) Partitions(ctx context.Context, tx driver.Executor, table string) (l dialect.PartitionList, err error) {
	if err := tx.QueryRow(ctx, partitionKindSQL, quoteIdent(table)).Scan(&l.Partitioned, &l.Now); err != nil || !l.Partitioned {
		return l, err
	}
	pattern := strings.ReplaceAll(table, "_", `\_`) + `\_p________t____`
	err = dialect.ScanRows(ctx, tx, partitionsSQL, []any{quoteIdent(table), pattern}, func(r driver.Rows) error {
		var name, bound string
		if err := r.Scan(&name, &bound); err != nil {
			return err
		}
		if bound == "DEFAULT" {
			l.Default = name
		} else if bound == "DETACHED" {
			l.Detached = append(l.Detached, name)
		} else if m := partitionRange.FindStringSubmatch(bound); m != nil {
			l.Ranges = append(l.Ranges, dialect.PartitionParams{Table: table, Name: name, From: m[1], To: m[2]})
		}
		return nil
	})
	return l, err
}

// CreatePartition builds the partition beside the table and attaches it, with the rows of its range moved out of
// the default partition first (IDs of a producer whose clock ran ahead of every partition).
//
// When there is a default partition the table is locked in SHARE mode for the whole of it, which waits for the
// claims in flight and holds new ones until the commit. Attaching alone takes a lock claims do not wait for, and a
// claim routed by the partitions it saw before the commit could then insert a moved ID into the default partition
// again, beside its row in the new one: two claims of one ID, both applied. (Measured: with 40 IDs racing four
// copies each across the boundary of two partitions being created, 1 run in 5 to 20 applied some ID twice.) The
// lock is held for as long as the move and the attach take (BenchmarkPartitionCreation: about 90 ms with 200 rows
// to move; the longest claim beside a round took about as long as without the lock), and lock_timeout bounds the
// wait for it: the Cleaner tries again next round. Without a default partition no claim
// can be routed to a partition that changes, and the lock is not needed.
func (*postgres) CreatePartition(ctx context.Context, tx driver.Executor, p dialect.PartitionParams) error {
	if !partitionBound.MatchString(p.From) || !partitionBound.MatchString(p.To) {
		return fmt.Errorf("inbox: partition %s: bounds %q and %q are not UUIDs", p.Name, p.From, p.To)
	}
	stmts := []string{partitionLockTimeout}
	if p.Default != "" {
		stmts = append(stmts, `LOCK TABLE `+quoteIdent(p.Table)+` IN SHARE MODE`)
	}
	stmts = append(stmts, `CREATE TABLE `+quoteIdent(p.Name)+` (LIKE `+quoteIdent(p.Table)+` INCLUDING DEFAULTS)`)
	if p.Default != "" {
		// The lock first: a claim that inserts into the default partition between the move and the ATTACH would
		// leave it holding a row of the new range, and the ATTACH would fail.
		stmts = append(stmts, `LOCK TABLE `+quoteIdent(p.Default)+` IN ACCESS EXCLUSIVE MODE`, `WITH moved AS (
				DELETE FROM `+quoteIdent(p.Default)+` WHERE message_id >= '`+p.From+`' AND message_id < '`+p.To+`'
				RETURNING processed_at, consumer_id, state, message_id, locked_until, attempts, lease_token, last_error
			)
			INSERT INTO `+quoteIdent(p.Name)+` (processed_at, consumer_id, state, message_id, locked_until, attempts,
				lease_token, last_error)
			SELECT * FROM moved`)
	}
	stmts = append(stmts, `ALTER TABLE `+quoteIdent(p.Table)+` ATTACH PARTITION `+quoteIdent(p.Name)+
		` FOR VALUES FROM ('`+p.From+`') TO ('`+p.To+`')`)
	return execAll(ctx, tx, stmts)
}

// DetachPartition deletes the produced messages of the range (the produced table is not partitioned), then detaches
// the partition: the table's exclusive lock, held for an instant and released at this transaction's commit, before
// the partition's files are dropped. DETACH ... CONCURRENTLY would not lock the table at all, but PostgreSQL refuses
// it while a default partition exists.
func (*postgres) DetachPartition(ctx context.Context, tx driver.Executor, p dialect.PartitionParams) error {
	if !partitionBound.MatchString(p.From) || !partitionBound.MatchString(p.To) {
		return fmt.Errorf("inbox: partition %s: bounds %q and %q are not UUIDs", p.Name, p.From, p.To)
	}
	return execAll(ctx, tx, []string{detachLockTimeoutSQL, detachAsyncCommitSQL,
		`DELETE FROM ` + quoteIdent(p.Table+"_produced") + ` WHERE message_id >= '` + p.From + `' AND message_id < '` + p.To + `'`,
		`ALTER TABLE ` + quoteIdent(p.Table) + ` DETACH PARTITION ` + quoteIdent(p.Name),
	})
}

// DropPartition drops a partition DetachPartition detached, which no claim reaches any more.
func (*postgres) DropPartition(ctx context.Context, tx driver.Executor, p dialect.PartitionParams) error {
	return execAll(ctx, tx, []string{partitionLockTimeout, `DROP TABLE IF EXISTS ` + quoteIdent(p.Name)})
}

func execAll(ctx context.Context, tx driver.Executor, stmts []string) error {
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return err
		}
	}
	return nil
}
