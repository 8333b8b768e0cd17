package inbox_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The library's packages, by directory from the module's root; their non-test files are what a user compiles.
var libraryDirs = []string{
	".", "dialect", "dialect/postgres", "driver", "internal/batch", "internal/fingerprint",
	"internal/maintain", "internal/produced", "internal/readiness", "internal/require", "internal/store", "internal/testkit",
	"internal/text",
	"observe",
	"mysqlinbox", "pgxinbox", "otelinbox", "prommetrics", "inboxcheck", "inboxtest", "cmd/watermill-inbox",
}

type sourceFile struct {
	dir, path string
	lines     int
	ast       *ast.File
}

func librarySources(t *testing.T) []sourceFile {
	t.Helper()
	var out []sourceFile
	fset := token.NewFileSet()
	for _, dir := range libraryDirs {
		paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(paths) == 0 {
			t.Fatalf("no Go files in %s: %v", dir, err)
		}
		for _, p := range paths {
			if strings.HasSuffix(p, "_test.go") {
				continue
			}
			src, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			f, err := parser.ParseFile(fset, p, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, sourceFile{dir: dir, path: p, lines: strings.Count(string(src), "\n"), ast: f})
		}
	}
	return out
}

// The root package holds the API and the path of one message per mode; the SQL lives in the dialects.
func TestLayout_TheRootPackageIsSmallAndHoldsNoSQL(t *testing.T) {
	sql := regexp.MustCompile(`(?is)\b(SELECT\b.+\bFROM|INSERT\s+INTO|UPDATE\b.+\bSET|DELETE\s+FROM|CREATE\s+TABLE|ALTER\s+TABLE)\b`)
	total := 0
	for _, f := range librarySources(t) {
		if f.dir != "." {
			continue
		}
		total += f.lines
		ast.Inspect(f.ast, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil && sql.MatchString(s) {
					t.Errorf("%s holds SQL text: %q", f.path, s)
				}
			}
			return true
		})
	}
	if total > 4000 {
		t.Errorf("the root package's non-test source is %d lines; keep it at most 4,000 (move what is not the API or "+
			"a message's path into an internal package)", total)
	}
}

func TestLayout_NoLibrarySourceFileIsOver600Lines(t *testing.T) {
	for _, f := range librarySources(t) {
		if f.lines > 600 {
			t.Errorf("%s is %d lines; split it by role to at most 600", f.path, f.lines)
		}
	}
}

// Database errors are classified in one place: the store (internal/store) for the message path and the
// operations. A dialect classifies its own driver's errors (its Classify), and dialect's short transactions retry
// what it calls retryable; no mode and no maintenance pass reads the classification itself.
func TestLayout_OnlyTheStoreClassifiesDatabaseErrors(t *testing.T) {
	allowed := map[string]bool{"internal/store": true, "dialect": true, "dialect/postgres": true, "mysqlinbox": true}
	for _, f := range librarySources(t) {
		if allowed[f.dir] {
			continue
		}
		ast.Inspect(f.ast, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Classify" {
				t.Errorf("%s reads the dialect's classification of an error (%s); ask the store instead", f.path, f.ast.Name.Name)
			}
			return true
		})
	}
}
