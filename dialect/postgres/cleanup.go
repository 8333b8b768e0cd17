package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// The cleanup's lock and its deletes. The walk's statements name the relation they clean {rel}: the inbox table,
// or the partition a walk of a partitioned table cleans.
const (
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
	lockTakeSQL = `WITH taken AS (
			INSERT INTO {table}_locks AS l (name, holder, held_until)
			VALUES ($1, $2, now() + $3 * interval '1 millisecond')
			ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, held_until = excluded.held_until
			WHERE l.held_until <= now()
			RETURNING 1
		)
		SELECT EXISTS (SELECT 1 FROM taken), now() - $4 * interval '1 microsecond'`

	// Runs in each batch's transaction, before its DELETE: a compare-and-set on the holder, so a cleaner
	// whose time ran out (a pause longer than its hold, a stalled process) learns that it lost the lock
	// before it deletes anything, and the row lock it takes keeps a taker waiting until the batch commits.
	lockExtendSQL = `UPDATE {table}_locks SET held_until = now() + $3 * interval '1 millisecond'
		WHERE name = $1 AND holder = $2
		RETURNING 1`

	// Only the holder frees the lock; one whose time ran out finds another holder's row and leaves it.
	lockReleaseSQL = `DELETE FROM {table}_locks WHERE name = $1 AND holder = $2`

	// One bounded batch of one consumer's expired rows. The cleanup itself walks the table's pages for all
	// consumers at once (spanPagesSQL below); this serves dialect.Maintenance's per-consumer contract. Rows of a
	// minute are deleted only once the whole minute lies before the cutoff ($3, in minutes, rounded down), so
	// no row goes early.
	cleanupBatchSQL = `WITH picked AS (
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
		SELECT (SELECT count(*) FROM picked), (SELECT count(*) FROM deleted), $2::timestamptz`

	// The cleanup's round starts here, before it deletes anything: every consumer's cleaned_before moves to the
	// cutoff, so that Remembers never reports a consumer remembering further back than it does, and the span
	// of pages holding expired rows is found in one pass over the ranges the BRIN index matches. The walk
	// then reads each page of the span once (spanPagesSQL); a B-tree's batches would each descend from where
	// the last one ended, and a BRIN index cannot return rows in order, which makes batches that search the
	// index again read every page of the batches before them. Rows per page come from the planner's
	// statistics, to size the windows.
	spanSQL = `WITH marked AS (
			UPDATE {table}_consumers SET cleaned_before = $2
			WHERE cleaned_before IS NULL OR cleaned_before < $2
		)
		SELECT coalesce((min(ctid)::text::point)[0]::bigint, 0), coalesce((max(ctid)::text::point)[0]::bigint, -1),
			(SELECT CASE WHEN sum(relpages) > 0 AND sum(reltuples) > 0 THEN sum(reltuples) / sum(relpages) ELSE 0 END
			 FROM pg_class WHERE relkind = 'r' AND (oid = to_regclass($3)
				OR oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = to_regclass($3))))
		FROM {rel} WHERE processed_at < $1 AND state <> 'p'`

	// One window of the walk: a TID range scan (PostgreSQL 14 and later) reads pages $2 to $3-1 and no others,
	// and deletes at most $4 of their expired rows, with their produced messages, in the batch's own short
	// transaction; the caller repeats a window that gave it $4. The DELETE goes by ctid and repeats the
	// conditions: a row that changed after picked read it (a 'released' row claimed again by lease mode) is
	// rechecked in its newest version, which no longer matches, and left. The counts come back per consumer,
	// for the progress callback and the metrics.
	spanPagesSQL = `WITH picked AS (
			SELECT ctid FROM {rel}
			WHERE ctid >= format('(%s,0)', $2::bigint)::tid AND ctid < format('(%s,0)', $3::bigint)::tid
				AND processed_at < $1 AND state <> 'p'
			LIMIT $4
		` + deletePickedSQL

	// After the walk, until it deletes nothing: any expired row the walk did not meet (one that a scan in
	// another order placed before the span's start, or that moved there), found through the BRIN index.
	// After a complete walk it reads the ranges once and finds nothing.
	spanRestSQL = `WITH picked AS (
			SELECT ctid FROM {rel} WHERE processed_at < $1 AND state <> 'p' LIMIT $2
		` + deletePickedSQL

	// The tail of both statements above: the rows picked, deleted again by ctid with the conditions repeated,
	// their produced messages with them, and the counts per consumer.
	deletePickedSQL = `), deleted AS (
			DELETE FROM {rel}
			WHERE ctid = ANY (ARRAY(SELECT ctid FROM picked)) AND processed_at < $1 AND state <> 'p'
			RETURNING message_id, consumer_id
		), gone AS (
			DELETE FROM {table}_produced p USING deleted d
			WHERE p.message_id = d.message_id AND p.consumer_id = d.consumer_id
		)
		SELECT c.name, count(*) FROM deleted d JOIN {table}_consumers c ON c.id = d.consumer_id GROUP BY c.name`

	// A BRIN summary only widens: a claim that lands in a page the cleanup freed stretches the range's
	// summary from the oldest row it ever held to now, and from then on every cleanup reads the range. So the
	// ranges the walk emptied are desummarized and summarized again from what they hold now (milliseconds
	// for a day's ranges). Both take a SHARE UPDATE EXCLUSIVE lock, which conflicts with VACUUM and ANALYZE
	// but not with claims or deletes; the caller sets a short lock_timeout and leaves a range it cannot
	// reach to VACUUM, which summarizes every range without a summary. A range whose rows an older snapshot
	// can still see keeps their values until a later round. The index is found by its kind on the walked
	// relation: a partition's has a name PostgreSQL chose. On a partitioned parent there is none to find (its
	// index is one per partition, and the walk's pages are not one partition's), and VACUUM does it.
	summarizeSQL = `WITH brin AS (
			SELECT i.indexrelid AS index FROM pg_index i
			JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
			WHERE i.indrelid = to_regclass($3) AND a.amname = 'brin' AND c.relkind = 'i'
			LIMIT 1
		)
		SELECT count(brin_desummarize_range(brin.index, r)), count(brin_summarize_range(brin.index, r))
		FROM brin, generate_series($1::bigint - $1::bigint % 32, $2::bigint - 1, 32) r`

	// 'processing' rows whose lease ran out before the cutoff: a holder died and no copy came to take over
	// within the retention window. The cleanup leaves them and reports them. Served by "{table}_processing",
	// which holds only 'processing' rows.
	abandonedSQL = `SELECT count(*) FROM {table} WHERE state = 'p' AND locked_until < $1`
)

