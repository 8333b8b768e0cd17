package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/maintain"
	"github.com/effectively-once/watermill-inbox/internal/store"
)

// Migration is one versioned schema change of the inbox table: Version orders migrations and Migrate applies each
// once, in ascending order; Name is the file name's description, such as "inbox"; Up and Down are the SQL that
// applies and reverts the change, for the configured table.
type Migration = dialect.Migration

// Migrations returns the inbox's schema changes in d's dialect for the table the options name, in order. Use it
// to feed the SQL to a migration tool of your own; Migrate applies the same statements. It reads WithTable,
// WithIDType and WithPartitions. It does not touch the database: a Database over a nil handle, such as OnSQL(nil),
// serves to print the SQL before any connection.
func (d *Database) Migrations(opts ...MaintenanceOption) ([]Migration, error) {
	if d == nil || d.dialect == nil {
		return nil, fmt.Errorf("%w: Migrations: the database is nil", ErrInvalidOption)
	}
	c, err := newMaintenanceConfig(opts)
	if err != nil {
		return nil, err
	}
	ms, err := d.schema.Migrations(c.table, string(c.idType))
	if err != nil || c.partitionPeriod == 0 {
		return ms, err
	}
	pt, err := maintain.Partitioner(d.dialect, ErrInvalidOption)
	if err != nil {
		return nil, err
	}
	return pt.PartitionedMigrations(c.table, ms)
}

// Migrate creates or upgrades the inbox table that the options name (DefaultTable unless WithTable is given),
// applying each migration once, and records the applied versions in a table named after it with a _migrations
// suffix. Many instances may call it at once: a transaction-scoped lock derived from the table name makes them
// take turns, and each finds the work done by the one before.
//
// Before it commits, Migrate checks the tables it leaves behind against the shape the inbox needs, since the
// versions table says only what was once applied. A table that was altered or dropped by hand since, or one of the
// same name that existed before in another shape, is reported as an error wrapping ErrSchemaDrift that names each
// difference, and nothing is changed. WithIDType chooses the type of a new table's message_id; an existing table
// keeps its own. It reads WithTable, WithIDType, WithPartitions and WithLogger.
func (d *Database) Migrate(ctx context.Context, opts ...MaintenanceOption) error {
	if err := d.check("Migrate: "); err != nil {
		return err
	}
	c, err := newMaintenanceConfig(opts)
	if err != nil {
		return err
	}
	if err := d.checkServer(ctx); err != nil {
		return err
	}
	_, err = migrate(ctx, d, c)
	return err
}

// migrated is what one run of migrate did and found.
type migrated struct {
	from, to int                  // the highest applied version before and after
	schema   dialect.SchemaReport // the schema it checked, as it commits it
}

func migrate(ctx context.Context, d *Database, c config) (res migrated, err error) {
	ms, err := d.schema.Migrations(c.table, string(c.idType))
	if err != nil {
		return res, err
	}
	if c.partitionPeriod > 0 {
		var pt dialect.Partitioner
		if pt, err = maintain.Partitioner(d.dialect, ErrInvalidOption); err != nil {
			return res, err
		}
		if ms, err = pt.PartitionedMigrations(c.table, ms); err != nil {
			return res, err
		}
		// Once the migrations committed: the partitions from a period back to PartitionsAhead ahead.
		defer func() {
			if err == nil {
				_, err = maintain.Partitions(ctx, maintainEnv(d.ops(c.table), c), c.partitionPeriod,
					time.Time{}, func(f func(driver.Tx) error) error { return store.InShortTx(ctx, d.pool, d.dialect, f) })
			}
		}()
	}
	versions := c.table + "_migrations"
	check := func(ctx context.Context, q driver.Executor, from, to int) error {
		r, err := d.schema.InspectSchema(ctx, q, c.table)
		if err != nil {
			return fmt.Errorf("inbox: migrate: %w", err)
		}
		if c.fingerprint != nil && !r.Missing {
			if err := addFingerprint(ctx, d.dialect, q, c, &r); err != nil {
				return fmt.Errorf("inbox: migrate: %w", err)
			}
		}
		res.schema = r
		if res.schema.Missing { // only possible when versions were recorded before: the first one creates the table
			return fmt.Errorf("inbox: migrate: %w: table %s does not exist, but %s records version %d as applied: "+
				"the table was dropped after it was migrated, and its history with it; drop %s too to create the table again",
				ErrSchemaDrift, c.table, versions, from, versions)
		}
		if err := schemaErr(res.schema, c.table); err != nil {
			return fmt.Errorf("inbox: migrate %s: %w", c.table, err)
		}
		return nil
	}
	params := dialect.MigrateParams{Table: c.table, Migrations: ms, Check: check}
	for try := 1; ; try++ {
		res.from, res.to, err = d.schema.Migrate(ctx, d.pool, params)
		if !d.ops(c.table).LockTaken(err) || try == migrateTries {
			return res, err
		}
		// A schema change met a running transaction's lock and gave up waiting for it at once, so as not to hold
		// up the claims behind it (the dialects' Migrate): the running transactions end, and the next try meets
		// fewer of them.
		pause := min(migratePause<<(try-1), migratePauseCeiling)
		c.logger.Debug("Inbox migration met a lock and tries again", watermill.LogFields{"table": c.table,
			"try": try, "retry_in": pause, "error": err.Error()})
		if _ = sleepThen(ctx, pause, nil); ctx.Err() != nil {
			return res, err
		}
	}
}

// A migration that meets a lock tries this many times, pausing between tries from migratePause, doubling up to
// migratePauseCeiling: about eight seconds in all, during which each try holds up the fleet's claims for at most the
// dialect's lock wait (50 ms on PostgreSQL, none on MariaDB). Then the error stands: auto-migrate nacks the
// message after the reject delay, and the next message tries again.
const (
	migrateTries        = 12
	migratePause        = 50 * time.Millisecond
	migratePauseCeiling = time.Second
)

// addFingerprint adds the fingerprint column to the table c names, in Migrate's transaction q, and checks it into r.
func addFingerprint(ctx context.Context, d dialect.Dialect, q driver.Executor, c config, r *dialect.SchemaReport) error {
	fp, ok := d.(dialect.Fingerprinter)
	if !ok {
		return fmt.Errorf("%w: WithFingerprint: the %s inbox cannot store fingerprints", ErrInvalidOption, d.Name())
	}
	if err := fp.AddFingerprint(ctx, q, c.table); err != nil {
		return fmt.Errorf("add the fingerprint column to %s: %w", c.table, err)
	}
	return inspectFingerprint(ctx, d, q, c, r)
}

// inspectFingerprint adds to r what WithFingerprint needs of the table and it lacks: the fingerprint column, of
// its type. A missing column is a whole object that Migrate adds, so the middleware adds it unless
// WithAutoMigrate(false).
func inspectFingerprint(ctx context.Context, d dialect.Dialect, q driver.Executor, c config, r *dialect.SchemaReport) error {
	fp, ok := d.(dialect.Fingerprinter)
	if c.fingerprint == nil || !ok || r.Missing {
		return nil
	}
	present, problem, err := fp.FingerprintColumn(ctx, q, c.table)
	switch {
	case err != nil:
		return fmt.Errorf("inbox: check the fingerprint column of %s: %w", c.table, err)
	case !present:
		r.Absent = append(r.Absent, "table "+c.table+": column fingerprint does not exist, and WithFingerprint needs it: run Migrate with WithFingerprint")
	case problem != "":
		r.Wrong = append(r.Wrong, problem)
	}
	return nil
}
