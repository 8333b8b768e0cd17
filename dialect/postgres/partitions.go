package postgres

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// Statements of managed partitions (internal/maintain/partitions.go). DDL takes no parameters: its templates name
// {partition}, the partition; {default}, the default partition; and {from} and {to}, the range's bounds, which the
// inbox made or read from the catalog, and which are checked against partitionBound before they go into a
// statement.
const (
	// The table's kind and the database's clock, in one round trip.
	partitionKindSQL = `SELECT coalesce((SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass($1)), false), now()`

	// Each partition and its bounds as PostgreSQL spells them: DEFAULT, or FOR VALUES FROM ('...') TO ('...'); and,
	// with the bound DETACHED, the tables whose names begin as the inbox's partitions' do ($2) in the table's
	// schema that are no partition: detached by a pass that stopped before it dropped them. starts_with compares
	// characters, where LIKE would take the name's underscores for wildcards; Partitions then keeps only the names
	// of the inbox's own shape.
	partitionsSQL = `SELECT c.relname::text, pg_get_expr(c.relpartbound, c.oid)
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = to_regclass($1)
		UNION ALL
		SELECT c.relname::text, 'DETACHED' FROM pg_class c
		WHERE c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = to_regclass($1))
			AND c.relkind = 'r' AND NOT c.relispartition AND starts_with(c.relname, $2)
		ORDER BY 1`

	// DDL waits at most this long for its locks, and the Cleaner tries again next round: creating a partition
	// locks the default partition, and dropping one the whole table, and every claim that arrives meanwhile
	// queues behind the waiting DDL.
	partitionLockTimeout = `SET LOCAL lock_timeout = '1s'`

	// CreatePartition's steps (it says why they are these). The move names every column of the table, as the
	// catalogue lists them once the table is locked (tableColumnsSQL), so that a row keeps each column it has:
	// those of the compact layout and any a later migration added (the fingerprint).
	lockTableSQL       = `LOCK TABLE {table} IN SHARE MODE`
	createPartitionSQL = `CREATE TABLE {partition} (LIKE {table} INCLUDING DEFAULTS)`
	lockDefaultSQL     = `LOCK TABLE {default} IN ACCESS EXCLUSIVE MODE`
	tableColumnsSQL    = `SELECT coalesce(string_agg(quote_ident(attname), ', ' ORDER BY attnum), '')
		FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped`
	moveRowsSQL = `WITH moved AS (
			DELETE FROM {default} WHERE message_id >= $1 AND message_id < $2 RETURNING {columns}
		)
		INSERT INTO {partition} ({columns}) SELECT {columns} FROM moved`
	attachPartitionSQL = `ALTER TABLE {table} ATTACH PARTITION {partition} FOR VALUES FROM ('{from}') TO ('{to}')`

	// A DETACH takes the whole table's exclusive lock: every claim that arrives while it waits for the claims in
	// flight waits behind it, so it waits briefly, and the caller tries again (internal/maintain/partitions.go).
	detachLockTimeoutSQL = `SET LOCAL lock_timeout = '50ms'`

	// The DETACH holds the table's lock until its commit ends; not waiting for the commit's WAL flush shortens the
	// claims' stall by that flush. A crash that loses the commit leaves the partition attached, and the next round
	// detaches it again.
	detachAsyncCommitSQL = `SET LOCAL synchronous_commit = off`

	// The produced table is not partitioned: its rows of the range go first, by the range's bounds.
	deleteProducedSQL  = `DELETE FROM {table}_produced WHERE message_id >= $1 AND message_id < $2`
	detachPartitionSQL = `ALTER TABLE {table} DETACH PARTITION {partition}`
	dropPartitionSQL   = `DROP TABLE IF EXISTS {partition}`
)

// partitionSuffix is the end of the inbox's partition names after the table's (internal/maintain.PartitionName).
var partitionSuffix = regexp.MustCompile(`^_p[0-9]{8}t[0-9]{4}$`)

// partitionBound is what a bound of a managed partition looks like: a UUID in canonical text.
var partitionBound = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// partitionRange reads the bounds of a range partition from pg_get_expr's text.
var partitionRange = regexp.MustCompile(`^FOR VALUES FROM \('([^']*)'\) TO \('([^']*)'\)$`)

// partitionDDL fills one of the partition statements in for p.
func partitionDDL(template string, p dialect.PartitionParams) string {
	return fill(template, map[string]string{"table": p.Table, "partition": p.Name, "default": p.Default},
		"{from}", p.From, "{to}", p.To)
}

// PartitionedMigrations gives migration 001 the text of migrations/partitioned/001_inbox.up.sql, which creates the
// inbox table partitioned by ranges of message_id, with a default partition. Migration 007 later builds the compact
// table with the same key and the same partitions.
func (*postgres) PartitionedMigrations(table string, ms []dialect.Migration) ([]dialect.Migration, error) {
	parted, err := dialect.LoadMigrations(migrationFiles, "migrations", defaultTable, table, "migrations/partitioned")
	if err != nil {
		return nil, err
	}
	out := append([]dialect.Migration(nil), ms...)
	for n, m := range out {
		if m.Version == 1 && len(parted) > 0 && parted[0].Version == 1 {
			out[n].Up = parted[0].Up
			return out, nil
		}
	}
	return nil, fmt.Errorf("inbox: no migration 001 to partition")
}

