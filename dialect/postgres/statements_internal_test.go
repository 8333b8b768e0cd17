package postgres

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/effectively-once/watermill-inbox/dialect"
)

// The tests of this file need no database, and run under -short.

func TestTables_KeepTheInboxTablesColumnsInTheirStoredOrder(t *testing.T) {
	t.Parallel()
	inbox := tables[0]
	require.Equal(t, "{table}", inbox.Name, "the inbox table comes first: the others hang off it")
	require.Equal(t, "message_id", inbox.Columns[3].Name, "after the columns that need alignment")
	require.Equal(t, dialect.IDColumnType, inbox.Columns[3].Type, "the ID column's type is the table's own")
	require.Equal(t, dialect.ColumnShape{Name: "state", Type: `"char"`, NotNull: true}, inbox.Columns[2])
}

func TestExpand_NamesTheTableInEveryPlaceholderOnceAndKeepsTheText(t *testing.T) {
	t.Parallel()
	pg := &postgres{}
	claim := pg.sql(claimSQL, "billing")
	require.NotContains(t, claim, "{")
	require.Contains(t, claim, "INSERT INTO billing (consumer_id")
	require.Contains(t, claim, "FROM billing_consumers WHERE")
	require.Same(t, unsafe.StringData(claim), unsafe.StringData(pg.sql(claimSQL, "billing")), "expanded once, then kept")

	walk := pg.walked(spanPagesSQL, dialect.CleanupPagesParams{Table: "billing", Partition: "billing_default"})
	require.Contains(t, walk, "DELETE FROM billing_default")
	require.Contains(t, walk, "DELETE FROM billing_produced p")

	lease := pg.sql(leaseReleaseSQL, "billing")
	require.Contains(t, lease, "processed_at = "+nowMinutesSQL)
}

func TestPartitionedMigrations_ChangeOnlyTheFirstMigration(t *testing.T) {
	t.Parallel()
	ms, err := theDialect.Migrations("billing", "uuid")
	require.NoError(t, err)
	parted, err := theDialect.PartitionedMigrations("billing", ms)
	require.NoError(t, err)
	require.Contains(t, parted[0].Up, `) PARTITION BY RANGE (message_id);`)
	require.Contains(t, parted[0].Up, `CREATE TABLE IF NOT EXISTS "billing_default" PARTITION OF "billing" DEFAULT;`)
	require.Equal(t, strings.Count(ms[0].Up, "message_id   uuid"), strings.Count(parted[0].Up, "message_id   uuid"))
	require.Equal(t, ms[1:], parted[1:])
	require.NotEqual(t, ms[0].Up, parted[0].Up, "the input is left as it was")

	_, err = theDialect.PartitionedMigrations("billing", ms[1:])
	require.ErrorContains(t, err, "no migration 001")
	_, err = theDialect.Migrations("billing", "bigint")
	require.ErrorContains(t, err, `the ID type "bigint" is not supported`)
}
