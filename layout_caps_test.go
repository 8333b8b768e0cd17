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

// What a dialect or a pool can do beyond its interface is found once, when the Database, the store or the batch
// engine is made (or when an operation off the message's path starts), never by a type assertion on the path of a
// message. The functions that may assert, named as package.Func or package.Type.Method, and why each runs once.
var capabilityFinders = map[string]string{
	"store.capabilitiesOf":       "the store's dialect, once, in store.New",
	"inbox.OnDialect":            "the Database's dialect and pool, once",
	"inbox.claimsAtCommit":       "Database.New's check of WithClaimAtCommit, once per Inbox",
	"inbox.Database.New":         "Database.New's check of WithFingerprint, once per Inbox",
	"inbox.Database.check":       "once at the start of New, of Migrate and of each maintenance call",
	"inbox.Database.checkServer": "the schema gate, once per Database",
	"inbox.Database.wrongServer": "the schema gate, once per Database",
	"inbox.addFingerprint":       "Migrate, once per call",
	"inbox.inspectFingerprint":   "the schema gate, once per Inbox until the schema passes (again after it was lost)",
	"batch.New":                  "the engine's pool, once, when the Inbox is built",
}

// capabilityDirs are the packages whose functions run on a message's path.
var capabilityDirs = []string{".", "internal/store", "internal/batch"}

func TestLayout_NoCapabilityIsAskedForOnTheMessagesPath(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	var found []string
	seen := map[string]bool{}
	for _, dir := range capabilityDirs {
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
				if !ok {
					continue
				}
				name := funcName(f.Name.Name, fn)
				if capabilityFinders[name] != "" {
					seen[name] = true
					continue
				}
				ast.Inspect(fn, func(n ast.Node) bool {
					for _, at := range seamAssertions(n) {
						found = append(found, fset.Position(at).String()+" in "+name)
					}
					return true
				})
			}
		}
	}
	require.Empty(t, found, "type assertions to a dialect or driver interface on a message's path")
	for name := range capabilityFinders {
		require.True(t, seen[name], "capabilityFinders names %s, which is no function of %v", name, capabilityDirs)
	}
}

// funcName names fn as capabilityFinders does: package.Func, or package.Type.Method.
func funcName(pkg string, fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return pkg + "." + fn.Name.Name
	}
	recv := fn.Recv.List[0].Type
	if star, ok := recv.(*ast.StarExpr); ok {
		recv = star.X
	}
	if idx, ok := recv.(*ast.IndexExpr); ok {
		recv = idx.X
	}
	if id, ok := recv.(*ast.Ident); ok {
		return pkg + "." + id.Name + "." + fn.Name.Name
	}
	return pkg + "." + fn.Name.Name
}

// seamAssertions returns where n asserts a value to a type of the dialect or the driver package: x.(T), or a case
// of a type switch. An assertion on a context's Value is not one: what it finds is a value the inbox put there
// itself, not a capability.
func seamAssertions(n ast.Node) []token.Pos {
	switch n := n.(type) {
	case *ast.TypeAssertExpr:
		if n.Type != nil && isSeamType(n.Type) && !isContextValue(n.X) {
			return []token.Pos{n.Pos()}
		}
	case *ast.TypeSwitchStmt:
		if isContextValue(switchedOn(n)) {
			return nil
		}
		var at []token.Pos
		for _, c := range n.Body.List {
			for _, e := range c.(*ast.CaseClause).List {
				if isSeamType(e) {
					at = append(at, e.Pos())
				}
			}
		}
		return at
	}
	return nil
}

// switchedOn returns the x of a type switch's x.(type).
func switchedOn(s *ast.TypeSwitchStmt) ast.Expr {
	var e ast.Expr
	switch a := s.Assign.(type) {
	case *ast.AssignStmt:
		e = a.Rhs[0]
	case *ast.ExprStmt:
		e = a.X
	}
	if ta, ok := e.(*ast.TypeAssertExpr); ok {
		return ta.X
	}
	return nil
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
