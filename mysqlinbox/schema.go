package mysqlinbox

import (
	"context"
	"fmt"
	"strings"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// shape is the schema the inbox needs on MySQL, as its migrations leave it: each table, with {table} standing for
// the configured table, and the indexes it must have. Column types are information_schema's DATA_TYPE.
var shape = []struct {
	table   dialect.TableShape
	indexes []string
}{
	{dialect.Table("{table}", "consumer, message_id", "processed_at datetime not null", "consumer varbinary not null",
		"message_id varbinary not null", "state varchar not null", "locked_until datetime", "attempts int",
		"lease_token char", "last_error text"), []string{"{table}_processed_at", "{table}_processing"}},
	{dialect.Table("{table}_produced", "consumer, message_id", "consumer varbinary not null",
		"message_id varbinary not null", "produced longblob not null"), nil},
	{dialect.Table("{table}_locks", "name", "name varchar not null", "holder char not null",
		"held_until datetime not null"), nil},
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
	for n, t := range shape {
		want := t.table.Named(table)
		got, err := dialect.ReadTable(ctx, q, tableSQL, columnsSQL, want.Name)
		if err != nil {
			return r, fmt.Errorf("mysqlinbox: check the schema of %s: %w", table, err)
		}
		r.CheckTable(want, got, got.Kind == "BASE TABLE", n == 0)
		if r.Missing {
			return r, nil // the rest hangs off the inbox table
		}
		if id, ok := got.Column("message_id"); n == 0 && ok && id.Type == "varbinary" {
			r.IDType = "text" // MySQL stores every event ID as bytes
		}
		for _, idx := range t.indexes {
			idx = strings.ReplaceAll(idx, "{table}", table)
			var count int
			if err := q.QueryRow(ctx, indexSQL, want.Name, idx).Scan(&count); err != nil {
				return r, fmt.Errorf("mysqlinbox: check the schema of %s: %w", table, err)
			}
			if count == 0 {
				r.Absent = append(r.Absent, fmt.Sprintf("index %s does not exist on table %s", idx, want.Name))
			}
		}
	}
	return r, nil
}
