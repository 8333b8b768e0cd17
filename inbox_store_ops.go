package inbox

import "strings"

// opsStore holds every query of retention and operations: the cleanup, the retention alarm, stats and forget.
// They run from a cron job, a background Cleaner, a metrics scrape or an operator's terminal, never on a message's
// path, so they live apart from store; like store's, each is formatted once for the validated table name.
//
// They lean on the indexes of migrations/004_processed_at_index.up.sql: "{table}_processed_at" on
// (consumer, processed_at) for the rows the cleanup may delete, and "{table}_processing" for 'processing' rows.
type opsStore struct {
	table string

	lockTakeSQL       string
	lockExtendSQL     string
	lockReleaseSQL    string
	consumersSQL      string
	cleanupBatchSQL   string
	abandonedSQL      string
	memorySQL         string
	statsConsumersSQL string
	statsSizesSQL     string
	forgetSQL         string
	forgetLeftoverSQL string
}

// cleanupLockName is the cleanup's row in the locks table: one cleanup of the table at a time.
const cleanupLockName = "cleanup"

func newOpsStore(table string) *opsStore {
	q := func(s string) string { return strings.ReplaceAll(s, "{table}", table) }
	return &opsStore{
		table: table,

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

		// The distinct consumers, one primary-key probe each (a "loose index scan"): PostgreSQL 15 has no skip
		// scan, and SELECT DISTINCT would read every row. Consumers are few; rows are many.
		consumersSQL: q(`WITH RECURSIVE c AS (
				(SELECT consumer FROM {table} ORDER BY consumer LIMIT 1)
				UNION ALL
				SELECT (SELECT t.consumer FROM {table} t WHERE t.consumer > c.consumer ORDER BY t.consumer LIMIT 1)
				FROM c WHERE c.consumer IS NOT NULL
			)
			SELECT consumer FROM c WHERE consumer IS NOT NULL`),

		// One bounded batch of one consumer's expired rows, in its own short transaction: the locks it takes and
		// the WAL it writes are bounded by $4 rows, and a claim is never blocked (it inserts new keys; the deleted
		// rows are old ones). picked walks "{table}_processed_at" in order, from where the previous batch ended ($2,
		// inclusive because rows of one transaction share a processed_at), so no batch steps again over the index
		// entries of rows already deleted but not yet vacuumed; without that bound a long cleanup rereads a growing
		// prefix of dead entries on every batch. The DELETE goes by ctid (a TID scan, no second index lookup) and
		// repeats the conditions: if a row changed after picked read it (a 'released' row claimed again by lease
		// mode), PostgreSQL rechecks the newest version, whose ctid and state no longer match, and leaves it.
		// 'processing' rows are never deleted, live or not: they are unfinished messages (Cleanup says more).
		// picked is read twice, so PostgreSQL materializes it once. The caller stops when picked is empty.
		cleanupBatchSQL: q(`WITH picked AS (
				SELECT ctid, processed_at FROM {table}
				WHERE consumer = $1 AND state <> 'processing' AND processed_at >= $2 AND processed_at < $3
				ORDER BY processed_at
				LIMIT $4
			), deleted AS (
				DELETE FROM {table}
				WHERE ctid = ANY (ARRAY(SELECT ctid FROM picked))
					AND consumer = $1 AND state <> 'processing' AND processed_at < $3
				RETURNING 1
			)
			SELECT (SELECT count(*) FROM picked), (SELECT count(*) FROM deleted),
				coalesce((SELECT max(processed_at) FROM picked), $2)`),

		// 'processing' rows whose lease ran out before the cutoff: a holder died and no copy came to take over
		// within the retention window. The cleanup leaves them and reports them. Served by "{table}_processing",
		// which holds only 'processing' rows.
		abandonedSQL: q(`SELECT count(*) FROM {table} WHERE state = 'processing' AND locked_until < $1`),

		// How far back each consumer remembers: its oldest row that is not 'processing' (an abandoned lease would
		// otherwise make it look as if the consumer remembered forever), one probe of "{table}_processed_at" per
		// consumer, so a metrics scrape can afford it. now() comes along so the age is measured on the clock
		// that wrote processed_at.
		memorySQL: q(`WITH RECURSIVE c AS (
				(SELECT consumer FROM {table} ORDER BY consumer LIMIT 1)
				UNION ALL
				SELECT (SELECT t.consumer FROM {table} t WHERE t.consumer > c.consumer ORDER BY t.consumer LIMIT 1)
				FROM c WHERE c.consumer IS NOT NULL
			)
			SELECT c.consumer, o.oldest, now()
			FROM c CROSS JOIN LATERAL (
				SELECT min(processed_at) AS oldest FROM {table} t
				WHERE t.consumer = c.consumer AND t.state <> 'processing'
			) o
			WHERE c.consumer IS NOT NULL AND o.oldest IS NOT NULL
			ORDER BY c.consumer`),

		// Exact counts for an operator, so this one reads the whole table: seconds per ten million rows. It is
		// run by hand (the CLI's stats), never by the Cleaner or a scrape.
		statsConsumersSQL: q(`SELECT consumer, count(*),
				count(*) FILTER (WHERE state = 'done'),
				count(*) FILTER (WHERE state = 'failed'),
				count(*) FILTER (WHERE state = 'released'),
				count(*) FILTER (WHERE state = 'processing' AND locked_until > now()),
				count(*) FILTER (WHERE state = 'processing' AND (locked_until IS NULL OR locked_until <= now())),
				min(processed_at) FILTER (WHERE state <> 'processing')
			FROM {table} GROUP BY consumer ORDER BY consumer`),

		// Sizes from the catalog, in bytes. to_regclass resolves the name through search_path as the other
		// queries do, and yields NULL instead of an error when the table is missing. pg_table_size counts the
		// heap with its TOAST, free-space and visibility maps, pg_indexes_size every index.
		statsSizesSQL: `SELECT now(), r IS NOT NULL, coalesce(pg_table_size(r), 0), coalesce(pg_indexes_size(r), 0),
				coalesce(pg_total_relation_size(r), 0)
			FROM to_regclass($1) r`,

		// Removes one row so the message can be applied again. A live lease is kept unless forced: deleting it
		// would let the next copy claim the message and call out while the holder is still calling, and the
		// holder's own writes would then fail as if its lease had been taken over.
		forgetSQL: q(`DELETE FROM {table}
			WHERE consumer = $1 AND message_id = $2
				AND (state <> 'processing' OR locked_until IS NULL OR locked_until <= now() OR $3)
			RETURNING state, processed_at, coalesce(attempts, 0), coalesce(last_error, ''),
				EXISTS (SELECT 1 FROM {table}_produced p WHERE p.consumer = $1 AND p.message_id = $2)`),

		// Runs only when forgetSQL deleted nothing, to tell a missing row from a live lease.
		forgetLeftoverSQL: q(`SELECT greatest(0, extract(epoch FROM locked_until - now()) * 1000)::bigint
			FROM {table} WHERE consumer = $1 AND message_id = $2`),
	}
}
