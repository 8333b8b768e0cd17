package mysqlinbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// shape is the schema the inbox needs on MySQL, as its migrations leave it. In names, {table} stands for the
// configured table. Columns are "name type", with " not null" when the column must have it; the type is
// information_schema's DATA_TYPE.
var shape = []struct {
	table, key string
	columns    []string
	indexes    []string
}{
	{"{table}", "consumer, message_id", []string{"processed_at datetime not null", "consumer varbinary not null",
		"message_id varbinary not null", "state varchar not null", "locked_until datetime", "attempts int",
		"lease_token char", "last_error text"}, []string{"{table}_processed_at", "{table}_processing"}},
	{"{table}_produced", "consumer, message_id", []string{"consumer varbinary not null", "message_id varbinary not null",
		"produced longblob not null"}, nil},
	{"{table}_locks", "name", []string{"name varchar not null", "holder char not null", "held_until datetime not null"}, nil},
}

// Catalog queries of the schema check, on the connection's current database, as every inbox query is.
const (
	tableSQL = `SELECT table_type,
			(SELECT GROUP_CONCAT(s.column_name ORDER BY s.seq_in_index SEPARATOR ', ')
			 FROM information_schema.statistics s
			 WHERE s.table_schema = t.table_schema AND s.table_name = t.table_name AND s.index_name = 'PRIMARY')
		FROM information_schema.tables t WHERE t.table_schema = DATABASE() AND t.table_name = ?`
	columnsSQL = `SELECT column_name, data_type, is_nullable = 'NO',
			(column_default IS NOT NULL AND column_default <> 'NULL') OR extra LIKE '%auto_increment%'
		FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ?
		ORDER BY ordinal_position`
	indexSQL = `SELECT COUNT(*) FROM information_schema.statistics
		WHERE table_schema = DATABASE() AND table_name = ? AND index_name = ?`
)

// InspectSchema compares the schema of table with shape.
func (*mysqlDialect) InspectSchema(ctx context.Context, q driver.Executor, table string) (dialect.SchemaReport, error) {
	var r dialect.SchemaReport
	name := func(s string) string { return strings.ReplaceAll(s, "{table}", table) }
	for n, t := range shape {
		tname := name(t.table)
		if err := checkTable(ctx, q, &r, tname, t.key, t.columns, n == 0); err != nil {
			return r, fmt.Errorf("mysqlinbox: check the schema of %s: %w", table, err)
		}
		if r.Missing {
			return r, nil // the rest hangs off the inbox table
		}
		for _, idx := range t.indexes {
			var count int
			if err := q.QueryRow(ctx, indexSQL, tname, name(idx)).Scan(&count); err != nil {
				return r, fmt.Errorf("mysqlinbox: check the schema of %s: %w", table, err)
			}
			if count == 0 {
				r.Absent = append(r.Absent, fmt.Sprintf("index %s does not exist on table %s", name(idx), tname))
			}
		}
	}
	return r, nil
}

func checkTable(ctx context.Context, q driver.Executor, r *dialect.SchemaReport, table, key string, want []string, inbox bool) error {
	var kind string
	var gotKey sql.NullString
	err := q.QueryRow(ctx, tableSQL, table).Scan(&kind, &gotKey)
	switch {
	case errors.Is(err, driver.ErrNoRows):
		if inbox {
			r.Missing = true
		}
		r.Absent = append(r.Absent, "table "+table+" does not exist")
		return nil
	case err != nil:
		return err
	case kind != "BASE TABLE":
		r.Wrong = append(r.Wrong, fmt.Sprintf("%s is not a table (%s)", table, kind))
		return nil
	case !gotKey.Valid:
		r.Wrong = append(r.Wrong, fmt.Sprintf("table %s has no primary key, want (%s)", table, key))
	case gotKey.String != key:
		r.Wrong = append(r.Wrong, fmt.Sprintf("table %s: primary key is (%s), want (%s)", table, gotKey.String, key))
	}

	type column struct {
		typ                 string
		notNull, hasDefault bool
	}
	got := map[string]column{}
	var order []string
	err = dialect.ScanRows(ctx, q, columnsSQL, []any{table}, func(rows driver.Rows) error {
		var name string
		var c column
		err := rows.Scan(&name, &c.typ, &c.notNull, &c.hasDefault)
		got[name] = c
		order = append(order, name)
		return err
	})
	if err != nil {
		return err
	}
	expected := map[string]bool{}
	for _, spec := range want {
		col, typ, _ := strings.Cut(spec, " ")
		typ, notNull := strings.CutSuffix(typ, " not null")
		expected[col] = true
		c, ok := got[col]
		switch {
		case !ok:
			r.Wrong = append(r.Wrong, fmt.Sprintf("table %s: column %s does not exist", table, col))
			continue
		case c.typ != typ:
			r.Wrong = append(r.Wrong, fmt.Sprintf("table %s: column %s is %s, want %s", table, col, c.typ, typ))
		case notNull && !c.notNull:
			r.Wrong = append(r.Wrong, fmt.Sprintf("table %s: column %s allows NULL, want NOT NULL", table, col))
		}
		if inbox && col == "message_id" && c.typ == "varbinary" {
			r.IDType = "text"
		}
	}
	for _, name := range order {
		if c := got[name]; !expected[name] && c.notNull && !c.hasDefault {
			r.Wrong = append(r.Wrong, fmt.Sprintf("table %s: column %s is NOT NULL without a default, and the inbox never writes it", table, name))
		}
	}
	return nil
}
