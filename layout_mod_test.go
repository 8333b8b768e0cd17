package inbox_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/effectively-once/watermill-inbox/internal/require"
)

// A user of the root module inherits its requirements: Watermill, watermill-sql v3 (whose subscriber's transaction
// the one line joins), lib/pq and uuid, and what they require. Prometheus, OpenTelemetry, pgx, MySQL's driver and
// testify belong to the modules that need them (prommetrics, otelinbox, pgxinbox, mysqlinbox, inboxtest's users).
func TestLayout_TheRootModuleRequiresOnlyWhatTheCoreNeeds(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("go.mod")
	require.NoError(t, err)
	direct, all := goModRequires(string(src))
	require.Equal(t, []string{
		"github.com/ThreeDotsLabs/watermill",
		"github.com/ThreeDotsLabs/watermill-sql/v3",
		"github.com/google/uuid",
		"github.com/lib/pq",
	}, direct)
	for _, m := range all {
		for _, banned := range []string{"prometheus", "opentelemetry", "testify", "jackc/pgx", "go-sql-driver"} {
			require.False(t, strings.Contains(m, banned), "the root module requires %s", m)
		}
	}
}

func TestLayout_GoModRequiresReadsBothForms(t *testing.T) {
	t.Parallel()
	direct, all := goModRequires("module m\n\nrequire a.io/x v1.0.0\n\nrequire (\n\tb.io/y v1.2.0\n\tc.io/z v0.1.0 // indirect\n)\n")
	require.Equal(t, []string{"a.io/x", "b.io/y"}, direct)
	require.Equal(t, []string{"a.io/x", "b.io/y", "c.io/z"}, all)
}

// goModRequires returns the modules a go.mod requires directly, and all it requires, each sorted.
func goModRequires(gomod string) (direct, all []string) {
	inBlock := false
	for _, line := range strings.Split(gomod, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "require (":
			inBlock = true
			continue
		case inBlock && line == ")":
			inBlock = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !inBlock:
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		all = append(all, fields[0])
		if !strings.Contains(line, "// indirect") {
			direct = append(direct, fields[0])
		}
	}
	slices.Sort(direct)
	slices.Sort(all)
	return direct, all
}
