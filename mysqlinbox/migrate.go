package mysqlinbox

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// migrationFiles are the MySQL schema changes, the same files users may hand to their own migration tool. They
// name the default table, watermill_inbox; Migrate substitutes the configured one, as on PostgreSQL.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

const defaultTable = "watermill_inbox"

// Migrations returns the MySQL schema changes for table. MySQL stores every ID as VARBINARY, so "uuid" is refused.
func (*mysqlDialect) Migrations(table string, idType string) ([]dialect.Migration, error) {
	if idType != "" && idType != "text" {
		return nil, fmt.Errorf("mysqlinbox: the ID type %q is not supported: MySQL stores every event ID as VARBINARY", idType)
	}
	// The files name the table only inside backquotes, so the name, its backquotes doubled, stays one identifier.
	return dialect.LoadMigrations(migrationFiles, "migrations", defaultTable, strings.ReplaceAll(table, "`", "``"))
}

// statements splits a migration into its statements, for a connection that runs one statement at a time (the
// driver's default, without multiStatements). Statements end with a semicolon at the end of a line.
func statements(script string) []string {
	var out []string
	for _, chunk := range strings.Split(script, ";\n") {
		code := false
		for _, line := range strings.Split(chunk, "\n") {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "--") {
				code = true
			}
		}
		if code {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(chunk), ";"))
		}
	}
	return out
}

// migrateLockWait bounds how long Migrate waits for another process's migration of the same table.
const migrateLockWait = time.Minute

// Migrate applies the migrations not applied yet. MySQL commits every DDL statement on its own (an implicit
// commit), so no transaction can hold a migration together, nor a row lock across it, nor undo a half-applied one.
// Instead:
//
//   - The turn-taking is a named lock, GET_LOCK, which belongs to the session, not to a transaction, and so
//     survives the implicit commits. It is taken and released on the one connection that runs every statement
//     (a transaction that is begun only to pin a connection), and it ends with that session: a migrator that
//     crashes or loses its connection cannot leave it held. The transaction is begun without the caller's
//     context, so that database/sql does not hand the connection back to the pool on a cancellation with the
//     lock still held; the lock is released before the connection goes back, and when the release itself
//     fails the driver discards the broken connection, and the session's end frees the lock.
//   - Every statement of a migration is safe to run again (CREATE TABLE IF NOT EXISTS), and a version is
//     recorded only after all of its statements ran: a migration that failed half-way is run again whole.
//   - The check runs after the tables exist; when it fails, what was created stays, and the error names each
//     difference.
func (m *mysqlDialect) Migrate(ctx context.Context, pool driver.Pool, p dialect.MigrateParams) (from, to int, err error) {
	q := m.sql(p.Table)
	conn, err := pool.Begin(context.WithoutCancel(ctx), driver.TxOptions{})
	if err != nil {
		return 0, 0, fmt.Errorf("mysqlinbox: migrate: begin: %w", err)
	}
	name := lockName(p.Table)
	var got sql.NullInt64
	if err := conn.QueryRow(ctx, q.lockGet, name, int64(migrateLockWait.Seconds())).Scan(&got); err != nil {
		return 0, 0, errors.Join(fmt.Errorf("mysqlinbox: migrate: lock: %w", err), conn.Rollback(ctx))
	}
	if got.Int64 != 1 {
		return 0, 0, errors.Join(fmt.Errorf("mysqlinbox: migrate: lock: another migration of %s held it for %s", p.Table, migrateLockWait),
			conn.Rollback(ctx))
	}
	defer func() {
		bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, rerr := conn.Exec(bg, q.lockWaitDefault); rerr != nil {
			err = errors.Join(err, fmt.Errorf("mysqlinbox: migrate: reset the lock wait timeout: %w", rerr))
		}
		var released sql.NullInt64
		if rerr := conn.QueryRow(bg, q.lockFree, name).Scan(&released); rerr != nil {
			err = errors.Join(err, fmt.Errorf("mysqlinbox: migrate: unlock: %w", rerr))
		}
		if cerr := conn.Commit(bg); cerr != nil && !errors.Is(cerr, driver.ErrTxDone) {
			err = errors.Join(err, fmt.Errorf("mysqlinbox: migrate: end: %w", cerr))
		}
	}()

	// A DDL statement that waits for a metadata lock a running handler's transaction holds makes every claim
	// after it wait too, so the fleet would ack nothing until that handler ended: the migration's statements do
	// not wait (MariaDB; MySQL's least wait is a second), and fail with a lock wait timeout (a LockConflict),
	// which the caller tries again after a pause (inbox's migrate). Every statement is safe to run again.
	if _, err := conn.Exec(ctx, q.lockWaitNone); err != nil {
		return 0, 0, fmt.Errorf("mysqlinbox: migrate: set the lock wait timeout: %w", err)
	}
	versions := p.Table + "_migrations"
	if _, err := conn.Exec(ctx, q.versionsCreate); err != nil {
		return 0, 0, fmt.Errorf("mysqlinbox: migrate: create %s: %w", versions, err)
	}
	if err := conn.QueryRow(ctx, q.versionsRead).Scan(&from); err != nil {
		return 0, 0, fmt.Errorf("mysqlinbox: migrate: read %s: %w", versions, err)
	}
	to, err = p.Apply(ctx, conn, from, q.versionsRecord, statements, "mysqlinbox")
	return from, to, err
}
