package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// tables are the tables the inbox needs, as the migrations leave them; triggers and indexes the other objects. A
// migration that adds a table, a trigger or an index adds one line here; a migration that replaces an object
// under the same name changes nothing here.
//
// Column types are spelled as PostgreSQL's format_type spells them, and message_id's is dialect.IDColumnType,
// text or uuid, which the check reads from the inbox table, the first entry. The migrations table is not part of
// it: users who apply the SQL files with their own tool have none.
var tables = []dialect.TableShape{
	dialect.Table("{table}", "message_id, consumer_id",
		"processed_at integer not null", "consumer_id smallint not null", `state "char" not null`,
		"message_id {id} not null", "locked_until timestamp with time zone", "attempts integer", "lease_token uuid",
		"last_error text"),
	dialect.Table("{table}_produced", "message_id, consumer_id",
		"message_id {id} not null", "consumer_id smallint not null", "produced jsonb not null"),
	dialect.Table("{table}_consumers", "id", "id smallint not null", "name text not null",
		"created_at timestamp with time zone not null", "cleaned_before timestamp with time zone"),
	dialect.Table("{table}_locks", "name", "name text not null", "holder uuid not null", "held_until timestamp with time zone not null"),
}

// idTypes are the types message_id may have: inbox.IDTypeText and inbox.IDTypeUUID.
var idTypes = []string{"text", "uuid"}

var (
	// triggers are the triggers of the inbox table that must exist and be enabled.
	triggers = []string{"{table}_unfinished_claim"}
	// indexes are the indexes of the inbox table that must exist and be valid.
	indexes = []string{"{table}_processed_at", "{table}_processing"}
)

// Catalog queries of the schema check. Each names its object through to_regclass, which resolves the name with
// the connection's search_path as every inbox query does, and gives NULL, so no row, for a missing object instead
// of an error that would abort the transaction. Names reach them double-quoted, so that they mean exactly the
// configured lower-case name.
const (
	// A table's kind ('r' for a table, 'p' for a partitioned one) and its primary key's columns in key order.
	tableSQL = `SELECT 'relkind ' || c.relkind::text,
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

// InspectSchema compares the schema of table with tables, triggers and indexes. q must be a transaction: behind a
// pooler in transaction mode, a parameterized statement outside one may have its two round trips served by two
// server connections.
func (*postgres) InspectSchema(ctx context.Context, q driver.Executor, table string) (dialect.SchemaReport, error) {
	var r dialect.SchemaReport
	name := func(s string) string { return strings.ReplaceAll(s, "{table}", table) }
	fail := func(err error) (dialect.SchemaReport, error) {
		return r, fmt.Errorf("inbox: check the schema of %s: %w", table, err)
	}
	for n, want := range tables {
		want = want.Named(table)
		got, err := dialect.ReadTable(ctx, q, tableSQL, columnsSQL, quoteIdent(want.Name))
		if err != nil {
			return fail(err)
		}
		inbox := n == 0
		r.CheckTable(want, got, got.Kind == "relkind r" || got.Kind == "relkind p", inbox, idTypes...)
		if r.Missing {
			return r, nil // the rest hangs off the inbox table
		}
		if _, named := got.Column("consumer"); inbox && named {
			if _, numbered := got.Column("consumer_id"); !numbered {
				r.Outdated = true // the layout of versions 1 to 6, which 007 moves to this one
			}
		}
		if !inbox {
			continue
		}
		for _, trigger := range triggers {
			if err := checkTrigger(ctx, q, &r, table, name(trigger)); err != nil {
				return fail(err)
			}
		}
		for _, index := range indexes {
			if err := checkIndex(ctx, q, &r, table, name(index)); err != nil {
				return fail(err)
			}
		}
	}
	return r, nil
}

func checkTrigger(ctx context.Context, q driver.Executor, r *dialect.SchemaReport, table, trigger string) error {
	var enabled string
	err := q.QueryRow(ctx, triggerSQL, quoteIdent(table), trigger).Scan(&enabled)
	switch {
	case errors.Is(err, driver.ErrNoRows):
		r.Absent = append(r.Absent, fmt.Sprintf("trigger %s does not exist on table %s", trigger, table))
	case err != nil:
		return err
	case enabled == "D" || enabled == "R":
		r.Wrong = append(r.Wrong, fmt.Sprintf("trigger %s is disabled", trigger))
	}
	return nil
}

func checkIndex(ctx context.Context, q driver.Executor, r *dialect.SchemaReport, table, index string) error {
	var onTable, valid bool
	err := q.QueryRow(ctx, indexSQL, quoteIdent(index), quoteIdent(table)).Scan(&onTable, &valid)
	switch {
	case errors.Is(err, driver.ErrNoRows):
		r.Absent = append(r.Absent, fmt.Sprintf("index %s does not exist", index))
	case err != nil:
		return err
	case !onTable:
		r.Wrong = append(r.Wrong, fmt.Sprintf("index %s is not on table %s", index, table))
	case !valid:
		r.Wrong = append(r.Wrong, fmt.Sprintf("index %s is invalid (a failed concurrent build?): drop it and run inbox.Migrate", index))
	}
	return nil
}
