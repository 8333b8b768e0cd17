package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// schemaShape is the schema the inbox needs, as the shipped migrations leave it: Migrate checks it after applying
// them, and the middleware before its first message. A migration that adds a table, a trigger or an index adds
// one line here; a migration that replaces an object under the same name changes nothing here.
//
// In names, {table} stands for the configured table. Column types are spelled as PostgreSQL's format_type spells
// them, and {id} stands for the type of message_id, text or uuid (WithIDType), which the check reads from the
// inbox table, the first entry, and then expects wherever {id} appears. The migrations table is not part of it:
// users who apply the SQL files with their own tool have none.
var schemaShape = []shapeObject{
	tableShape("{table}", "message_id, consumer_id",
		"processed_at integer not null", "consumer_id smallint not null", `state "char" not null`,
		"message_id {id} not null", "locked_until timestamp with time zone", "attempts integer", "lease_token uuid",
		"last_error text"),
	tableShape("{table}_produced", "message_id, consumer_id",
		"message_id {id} not null", "consumer_id smallint not null", "produced jsonb not null"),
	tableShape("{table}_consumers", "id", "id smallint not null", "name text not null",
		"created_at timestamp with time zone not null", "cleaned_before timestamp with time zone"),
	triggerShape("{table}", "{table}_unfinished_claim"),
	indexShape("{table}", "{table}_processed_at"),
	indexShape("{table}", "{table}_processing"),
	tableShape("{table}_locks", "name", "name text not null", "holder uuid not null", "held_until timestamp with time zone not null"),
}

type shapeKind int

const (
	shapeTable shapeKind = iota
	shapeTrigger
	shapeIndex
)

// shapeObject is one object of schemaShape.
type shapeObject struct {
	kind    shapeKind
	name    string
	on      string        // the table a trigger or an index belongs to
	key     string        // a table's primary key columns, in order, comma-separated
	columns []columnShape // a table's columns
}

type columnShape struct {
	name, typ string
	notNull   bool
}

// tableShape declares a table with its primary key and its columns, each "name type", with " not null" after the
// type when the column must have it.
func tableShape(name, key string, columns ...string) shapeObject {
	o := shapeObject{kind: shapeTable, name: name, key: key}
	for _, spec := range columns {
		col, typ, _ := strings.Cut(spec, " ")
		typ, notNull := strings.CutSuffix(typ, " not null")
		o.columns = append(o.columns, columnShape{name: col, typ: typ, notNull: notNull})
	}
	return o
}

// triggerShape declares a trigger, by name, that must exist and be enabled on table on.
func triggerShape(on, name string) shapeObject {
	return shapeObject{kind: shapeTrigger, name: name, on: on}
}

// indexShape declares an index, by name, that must exist, be valid and belong to table on.
func indexShape(on, name string) shapeObject {
	return shapeObject{kind: shapeIndex, name: name, on: on}
}

// schemaReport is what the schema check found.
type schemaReport struct {
	idType  IDType   // the type of the inbox table's message_id; "" when it is neither text nor uuid
	missing bool     // the inbox table does not exist
	absent  []string // objects of schemaShape that do not exist
	wrong   []string // objects that exist in another shape
	// outdated is true when the inbox table has the layout of an older version, which Migrate moves to this one.
	outdated bool
}

// fromDialectReport turns a dialect's report into the inbox's.
func fromDialectReport(r dialect.SchemaReport) schemaReport {
	return schemaReport{idType: IDType(r.IDType), missing: r.Missing, absent: r.Absent, wrong: r.Wrong, outdated: r.Outdated}
}

// incomplete reports whether only whole objects are missing, which Migrate can add without touching what exists.
func (r schemaReport) incomplete() bool { return len(r.absent) > 0 && len(r.wrong) == 0 }

// err returns the report as ErrSchemaMissing, ErrSchemaDrift naming each difference, or nil.
func (r schemaReport) err(table string) error {
	switch {
	case r.missing:
		return fmt.Errorf("%w: table %s, and WithAutoMigrate is off", ErrSchemaMissing, table)
	case r.outdated:
		return fmt.Errorf("%w: table %s has the layout of an older version of the inbox: run inbox.Migrate, which "+
			"moves its rows to the current layout and keeps every one (docs/results/storage.md says what it locks, and for how long)",
			ErrSchemaDrift, table)
	case len(r.absent) > 0 || len(r.wrong) > 0:
		return fmt.Errorf("%w: %s", ErrSchemaDrift, strings.Join(append(append([]string(nil), r.wrong...), r.absent...), "; "))
	}
	return nil
}

