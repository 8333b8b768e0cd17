package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// An operator's statements: the table's counts and sizes, and the removal of one row.
const (
	// Exact counts for an operator, so this one reads the whole table: seconds per ten million rows. It is
	// run by hand (the CLI's stats), never by the Cleaner or a scrape.
	statsConsumersSQL = `SELECT c.name, count(*),
			count(*) FILTER (WHERE i.state = 'd'),
			count(*) FILTER (WHERE i.state = 'f'),
			count(*) FILTER (WHERE i.state = 'r'),
			count(*) FILTER (WHERE i.state = 'p' AND i.locked_until > now()),
			count(*) FILTER (WHERE i.state = 'p' AND (i.locked_until IS NULL OR i.locked_until <= now())),
			to_timestamp(min(i.processed_at) FILTER (WHERE i.state <> 'p') * 60::bigint)
		FROM {table} i JOIN {table}_consumers c ON c.id = i.consumer_id
		GROUP BY c.name ORDER BY c.name`

	// Sizes from the catalog, in bytes. to_regclass resolves the name through search_path as the other
	// queries do, and yields NULL instead of an error when the table is missing. pg_table_size counts the
	// heap with its TOAST, free-space and visibility maps, pg_indexes_size every index.
	statsSizesSQL = `SELECT now(), r IS NOT NULL, coalesce(pg_table_size(r), 0), coalesce(pg_indexes_size(r), 0),
			coalesce(pg_total_relation_size(r), 0)
		FROM to_regclass($1) r`

	// How many consumer ids the table has in all, and how many its identity has not handed out. The catalog
	// row of the one sequence, not the pg_sequences view: the view reads the last value of every sequence of
	// the database, and fails on one a concurrent DROP TABLE removes. The last value is read only by a role
	// that may read the sequence, as the view does, and is NULL before the first value; the greatest id
	// registered stands in for it then, which misses only ids that INSERTs drew and did not keep.
	statsIDsSQL = `SELECT s.seqmax - s.seqmin + 1,
			s.seqmax - coalesce(
				CASE WHEN has_sequence_privilege(s.seqrelid, 'SELECT,USAGE') THEN pg_sequence_last_value(s.seqrelid) END,
				(SELECT max(id) FROM {table}_consumers), s.seqmin - 1)
		FROM pg_sequence s
		WHERE s.seqrelid = pg_get_serial_sequence($1, 'id')::regclass`

	// Removes one row, with its produced messages, so the message can be applied again. A live lease is kept
	// unless forced: deleting it would let the next copy claim the message and call out while the holder is
	// still calling, and the holder's own writes would then fail as if its lease had been taken over.
	forgetSQL = `WITH gone AS (
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
		FROM gone`

	// Runs only when forgetSQL deleted nothing, to tell a missing row from a live lease.
	forgetLeftoverSQL = `SELECT greatest(0, extract(epoch FROM locked_until - now()) * 1000)::bigint
		FROM {table} WHERE message_id = $2 AND consumer_id = (SELECT id FROM {table}_consumers WHERE name = $1)`
)

func (pg *postgres) Stats(ctx context.Context, tx driver.Executor, table string) (st dialect.Stats, err error) {
	err = tx.QueryRow(ctx, statsSizesSQL, table).Scan(&st.Now, &st.Exists, &st.TableBytes, &st.IndexBytes, &st.TotalBytes)
	if err != nil || !st.Exists {
		return st, err
	}
	st.Consumers, err = dialect.ScanConsumerStats(ctx, tx, pg.sql(statsConsumersSQL, table))
	if err != nil {
		return st, err
	}
	err = tx.QueryRow(ctx, pg.sql(statsIDsSQL, table), quoteIdent(table+"_consumers")).Scan(&st.ConsumerIDs, &st.ConsumerIDsLeft)
	if errors.Is(err, driver.ErrNoRows) { // an id column without an identity, made by hand: nothing to count
		err = nil
	}
	return st, err
}

func (pg *postgres) Forget(ctx context.Context, tx driver.Executor, p dialect.ForgetParams) (f dialect.Forgotten, err error) {
	err = tx.QueryRow(ctx, pg.sql(forgetSQL, p.Table), p.Consumer, p.ID, p.Force).
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
	err = tx.QueryRow(ctx, pg.sql(forgetLeftoverSQL, p.Table), p.Consumer, p.ID).Scan(&remainingMS)
	if errors.Is(err, driver.ErrNoRows) {
		return dialect.Forgotten{}, nil
	}
	f = dialect.Forgotten{Held: err == nil, Remaining: time.Duration(remainingMS) * time.Millisecond}
	return f, err
}
