package dialect_test

import (
	"testing"
	"testing/fstest"

	"github.com/effectively-once/watermill-inbox/internal/require"

	"github.com/effectively-once/watermill-inbox/dialect"
)

func TestLoadMigrations(t *testing.T) {
	t.Parallel()
	files := fstest.MapFS{
		"m/002_lease.up.sql":        {Data: []byte(`ALTER TABLE "inbox_t" ADD x int;`)},
		"m/002_lease.down.sql":      {Data: []byte(`ALTER TABLE "inbox_t" DROP x;`)},
		"m/001_inbox.up.sql":        {Data: []byte(`CREATE TABLE "inbox_t" (id text); CREATE TABLE "inbox_t_produced" ();`)},
		"m/001_inbox.down.sql":      {Data: []byte(`DROP TABLE "inbox_t";`)},
		"m/uuid/001_inbox.up.sql":   {Data: []byte(`CREATE TABLE "inbox_t" (id uuid);`)},
		"m/wide/002_lease.up.sql":   {Data: []byte(`ALTER TABLE "inbox_t" ADD x bigint;`)},
		"m/wide/002_lease.down.sql": {Data: []byte(`ALTER TABLE "inbox_t" DROP x; -- wide`)},
	}

	t.Run("RefusesATableNameThatIsNotPlain", func(t *testing.T) {
		t.Parallel()
		for _, name := range []string{`billing"; DROP TABLE accounts; --`, "Billing", "bill ing", "billing`", ""} {
			_, err := dialect.LoadMigrations(files, "m", "inbox_t", name)
			require.ErrorContains(t, err, "may hold only lower-case letters, digits and underscores", name)
		}
	})

	t.Run("ReadsEachVersionInOrderForTheTable", func(t *testing.T) {
		t.Parallel()
		ms, err := dialect.LoadMigrations(files, "m", "inbox_t", "billing")
		require.NoError(t, err)
		require.Equal(t, []dialect.Migration{
			{Version: 1, Name: "inbox", Up: `CREATE TABLE "billing" (id text); CREATE TABLE "billing_produced" ();`,
				Down: `DROP TABLE "billing";`},
			{Version: 2, Name: "lease", Up: `ALTER TABLE "billing" ADD x int;`, Down: `ALTER TABLE "billing" DROP x;`},
		}, ms)
	})

	t.Run("AVariantReplacesTheVersionsItHasAndKeepsTheDownItLacks", func(t *testing.T) {
		t.Parallel()
		ms, err := dialect.LoadMigrations(files, "m", "inbox_t", "billing", "m/uuid", "m/wide")
		require.NoError(t, err)
		require.Equal(t, `CREATE TABLE "billing" (id uuid);`, ms[0].Up)
		require.Equal(t, `DROP TABLE "billing";`, ms[0].Down)
		require.Equal(t, `ALTER TABLE "billing" ADD x bigint;`, ms[1].Up)
		require.Equal(t, `ALTER TABLE "billing" DROP x; -- wide`, ms[1].Down)
	})

	t.Run("RefusesAFileWithoutAVersionOrADownOrAVariantOfNoVersion", func(t *testing.T) {
		t.Parallel()
		_, err := dialect.LoadMigrations(fstest.MapFS{"m/first.up.sql": {}, "m/first.down.sql": {}}, "m", "t", "t")
		require.ErrorContains(t, err, "m/first.up.sql: version is not a number")
		_, err = dialect.LoadMigrations(fstest.MapFS{"m/001_a.up.sql": {}}, "m", "t", "t")
		require.ErrorContains(t, err, "001_a.down.sql")
		_, err = dialect.LoadMigrations(fstest.MapFS{"m/001_a.up.sql": {}, "m/001_a.down.sql": {}, "v/003_c.up.sql": {}},
			"m", "t", "t", "v")
		require.ErrorContains(t, err, "v/003_c.up.sql: no version 3 to replace")
	})
}
