package dialect_test

import (
	"database/sql"
	"testing"

	"github.com/effectively-once/watermill-inbox/internal/require"

	"github.com/effectively-once/watermill-inbox/dialect"
)

func TestTable_ParsesEachColumnSpec(t *testing.T) {
	t.Parallel()
	shape := dialect.Table("{table}_locks", "name", "name text not null", "held_until timestamp with time zone not null", "note text")
	require.Equal(t, dialect.TableShape{Name: "{table}_locks", Key: "name", Columns: []dialect.ColumnShape{
		{Name: "name", Type: "text", NotNull: true},
		{Name: "held_until", Type: "timestamp with time zone", NotNull: true},
		{Name: "note", Type: "text"},
	}}, shape)
	require.Equal(t, "billing_locks", shape.Named("billing").Name)
	require.Equal(t, "{table}_locks", shape.Name, "Named leaves the declaration as it was")
}

func TestSchemaReport_CheckTable(t *testing.T) {
	t.Parallel()
	want := dialect.Table("billing", "message_id, consumer_id", "message_id {id} not null", "consumer_id smallint not null",
		"note text")
	found := func(key string, columns ...dialect.FoundColumn) dialect.FoundTable {
		return dialect.FoundTable{Exists: true, Kind: "table", Key: sql.NullString{String: key, Valid: key != ""}, Columns: columns}
	}
	id := dialect.FoundColumn{Name: "message_id", Type: "uuid", NotNull: true}
	consumer := dialect.FoundColumn{Name: "consumer_id", Type: "smallint", NotNull: true}
	note := dialect.FoundColumn{Name: "note", Type: "text"}

	t.Run("FindsNothingInATableOfTheShapeAndReadsItsIDType", func(t *testing.T) {
		t.Parallel()
		var r dialect.SchemaReport
		r.CheckTable(want, found("message_id, consumer_id", id, consumer, note), true, true, "text", "uuid")
		require.Equal(t, dialect.SchemaReport{IDType: "uuid"}, r)
	})

	t.Run("AMissingInboxTableIsMissingAndAnyOtherAbsent", func(t *testing.T) {
		t.Parallel()
		var r dialect.SchemaReport
		r.CheckTable(want, dialect.FoundTable{}, false, true, "text")
		require.True(t, r.Missing)
		require.Equal(t, []string{"table billing does not exist"}, r.Absent)
		var other dialect.SchemaReport
		other.CheckTable(want, dialect.FoundTable{}, false, false, "text")
		require.False(t, other.Missing)
		require.Len(t, other.Absent, 1)
	})

	t.Run("NamesEachDifference", func(t *testing.T) {
		t.Parallel()
		var r dialect.SchemaReport
		r.CheckTable(want, found("consumer_id",
			dialect.FoundColumn{Name: "message_id", Type: "bigint"},
			dialect.FoundColumn{Name: "tenant", Type: "text", NotNull: true},
			dialect.FoundColumn{Name: "made", Type: "text", NotNull: true, HasDefault: true},
			note), true, true, "text", "uuid")
		require.Empty(t, r.IDType)
		require.Equal(t, []string{
			"table billing: primary key is (consumer_id), want (message_id, consumer_id)",
			"table billing: column message_id is bigint, want text or uuid",
			"table billing: column message_id allows NULL, want NOT NULL",
			"table billing: column consumer_id does not exist",
			"table billing: column tenant is NOT NULL without a default, and the inbox never writes it",
		}, r.Wrong)
	})

	t.Run("AnotherTableExpectsTheInboxTablesIDType", func(t *testing.T) {
		t.Parallel()
		r := dialect.SchemaReport{IDType: "uuid"}
		produced := dialect.Table("billing_produced", "message_id", "message_id {id} not null")
		r.CheckTable(produced, found("message_id", dialect.FoundColumn{Name: "message_id", Type: "text", NotNull: true}),
			true, false, "text", "uuid")
		require.Equal(t, []string{"table billing_produced: column message_id is text, want uuid"}, r.Wrong)
		require.Equal(t, "uuid", r.IDType, "only the inbox table tells the type")
	})

	t.Run("AnObjectOfAnotherKindOrWithoutAKey", func(t *testing.T) {
		t.Parallel()
		var r dialect.SchemaReport
		view := found("")
		view.Kind = "view"
		r.CheckTable(want, view, false, true, "text")
		require.Equal(t, []string{"billing is not a table (view)"}, r.Wrong)
		var keyless dialect.SchemaReport
		keyless.CheckTable(want, found("", id, consumer, note), true, true, "text", "uuid")
		require.Equal(t, []string{"table billing has no primary key, want (message_id, consumer_id)"}, keyless.Wrong)
	})
}
