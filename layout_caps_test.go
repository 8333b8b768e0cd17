package inbox_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectively-once/watermill-inbox/internal/require"
)

// What a dialect or a pool can do beyond its interface is found once, when the Database or the store is made (or
// when an operation off the message's path starts), never by a type assertion on the path of a message. The
// functions that may assert, and why.
var capabilityFinders = map[string]string{
	"capabilitiesOf":     "internal/store: the store's dialect, once, in New",
	"OnDialect":          "the Database's dialect and pool, once",
	"claimsAtCommit":     "New's check of WithClaimAtCommit",
	"New":                "New's check of WithFingerprint",
	"check":              "the start of New, Migrate and the maintenance calls",
	"checkServer":        "the schema gate, once per Database",
	"wrongServer":        "the schema gate, once per Database",
	"addFingerprint":     "Migrate",
	"inspectFingerprint": "the schema gate",
	"applyAtCommit":      "a transaction's own capability (CommitWith), which only the transaction can tell",
}

func TestLayout_NoCapabilityIsAskedForOnTheMessagesPath(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	var found []string
	for _, dir := range []string{".", "internal/store"} {
		paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		for _, p := range paths {
			if strings.HasSuffix(p, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, p, nil, 0)
			require.NoError(t, err)
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || capabilityFinders[fn.Name.Name] != "" {
					continue
				}
				ast.Inspect(fn, func(n ast.Node) bool {
					if a, ok := n.(*ast.TypeAssertExpr); ok && a.Type != nil && isSeamType(a.Type) && !isContextValue(a.X) {
						found = append(found, fset.Position(a.Pos()).String()+" in "+fn.Name.Name)
					}
					return true
				})
			}
		}
	}
	require.Empty(t, found, "type assertions to a dialect or driver interface on a message's path")
}

// isSeamType reports whether e names a type of the dialect or the driver package.
func isSeamType(e ast.Expr) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && (pkg.Name == "dialect" || pkg.Name == "driver")
}

// isContextValue reports whether e is a call of a context's Value: what the assertion finds is a value the inbox
// put there itself, not a capability.
func isContextValue(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "Value"
}
