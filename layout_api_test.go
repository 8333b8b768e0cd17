package inbox_test

import (
	"go/ast"
	"go/doc"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"strings"
	"testing"

	"github.com/effectively-once/watermill-inbox/internal/require"
)

// packageFiles parses the non-test files of the one package in dir.
func packageFiles(t *testing.T, fset *token.FileSet, dir string, mode parser.Mode) []*ast.File {
	t.Helper()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, mode)
	require.NoError(t, err)
	require.Len(t, pkgs, 1, "one package in %s", dir)
	var files []*ast.File
	for _, p := range pkgs {
		for _, f := range p.Files {
			files = append(files, f)
		}
	}
	return files
}

// indexLines counts the lines of `go doc -short` for the package in dir: one per group of constants or variables,
// function and type, and one per constant group, variable group and constructor listed under a type.
func indexLines(t *testing.T, dir string) int {
	t.Helper()
	fset := token.NewFileSet()
	p, err := doc.NewFromFiles(fset, packageFiles(t, fset, dir, parser.ParseComments), "example.com/"+dir)
	require.NoError(t, err)
	n := len(p.Consts) + len(p.Vars) + len(p.Funcs) + len(p.Types)
	for _, typ := range p.Types {
		n += len(typ.Consts) + len(typ.Vars) + len(typ.Funcs)
	}
	return n
}

func TestLayout_TheRootsIndexFitsOnAScreen(t *testing.T) {
	t.Parallel()
	require.LessOrEqual(t, indexLines(t, "."), 70, "lines of go doc -short of the root package")
}

// The seams a database package implements, and the root's interfaces: none wider than 8 methods.
func TestLayout_NoExportedInterfaceHasMoreThanEightMethods(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "source", nil)
	for _, dir := range []string{".", "dialect", "driver", "observe"} {
		pkg, err := (&types.Config{Importer: imp}).Check(dir, fset, packageFiles(t, fset, dir, 0), nil)
		require.NoError(t, err)
		for _, name := range pkg.Scope().Names() {
			tn, ok := pkg.Scope().Lookup(name).(*types.TypeName)
			if !ok || !tn.Exported() {
				continue
			}
			if it, ok := tn.Type().Underlying().(*types.Interface); ok {
				require.LessOrEqual(t, it.NumMethods(), 8, "methods of %s.%s", dir, name)
			}
		}
	}
}

func TestLayout_IndexLinesCountsWhatGoDocLists(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(dir+"/p.go", []byte(`package p

const (
	A = 1
	B = 2
)

var V, W = 1, 2

func F() {}

type T struct{}

func NewT() T { return T{} }

func (T) M() {}

type K int

const (
	K1 K = iota
	K2
)
`), 0o644))
	require.Equal(t, 7, indexLines(t, dir)) // const, var, F, T, NewT, K, K1's group
}