// summarizeLockTimeout bounds the wait of CleanupSummarize for its lock: an autovacuum of the table holds the
// same one (and PostgreSQL cancels it for us only after deadlock_timeout), and VACUUM summarizes the ranges too.
// The caller takes the error, a LockConflict, for "leave it to VACUUM".
const summarizeLockTimeout = `SET LOCAL lock_timeout = '2s'`

func (pg *postgres) TakeLock(ctx context.Context, tx driver.Executor, p dialect.LockParams) (taken bool, cutoff time.Time, err error) {
	err = tx.QueryRow(ctx, pg.sql(lockTakeSQL, p.Table), p.Name, p.Holder, p.Hold.Milliseconds(), p.Back.Microseconds()).
		Scan(&taken, &cutoff)
	return taken, cutoff, err
}

func (pg *postgres) ExtendLock(ctx context.Context, tx driver.Executor, p dialect.LockParams) (bool, error) {
	var one int
	err := tx.QueryRow(ctx, pg.sql(lockExtendSQL, p.Table), p.Name, p.Holder, p.Hold.Milliseconds()).Scan(&one)
	if errors.Is(err, driver.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (pg *postgres) ReleaseLock(ctx context.Context, tx driver.Executor, p dialect.LockParams) error {
	_, err := tx.Exec(ctx, pg.sql(lockReleaseSQL, p.Table), p.Name, p.Holder)
	return err
}

func (pg *postgres) CleanupBatch(ctx context.Context, tx driver.Executor, p dialect.CleanupBatchParams) (b dialect.CleanupBatch, err error) {
	err = tx.QueryRow(ctx, pg.sql(cleanupBatchSQL, p.Table), p.Consumer, p.From, minutes(p.Cutoff), p.Limit).
		Scan(&b.Picked, &b.Deleted, &b.Next)
	return b, err
}

func (pg *postgres) CleanupSpan(ctx context.Context, tx driver.Executor, p dialect.CleanupPagesParams) (sp dialect.Span, err error) {
	err = tx.QueryRow(ctx, pg.walked(spanSQL, p), minutes(p.Cutoff), p.Cutoff, quoteIdent(walkedRel(p))).Scan(&sp.First, &sp.Last, &sp.RowsPerPage)
	return sp, err
}

func (pg *postgres) CleanupPages(ctx context.Context, tx driver.Executor, p dialect.CleanupPagesParams) (map[string]int64, error) {
	return scanCounts(ctx, tx, pg.walked(spanPagesSQL, p), minutes(p.Cutoff), p.From, p.To, p.Limit)
}

func (pg *postgres) CleanupRest(ctx context.Context, tx driver.Executor, p dialect.CleanupPagesParams) (map[string]int64, error) {
	return scanCounts(ctx, tx, pg.walked(spanRestSQL, p), minutes(p.Cutoff), p.Limit)
}

func (pg *postgres) CleanupSummarize(ctx context.Context, tx driver.Executor, p dialect.CleanupPagesParams) error {
	if p.To <= p.From {
		return nil
	}
	if _, err := tx.Exec(ctx, summarizeLockTimeout); err != nil {
		return err
	}
	var desummarized, summarized int64
	return tx.QueryRow(ctx, pg.walked(summarizeSQL, p), p.From, p.To, quoteIdent(walkedRel(p))).Scan(&desummarized, &summarized)
}

// walked expands one of the walk's statements for the relation it cleans: the table, or the partition p names.
func (pg *postgres) walked(template string, p dialect.CleanupPagesParams) string {
	return pg.expand(template, p.Table, walkedRel(p), idAsText)
}

// walkedRel names the relation a walk cleans: the table, or the partition p names. The walk's statements take it
// as {rel}, and, quoted, as the parameter ($3) that the catalog reads it by.
func walkedRel(p dialect.CleanupPagesParams) string {
	if p.Partition != "" {
		return p.Partition
	}
	return p.Table
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
	err = tx.QueryRow(ctx, pg.sql(abandonedSQL, table), cutoff).Scan(&n)
	return n, err
}
