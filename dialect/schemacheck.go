package dialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/effectively-once/watermill-inbox/driver"
)

// The schema check of every dialect: the dialect declares the tables the inbox needs (TableShape) and reads what
// its catalog has (ReadTable); CheckTable compares the two and writes what differs into a SchemaReport, in the
// same words for every database.

// IDColumnType, as a column's type in a TableShape, stands for the type of the inbox table's message_id column,
// which the inbox lets the user choose (one of the idTypes given to CheckTable): CheckTable reads it from the inbox
// table and then expects it wherever the placeholder appears.
const IDColumnType = "{id}"

// TableShape is a table the inbox needs.
type TableShape struct {
	// Name is the table's name, with {table} standing for the inbox table's.
	Name string
	// Key is the primary key's columns in key order, comma-separated.
	Key     string
	Columns []ColumnShape
}

// ColumnShape is a column of a TableShape: its type as the dialect's catalog spells it, and whether it must be
// NOT NULL.
type ColumnShape struct {
	Name, Type string
	NotNull    bool
}

// Table declares a TableShape, each column "name type", with " not null" after the type when the column must
// have it.
func Table(name, key string, columns ...string) TableShape {
	t := TableShape{Name: name, Key: key}
	for _, spec := range columns {
		col, typ, _ := strings.Cut(spec, " ")
		typ, notNull := strings.CutSuffix(typ, " not null")
		t.Columns = append(t.Columns, ColumnShape{Name: col, Type: typ, NotNull: notNull})
	}
	return t
}

// Named returns t with {table} in its name replaced by table.
func (t TableShape) Named(table string) TableShape {
	t.Name = strings.ReplaceAll(t.Name, "{table}", table)
	return t
}

// FoundTable is a table as the database's catalog describes it.
type FoundTable struct {
	// Exists is false when there is no object of the table's name; the fields below are then empty.
	Exists bool
	// Kind is what the catalog calls the object, for a message when it is no table.
	Kind string
	// Key is the primary key's columns in key order, comma-separated; not Valid when there is none.
	Key     sql.NullString
	Columns []FoundColumn
}

// FoundColumn is a live column of a FoundTable.
type FoundColumn struct {
	Name, Type string
	NotNull    bool
	// HasDefault is true when an INSERT that leaves the column out still works.
	HasDefault bool
}

// Column returns the column named name, and false when the table has none.
func (t FoundTable) Column(name string) (FoundColumn, bool) {
	for _, c := range t.Columns {
		if c.Name == name {
			return c, true
		}
	}
	return FoundColumn{}, false
}

// ReadTable describes a table with two catalog queries of the dialect, each taking arg as its one parameter:
// tableQuery returns the object's kind and its primary key's columns (NULL for none), or no row when no object
// has the name; columnsQuery returns its columns in order, each as (name, type, not null, has a default).
func ReadTable(ctx context.Context, q driver.Executor, tableQuery, columnsQuery string, arg any) (FoundTable, error) {
	var t FoundTable
	err := q.QueryRow(ctx, tableQuery, arg).Scan(&t.Kind, &t.Key)
	if errors.Is(err, driver.ErrNoRows) {
		return t, nil
	}
	if err != nil {
		return t, err
	}
	t.Exists = true
	err = ScanRows(ctx, q, columnsQuery, []any{arg}, func(r driver.Rows) error {
		var c FoundColumn
		err := r.Scan(&c.Name, &c.Type, &c.NotNull, &c.HasDefault)
		t.Columns = append(t.Columns, c)
		return err
	})
	return t, err
}

// CheckTable adds to r how got, found in the place of want, differs from it. isTable tells whether got's kind is
// a table the inbox can use. inbox marks the inbox table, which the other tables hang off: its absence makes r
// Missing, and its message_id column tells r's IDType, one of idTypes (IDColumnType says how).
func (r *SchemaReport) CheckTable(want TableShape, got FoundTable, isTable, inbox bool, idTypes ...string) {
	switch {
	case !got.Exists:
		if inbox {
			r.Missing = true
		}
		r.Absent = append(r.Absent, "table "+want.Name+" does not exist")
		return
	case !isTable:
		r.Wrong = append(r.Wrong, fmt.Sprintf("%s is not a table (%s)", want.Name, got.Kind))
		return
	case !got.Key.Valid:
		r.Wrong = append(r.Wrong, fmt.Sprintf("table %s has no primary key, want (%s)", want.Name, want.Key))
	case got.Key.String != want.Key:
		r.Wrong = append(r.Wrong, fmt.Sprintf("table %s: primary key is (%s), want (%s)", want.Name, got.Key.String, want.Key))
	}
	expected := map[string]bool{}
	for _, w := range want.Columns {
		expected[w.Name] = true
		c, ok := got.Column(w.Name)
		if !ok {
			r.Wrong = append(r.Wrong, fmt.Sprintf("table %s: column %s does not exist", want.Name, w.Name))
			continue
		}
		typ := w.Type
		if typ == IDColumnType {
			for _, t := range idTypes {
				if inbox && c.Type == t {
					r.IDType = t
				}
			}
			typ = r.IDType
			if typ == "" {
				typ = strings.Join(idTypes, " or ")
			}
		}
		if c.Type != typ {
			r.Wrong = append(r.Wrong, fmt.Sprintf("table %s: column %s is %s, want %s", want.Name, w.Name, c.Type, typ))
		}
		if w.NotNull && !c.NotNull {
			r.Wrong = append(r.Wrong, fmt.Sprintf("table %s: column %s allows NULL, want NOT NULL", want.Name, w.Name))
		}
	}
	for _, c := range got.Columns {
		if !expected[c.Name] && c.NotNull && !c.HasDefault {
			r.Wrong = append(r.Wrong, fmt.Sprintf("table %s: column %s is NOT NULL without a default, and the inbox never writes it", want.Name, c.Name))
		}
	}
}
