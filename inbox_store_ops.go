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

	cleanupStartSQL   string
	consumersSQL      string
	cleanupBatchSQL   string
	cleanupUnlockSQL  string
	abandonedSQL      string
	memorySQL         string
	statsConsumersSQL string
	statsSizesSQL     string
	forgetSQL         string
	forgetLeftoverSQL string

	lockKey int64 // the cleanup's advisory lock, one per table
}

func newOpsStore(table string) *opsStore {
	q := func(s string) string { return strings.ReplaceAll(s, "{table}", table) }
	return &opsStore{
		table:   table,
		lockKey: cleanupLockKey(table),

		// A session-level try-lock, not the transaction-scoped one Migrate uses: the cleanup must not hold one
		// transaction open across its batches (that would keep every deleted row's lock and pin the xmin horizon
		// for the whole round), and an instance that finds the lock taken skips the round instead of queueing
		// behind it. The lock dies with the connection, so a crashed cleaner cannot leave it held. The cutoff is
		// taken once, from the database clock that wrote processed_at, so every batch of the round agrees on it.
		cleanupStartSQL: `SELECT pg_try_advisory_lock($1), now() - $2 * interval '1 microsecond'`,

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

		cleanupUnlockSQL: `SELECT pg_advisory_unlock($1)`,

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