// inspectSchema compares the schema of table with schemaShape. q must be a transaction: behind a pooler in
// transaction mode, a parameterized statement outside one may have its two round trips served by two server
// connections.
func inspectSchema(ctx context.Context, q driver.Executor, table string) (schemaReport, error) {
	var r schemaReport
	name := func(s string) string { return strings.ReplaceAll(s, "{table}", table) }
	for n, o := range schemaShape {
		var err error
		switch o.kind {
		case shapeTable:
			err = r.checkTable(ctx, q, name(o.name), name(o.key), o.columns, n == 0)
		case shapeTrigger:
			err = r.checkTrigger(ctx, q, name(o.on), name(o.name))
		case shapeIndex:
			err = r.checkIndex(ctx, q, name(o.on), name(o.name))
		}
		if err != nil {
			return r, fmt.Errorf("inbox: check the schema of %s: %w", table, err)
		}
		if r.missing {
			return r, nil // the rest hangs off the inbox table
		}
	}
	return r, nil
}

func (r *schemaReport) checkTable(ctx context.Context, q driver.Executor, table, key string, want []columnShape, inbox bool) error {
	var kind string
	var gotKey sql.NullString
	err := q.QueryRow(ctx, tableSQL, quoteIdent(table)).Scan(&kind, &gotKey)
	switch {
	case errors.Is(err, driver.ErrNoRows):
		if inbox {
			r.missing = true
		}
		r.absent = append(r.absent, "table "+table+" does not exist")
		return nil
	case err != nil:
		return err
	case kind != "r" && kind != "p":
		r.wrong = append(r.wrong, fmt.Sprintf("%s is not a table (relkind %s)", table, kind))
		return nil
	}
	switch {
	case !gotKey.Valid:
		r.wrong = append(r.wrong, fmt.Sprintf("table %s has no primary key, want (%s)", table, key))
	case gotKey.String != key:
		r.wrong = append(r.wrong, fmt.Sprintf("table %s: primary key is (%s), want (%s)", table, gotKey.String, key))
	}

	type column struct {
		typ                 string
		notNull, hasDefault bool
	}
	got := map[string]column{}
	var order []string
	rows, err := q.Query(ctx, columnsSQL, quoteIdent(table))
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var c column
		if err := rows.Scan(&name, &c.typ, &c.notNull, &c.hasDefault); err != nil {
			return err
		}
		got[name] = c
		order = append(order, name)
	}
	if err := rows.Err(); err != nil {
		return err
	}

	if _, named := got["consumer"]; inbox && named {
		if _, numbered := got["consumer_id"]; !numbered {
			r.outdated = true // the layout of versions 1 to 6, which 007 moves to this one
		}
	}
	expected := map[string]bool{}
	for _, w := range want {
		expected[w.name] = true
		c, ok := got[w.name]
		if !ok {
			r.wrong = append(r.wrong, fmt.Sprintf("table %s: column %s does not exist", table, w.name))
			continue
		}
		typ := w.typ
		if typ == "{id}" {
			if inbox && (c.typ == string(IDTypeText) || c.typ == string(IDTypeUUID)) {
				r.idType = IDType(c.typ)
			}
			typ = string(r.idType)
			if typ == "" {
				typ = "text or uuid"
			}
		}
		if c.typ != typ {
			r.wrong = append(r.wrong, fmt.Sprintf("table %s: column %s is %s, want %s", table, w.name, c.typ, typ))
		}
		if w.notNull && !c.notNull {
			r.wrong = append(r.wrong, fmt.Sprintf("table %s: column %s allows NULL, want NOT NULL", table, w.name))
		}
	}
	for _, name := range order {
		if c := got[name]; !expected[name] && c.notNull && !c.hasDefault {
			r.wrong = append(r.wrong, fmt.Sprintf("table %s: column %s is NOT NULL without a default, and the inbox never writes it", table, name))
		}
	}
	return nil
}

func (r *schemaReport) checkTrigger(ctx context.Context, q driver.Executor, table, trigger string) error {
	var enabled string
	err := q.QueryRow(ctx, triggerSQL, quoteIdent(table), trigger).Scan(&enabled)
	switch {
	case errors.Is(err, driver.ErrNoRows):
		r.absent = append(r.absent, fmt.Sprintf("trigger %s does not exist on table %s", trigger, table))
	case err != nil:
		return err
	case enabled == "D" || enabled == "R":
		r.wrong = append(r.wrong, fmt.Sprintf("trigger %s is disabled", trigger))
	}
	return nil
}

func (r *schemaReport) checkIndex(ctx context.Context, q driver.Executor, table, index string) error {
	var onTable, valid bool
	err := q.QueryRow(ctx, indexSQL, quoteIdent(index), quoteIdent(table)).Scan(&onTable, &valid)
	switch {
	case errors.Is(err, driver.ErrNoRows):
		r.absent = append(r.absent, fmt.Sprintf("index %s does not exist", index))
	case err != nil:
		return err
	case !onTable:
		r.wrong = append(r.wrong, fmt.Sprintf("index %s is not on table %s", index, table))
	case !valid:
		r.wrong = append(r.wrong, fmt.Sprintf("index %s is invalid (a failed concurrent build?): drop it and run inbox.Migrate", index))
	}
	return nil
}

// quoteIdent double-quotes a name that tableNamePattern admitted, with or without a suffix; such a name holds no
// quote to escape.
func quoteIdent(name string) string { return `"` + name + `"` }
