package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// migrationFiles are the inbox's versioned schema changes, the same files users may hand to their own migration
// tool. They name the default table; Migrations substitutes the configured one. migrations/uuid and
// migrations/partitioned hold 001 as it creates a table whose event IDs are uuid, and one kept as partitions.
//
//go:embed migrations
var migrationFiles embed.FS

// defaultTable is the table the migration files name, the inbox's default.
const defaultTable = "watermill_inbox"

// compactVersion is the migration that moves the inbox table to the compact layout (007_compact.up.sql).
const compactVersion = 7

// migrateLockSQL makes concurrent migrators of one table take turns. The lock ends with the transaction, so a
// crashed migrator cannot leave it held; PostgreSQL's DDL is transactional, so the whole migration, its record in
// the versions table and the schema check commit or roll back together.
const migrateLockSQL = `SELECT pg_advisory_xact_lock($1)`

// migrateLockTimeoutSQL bounds each wait of the migration's DDL for a table lock. An ALTER TABLE that waits for a
// running handler's transaction holds up, behind it, every claim that comes after it: the whole fleet would ack
// nothing until that handler ended. Waiting at most this long, and failing with lock_not_available (a
// LockConflict), it lets the claims through; the caller tries again after a pause (inbox's migrate).
const migrateLockTimeoutSQL = `SET LOCAL lock_timeout = '50ms'`

// The versions table of Migrate, and what it reads of a table migrated without it.
const (
	// Whether the inbox table exists in the compact layout of migration 007 (its rows carry consumer ids).
	compactSQL = `SELECT EXISTS (SELECT 1 FROM pg_attribute
			WHERE attrelid = to_regclass($1) AND attname = 'consumer_id' AND NOT attisdropped)`

	// The versions table of Migrate. Users who apply the SQL files with their own tool have none.
	versionsCreateSQL = `CREATE TABLE IF NOT EXISTS {table}_migrations (
			version    integer     PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`
	versionsReadSQL   = `SELECT coalesce(max(version), 0) FROM {table}_migrations`
	versionsRecordSQL = `INSERT INTO {table}_migrations (version, name) VALUES ($1, $2)`
)

// Migrations returns the migration files for table; idType "uuid" makes a new table's event IDs uuid, "" and
// "text" keep them text.
func (*postgres) Migrations(table string, idType string) ([]dialect.Migration, error) {
	switch idType {
	case "", "text":
		return dialect.LoadMigrations(migrationFiles, "migrations", defaultTable, table)
	case "uuid":
		return dialect.LoadMigrations(migrationFiles, "migrations", defaultTable, table, "migrations/uuid")
	}
	return nil, fmt.Errorf("inbox: the ID type %q is not supported: want text or uuid", idType)
}

// Migrate runs in one transaction: PostgreSQL's DDL is transactional, so a failed migration or schema check
// leaves nothing behind.
func (pg *postgres) Migrate(ctx context.Context, pool driver.Pool, p dialect.MigrateParams) (from, to int, err error) {
	tx, err := pool.Begin(ctx, driver.TxOptions{})
	if err != nil {
		return 0, 0, fmt.Errorf("inbox: migrate: begin: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, dialect.RollbackErr(tx.Rollback(ctx)))
			return
		}
		if err = tx.Commit(ctx); err != nil {
			err = fmt.Errorf("inbox: migrate: commit: %w", err)
		}
	}()
	if _, err := tx.Exec(ctx, migrateLockSQL, migrationLockKey(p.Table)); err != nil {
		return 0, 0, fmt.Errorf("inbox: migrate: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, migrateLockTimeoutSQL); err != nil {
		return 0, 0, fmt.Errorf("inbox: migrate: set the lock timeout: %w", err)
	}
	versions := p.Table + "_migrations"
	if _, err := tx.Exec(ctx, pg.sql(versionsCreateSQL, p.Table)); err != nil {
		return 0, 0, fmt.Errorf("inbox: migrate: create %s: %w", versions, err)
	}
	if err := tx.QueryRow(ctx, pg.sql(versionsReadSQL, p.Table)).Scan(&from); err != nil {
		return 0, 0, fmt.Errorf("inbox: migrate: read %s: %w", versions, err)
	}
	if from == 0 {
		// No versions recorded, but a table in the compact layout: the user's own tool applied the files through
		// 007. The migrations before it were written for the old layout (004 indexes its consumer column, 003 and
		// 005 put back a trigger that reads it), and 007 moves from that layout, so none of them may run again;
		// the check below names whatever such a table lacks.
		var compact bool
		if err := tx.QueryRow(ctx, compactSQL, quoteIdent(p.Table)).Scan(&compact); err != nil {
			return 0, 0, fmt.Errorf("inbox: migrate: read the layout of %s: %w", p.Table, err)
		}
		if compact {
			from = compactVersion
		}
	}
	to, err = p.Apply(ctx, tx, from, pg.sql(versionsRecordSQL, p.Table), nil, "inbox")
	return from, to, err
}

// migrationLockKey derives the advisory lock key from the table name, so migrations of two inbox tables do not wait
// for each other. The prefix keeps the key apart from other users of advisory locks hashing the same name.
func migrationLockKey(table string) int64 {
	h := fnv.New64a()
	h.Write([]byte("watermill-inbox:migrate:" + table))
	return int64(h.Sum64())
}
