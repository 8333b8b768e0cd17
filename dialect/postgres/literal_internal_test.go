package postgres

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestInline_WritesEachArgumentAsALiteralOfItsOwn(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		query string
		args  []any
		want  string
	}{
		"Values": {`INSERT INTO t (a, b, c) VALUES ($1, $2, $3::text::"char")`, []any{7, "evt-1", "d"},
			`INSERT INTO t (a, b, c) VALUES (7, E'evt-1', E'd'::text::"char")`},
		"QuotesAndBackslashesDoubled": {`SELECT $1`, []any{`it's \'; --`}, `SELECT E'it''s \\''; --'`},
		"TenIsNotOneFollowedByZero": {`SELECT $1, $10`, []any{1, 2, 3, 4, 5, 6, 7, 8, 9, "ten"},
			`SELECT 1, E'ten'`},
		"NegativeNumbersKeepTheirCast": {`SELECT $1::int`, []any{int64(-3)}, `SELECT (-3)::int`},
		"NilBoolAndSmallInts":          {`SELECT $1, $2, $3, $4`, []any{nil, true, int16(2), int32(-4)}, `SELECT NULL, true, 2, (-4)`},
		"QuotedTextIsLeftAlone":        {`SELECT '$1', "$1", $1`, []any{"x"}, `SELECT '$1', "$1", E'x'`},
		"CommentsAreLeftOut":           {"SELECT $1 -- takes $2\n, 2", []any{"x"}, "SELECT E'x' \n, 2"},
		"DollarsThatAreNoParameter":    {`SELECT $$a$$, $1`, []any{"b"}, `SELECT $$a$$, E'b'`},
		"Unicode":                      {`SELECT $1`, []any{"ünïcødé 🚀"}, `SELECT E'ünïcødé 🚀'`},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := inline(c.query, c.args)
			require.True(t, ok)
			require.Equal(t, c.want, got)
		})
	}
}

// What no literal carries exactly goes with its arguments, for the server to judge as it always did.
func TestInline_KeepsTheArgumentsOfWhatNoLiteralCarries(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		query string
		args  []any
	}{
		"ANULByte":           {`SELECT $1`, []any{"evt\x00"}},
		"TextThatIsNotUTF8":  {`SELECT $1`, []any{"evt\xff"}},
		"Bytes":              {`SELECT $1`, []any{[]byte("raw")}},
		"AFloat":             {`SELECT $1`, []any{1.5}},
		"AMissingArgument":   {`SELECT $1, $2`, []any{1}},
		"ParameterZero":      {`SELECT $0`, []any{1}},
		"AnUnclosedQuote":    {`SELECT 'x, $1`, []any{1}},
		"NoArgumentsAtAll":   {`SELECT 1`, nil},
		"AnOverlongNumber":   {`SELECT $99999999999999999999`, []any{1}},
		"AnUnsupportedValue": {`SELECT $1`, []any{struct{}{}}},
	} {
		t.Run(name, func(t *testing.T) {
			_, ok := inline(c.query, c.args)
			require.False(t, ok)
		})
	}
}
