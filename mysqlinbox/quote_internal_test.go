package mysqlinbox

import (
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// identifier is one backquoted identifier as MySQL reads it: a doubled backquote stands for one.
var identifier = regexp.MustCompile("`(?:[^`]|``)*`")

// requireNamesQuoted fails unless every mention of name in sql, outside comments, is inside a backquoted
// identifier that MySQL reads as one name beginning with name.
func requireNamesQuoted(t *testing.T, sql, name, what string) {
	t.Helper()
	var code []string
	for _, line := range strings.Split(sql, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			code = append(code, line)
		}
	}
	rest := identifier.ReplaceAllStringFunc(strings.Join(code, "\n"), func(quoted string) string {
		if unquoted := strings.ReplaceAll(quoted[1:len(quoted)-1], "``", "`"); strings.HasPrefix(unquoted, name) {
			return "" // the name, whole, as one identifier
		}
		return quoted
	})
	require.NotContains(t, rest, "box", "%s names the table outside a quoted identifier:\n%s", what, rest)
}

// The table name is validated by inbox's options before it reaches the dialect; the dialect quotes it as an
// identifier all the same, so that a name the pattern let through by mistake is still one name. With a backquote
// in it, every statement names the table, and the tables and indexes named after it, as one quoted identifier
// each; the migrations do too, or refuse the name.
func TestSecurity_TheTableNameIsQuotedAsAnIdentifierEverywhere(t *testing.T) {
	t.Parallel()
	const name = "in`box"
	q := reflect.ValueOf(newQueries(name)).Elem()
	named := 0
	for i := range q.NumField() {
		if f := q.Field(i); f.Kind() == reflect.String {
			requireNamesQuoted(t, f.String(), name, q.Type().Field(i).Name)
			if strings.Contains(f.String(), "`in``box") {
				named++
			}
		}
	}
	require.Greater(t, named, 30, "the statements name the table")

	ms, err := Dialect().Schema().Migrations(name, "")
	if err != nil {
		return // refused before any SQL is made of it: as safe
	}
	for _, m := range ms {
		requireNamesQuoted(t, m.Up, name, m.Name+" up")
		requireNamesQuoted(t, m.Down, name, m.Name+" down")
		require.Contains(t, m.Up, "`in``box_produced`")
	}
}

func TestDialect_EachCallKeepsItsOwnStatements(t *testing.T) {
	t.Parallel()
	one, two := Dialect().(*mysqlDialect), Dialect().(*mysqlDialect)
	require.False(t, one == two, "each Database holds a dialect of its own")
	one.sql("billing")
	_, kept := one.queries.Load("billing")
	require.True(t, kept)
	_, shared := two.queries.Load("billing")
	require.False(t, shared, "what one wrote is not in the other")
}
