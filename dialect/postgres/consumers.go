package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// The consumers table (migrations/007_compact.up.sql): each consumer's name, once, and the id its rows carry.
const (
	// A consumer's id, when its name is registered: what nearly every process start finds, with no lock. Its
	// check of the session's encoding (sessionUTF8SQL), a condition on no column, runs before the lookup (PostgreSQL
	// plans it as a one-time filter): a name read in another encoding would be looked up, and registered, as
	// another name.
	consumerFindSQL = `SELECT id FROM {table}_consumers WHERE name = $1 AND 1 / {utf8} = 1`

	// Registers a name that consumerFindSQL did not find, and returns its id (migrations/007_compact.up.sql),
	// once per consumer and process. The ids are smallints, 32,767 per table, and an INSERT draws the next one
	// from the identity sequence for every row it tries, conflicting or not; so it runs only after
	// consumerLockSQL, which makes the registrations of one table take turns, and only for a name the statement
	// finds missing. It is a statement of its own after the lock, so that under READ COMMITTED its snapshot,
	// taken once the lock is held, sees the row of any registration that held the lock before: a process that
	// lost the race finds that row and inserts nothing. ON CONFLICT stays for registrations that skip the
	// lock (a process of an older version): one of those may insert the name between this statement's
	// snapshot and its INSERT, which then returns no row, and the caller runs it again.
	consumerIDSQL = `WITH known AS (
			SELECT id FROM {table}_consumers WHERE name = $1
		), registered AS (
			INSERT INTO {table}_consumers (name) SELECT $1 WHERE NOT EXISTS (SELECT 1 FROM known) AND 1 / {utf8} = 1
			ON CONFLICT (name) DO NOTHING RETURNING id
		)
		SELECT id FROM known UNION ALL SELECT id FROM registered`

	// The consumers table lists every consumer once: the rows carry only ids.
	consumersSQL = `SELECT name FROM {table}_consumers ORDER BY name`

	// How far back each consumer remembers: since it was registered, or since the cutoff of the last cleanup
	// (greatest skips the NULL of a consumer never cleaned). One read of a table of a few rows, so a metrics
	// scrape can afford it; a BRIN index cannot find each consumer's oldest row, and this answers the
	// question the alarm asks more exactly besides (a consumer remembers the quiet hours before its oldest
	// row too). now() comes along so the age is measured on the database's clock.
	memorySQL = `SELECT name, greatest(created_at, cleaned_before), now() FROM {table}_consumers ORDER BY name`
)

// consumerLockSQL makes the registrations of new consumer names in one table take turns (consumerIDSQL says why).
// A transaction-level advisory lock: it ends with the short registration transaction, whatever becomes of it, and
// stays on one server connection behind a pooler in transaction mode.
const consumerLockSQL = `SELECT pg_advisory_xact_lock($1)`

// ConsumerID returns the id of the consumer's name, registering the name when the consumers table lacks it, in one
// short transaction: a lookup, and, for a name it did not find, the registration lock and consumerIDSQL. A name
// that a process without the lock registers at the same moment is found by the next try (consumerIDSQL says why);
// three tries are more than that needs.
func (pg *postgres) ConsumerID(ctx context.Context, pool driver.Pool, table, consumer string) (int, error) {
	for try := 0; try < 3; try++ {
		var id int
		err := dialect.InShortTx(ctx, pool, pg, func(tx driver.Tx) error {
			err := tx.QueryRow(ctx, pg.sql(consumerFindSQL, table), consumer).Scan(&id)
			if !errors.Is(err, driver.ErrNoRows) {
				return err
			}
			if _, err := tx.Exec(ctx, consumerLockSQL, consumerLockKey(table)); err != nil {
				return fmt.Errorf("lock the registration of consumers: %w", err)
			}
			return tx.QueryRow(ctx, pg.sql(consumerIDSQL, table), consumer).Scan(&id)
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

// consumerLockKey derives the key of the table's registration lock as migrationLockKey derives the migration's.
func consumerLockKey(table string) int64 {
	h := fnv.New64a()
	h.Write([]byte("watermill-inbox:consumers:" + table))
	return int64(h.Sum64())
}

func (pg *postgres) Consumers(ctx context.Context, tx driver.Executor, table string) ([]string, error) {
	var out []string
	err := dialect.ScanRows(ctx, tx, pg.sql(consumersSQL, table), nil, func(r driver.Rows) error {
		var consumer string
		err := r.Scan(&consumer)
		out = append(out, consumer)
		return err
	})
	return out, err
}

func (pg *postgres) Remembers(ctx context.Context, tx driver.Executor, table string) ([]dialect.Memory, error) {
	return dialect.ScanMemories(ctx, tx, pg.sql(memorySQL, table))
}