func (*postgres) Partitions(ctx context.Context, tx driver.Executor, table string) (l dialect.PartitionList, err error) {
	if err := tx.QueryRow(ctx, partitionKindSQL, quoteIdent(table)).Scan(&l.Partitioned, &l.Now); err != nil || !l.Partitioned {
		return l, err
	}
	err = dialect.ScanRows(ctx, tx, partitionsSQL, []any{quoteIdent(table), table + "_p"}, func(r driver.Rows) error {
		var name, bound string
		if err := r.Scan(&name, &bound); err != nil {
			return err
		}
		if bound == "DEFAULT" {
			l.Default = name
		} else if bound == "DETACHED" {
			if rest, ok := strings.CutPrefix(name, table); ok && partitionSuffix.MatchString(rest) {
				l.Detached = append(l.Detached, name)
			}
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
// again, beside its row in the new one: two claims of one ID, both applied
// (TestPartitions_CopiesRacingAcrossABoundaryWhilePartitionsAreCreatedApplyOnce caught it). The lock is held for
// as long as the move and the attach take, yet the longest claim beside a round took about as long as without the
// lock (BenchmarkPartitionCreation measures both; docs/results/performance.md has the figures); lock_timeout
// bounds the wait for it: the Cleaner tries again next round. Without a default partition no claim
// can be routed to a partition that changes, and the lock is not needed.
func (*postgres) CreatePartition(ctx context.Context, tx driver.Executor, p dialect.PartitionParams) error {
	if err := checkBounds(p); err != nil {
		return err
	}
	steps := []step{{sql: partitionLockTimeout}}
	if p.Default != "" {
		steps = append(steps, step{sql: partitionDDL(lockTableSQL, p)})
	}
	steps = append(steps, step{sql: partitionDDL(createPartitionSQL, p)})
	if p.Default == "" {
		return run(ctx, tx, append(steps, step{sql: partitionDDL(attachPartitionSQL, p)}))
	}
	// The lock first: a claim that inserts into the default partition between the move and the ATTACH would
	// leave it holding a row of the new range, and the ATTACH would fail.
	if err := run(ctx, tx, append(steps, step{sql: partitionDDL(lockDefaultSQL, p)})); err != nil {
		return err
	}
	var columns string
	if err := tx.QueryRow(ctx, tableColumnsSQL, quoteIdent(p.Table)).Scan(&columns); err != nil {
		return err
	}
	if columns == "" {
		return fmt.Errorf("inbox: partition %s: table %s has no columns", p.Name, p.Table)
	}
	move := strings.ReplaceAll(partitionDDL(moveRowsSQL, p), "{columns}", columns)
	return run(ctx, tx, []step{{sql: move, args: []any{p.From, p.To}}, {sql: partitionDDL(attachPartitionSQL, p)}})
}

// DetachPartition deletes the produced messages of the range (the produced table is not partitioned), then detaches
// the partition: the table's exclusive lock, held for an instant and released at this transaction's commit, before
// the partition's files are dropped. DETACH ... CONCURRENTLY would not lock the table at all, but PostgreSQL refuses
// it while a default partition exists.
func (*postgres) DetachPartition(ctx context.Context, tx driver.Executor, p dialect.PartitionParams) error {
	if err := checkBounds(p); err != nil {
		return err
	}
	return run(ctx, tx, []step{{sql: detachLockTimeoutSQL}, {sql: detachAsyncCommitSQL},
		{sql: partitionDDL(deleteProducedSQL, p), args: []any{p.From, p.To}},
		{sql: partitionDDL(detachPartitionSQL, p)},
	})
}

// DropPartition drops a partition DetachPartition detached, which no claim reaches any more.
func (*postgres) DropPartition(ctx context.Context, tx driver.Executor, p dialect.PartitionParams) error {
	return run(ctx, tx, []step{{sql: partitionLockTimeout}, {sql: partitionDDL(dropPartitionSQL, p)}})
}

// checkBounds refuses bounds that are no UUIDs, before they go into DDL.
func checkBounds(p dialect.PartitionParams) error {
	if !partitionBound.MatchString(p.From) || !partitionBound.MatchString(p.To) {
		return fmt.Errorf("inbox: partition %s: bounds %q and %q are not UUIDs", p.Name, p.From, p.To)
	}
	return nil
}

// step is one statement of a partition operation.
type step struct {
	sql  string
	args []any
}

func run(ctx context.Context, tx driver.Executor, steps []step) error {
	for _, s := range steps {
		if _, err := tx.Exec(ctx, s.sql, s.args...); err != nil {
			return err
		}
	}
	return nil
}
