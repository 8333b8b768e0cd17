package postgres

import (
	"regexp"
	"strings"
	"testing"
	"unsafe"

	"github.com/effectively-once/watermill-inbox/internal/require"

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
	require.Contains(t, claim, `INSERT INTO "billing" (consumer_id`)
	require.Contains(t, claim, `FROM "billing_consumers" WHERE`)
	require.Same(t, unsafe.StringData(claim), unsafe.StringData(pg.sql(claimSQL, "billing")), "expanded once, then kept")

	walk := pg.walked(spanPagesSQL, dialect.CleanupPagesParams{Table: "billing", Partition: "billing_default"})
	require.Contains(t, walk, `DELETE FROM "billing_default"`)
	require.Contains(t, walk, `DELETE FROM "billing_produced" p`)

	lease := pg.sql(leaseReleaseSQL, "billing")
	require.Contains(t, lease, "processed_at = "+nowMinutesSQL)
}

func TestPartitionedMigrations_ChangeOnlyTheFirstMigration(t *testing.T) {
	t.Parallel()
	pg := &postgres{}
	ms, err := pg.Migrations("billing", "uuid")
	require.NoError(t, err)
	parted, err := pg.PartitionedMigrations("billing", ms)
	require.NoError(t, err)
	require.Contains(t, parted[0].Up, `) PARTITION BY RANGE (message_id);`)
	require.Contains(t, parted[0].Up, `CREATE TABLE IF NOT EXISTS "billing_default" PARTITION OF "billing" DEFAULT;`)
	require.Equal(t, strings.Count(ms[0].Up, "message_id   uuid"), strings.Count(parted[0].Up, "message_id   uuid"))
	require.Equal(t, ms[1:], parted[1:])
	require.NotEqual(t, ms[0].Up, parted[0].Up, "the input is left as it was")

	_, err = pg.PartitionedMigrations("billing", ms[1:])
	require.ErrorContains(t, err, "no migration 001")
	_, err = pg.Migrations("billing", "bigint")
	require.ErrorContains(t, err, `the ID type "bigint" is not supported`)
}

// A name goes into a statement as a quoted identifier, whatever it holds: one read from the catalog (a partition a
// user attached) may hold quotes, spaces or SQL, and must still name exactly itself.
func TestFill_QuotesEveryNameAsAnIdentifier(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct{ partition, want string }{
		"APlainName":   {"billing_p20260101t0000", `DROP TABLE IF EXISTS "billing_p20260101t0000"`},
		"AQuote":       {`x"; DROP TABLE billing; --`, `DROP TABLE IF EXISTS "x""; DROP TABLE billing; --"`},
		"TwoQuotes":    {`""`, `DROP TABLE IF EXISTS """"""`},
		"AnApostrophe": {`it's`, `DROP TABLE IF EXISTS "it's"`},
		"Unicode":      {`ünï "q"`, `DROP TABLE IF EXISTS "ünï ""q"""`},
	} {
		t.Run(name, func(t *testing.T) {
			got := partitionDDL(dropPartitionSQL, dialect.PartitionParams{Table: "billing", Name: c.partition})
			require.Equal(t, c.want, got)
		})
	}
	require.Equal(t, `SELECT 1 FROM "billing_produced", "billing"`,
		fill(`SELECT 1 FROM {table}_produced, {table}`, map[string]string{"table": "billing"}))
}

// No statement of the dialect names a table or a value inside a string literal, where quoting an identifier would
// not protect it: names go as quoted identifiers, values as parameters.
func TestStatements_PutNoNameInsideAStringLiteral(t *testing.T) {
	t.Parallel()
	for _, template := range []string{claimSQL, claimFreshSQL, claimAtCommitSQL, claimBatchSQL, producedSQL, saveSQL,
		finishSQL, takeoverSQL, unclaimSQL, readRowsSQL, leaseClaimSQL, leaseStateSQL, leaseExtendSQL, leaseReleaseSQL,
		leaseCompleteSQL, leaseFailSQL, spanSQL, spanPagesSQL, spanRestSQL, summarizeSQL, abandonedSQL, statsIDsSQL,
		forgetSQL, compactSQL, versionsCreateSQL, versionsReadSQL, versionsRecordSQL, consumerFindSQL, consumerIDSQL,
		partitionsSQL, deleteProducedSQL, detachPartitionSQL, dropPartitionSQL, createPartitionSQL, lockTableSQL,
		lockDefaultSQL, tableColumnsSQL, moveRowsSQL} {
		for _, lit := range stringLiteral.FindAllString(template, -1) {
			require.NotRegexp(t, namePlaceholder, lit, template)
		}
	}
}

var stringLiteral = regexp.MustCompile(`'[^']*'`)

// The tables a detached partition is looked for among are those whose names the inbox gives its partitions, to the
// character: a LIKE pattern would have taken the underscores of the table's name, and of the suffix, for any
// character, and put another table's name into a DROP.
func TestPartitionSuffix_MatchesOnlyTheInboxsOwnNames(t *testing.T) {
	t.Parallel()
	require.True(t, partitionSuffix.MatchString("_p20260101t0000"))
	for _, rest := range []string{"xp20260101t0000", "_p2026010xt0000", "_p20260101t00000", "_p20260101T0000",
		"_p20260101t000", "_p20260101t0000; DROP", ""} {
		require.False(t, partitionSuffix.MatchString(rest), rest)
	}
}

func TestWithID_AnIDThatIsNotASCIIIsSentAsBytesSoNoSessionEncodingReadsIt(t *testing.T) {
	t.Parallel()
	pg := &postgres{}
	query, arg := pg.withID(leaseReleaseSQL, "billing", "evt-1")
	require.Contains(t, query, "WHERE message_id = $2 AND")
	require.Equal(t, "evt-1", arg, "ASCII reads the same in every encoding, and $2 takes message_id's type")

	query, arg = pg.withID(leaseReleaseSQL, "billing", "\u0081\\'")
	require.Contains(t, query, "WHERE message_id = convert_from($2::bytea, 'UTF8') AND")
	require.Equal(t, []byte("\u0081\\'"), arg)
	require.NotContains(t, query, "{id}")
}

func TestDialect_EachCallKeepsItsOwnStatements(t *testing.T) {
	t.Parallel()
	one, two := Dialect().(*postgres), Dialect().(*postgres)
	require.False(t, one == two, "each Database holds a dialect of its own")
	one.sql(claimSQL, "billing")
	one.mu.RLock()
	kept := len(one.statements)
	one.mu.RUnlock()
	require.Equal(t, 1, kept)
	two.mu.RLock()
	defer two.mu.RUnlock()
	require.Empty(t, two.statements, "what one expanded is not in the other")
}
