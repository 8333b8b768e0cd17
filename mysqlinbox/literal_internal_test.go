package mysqlinbox

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLiteralWritesStringsAsHexAndIntegersInDecimal(t *testing.T) {
	got := literal("INSERT INTO t VALUES (?, ?, ?) -- end", "it's \\ ?", "", int64(-42))
	require.Equal(t, `INSERT INTO t VALUES (X'69742773205c203f', X'', -42) -- end`, got)
	require.Panics(t, func() { literal("SELECT ?", 1.5) }, "a type without a literal")
}
