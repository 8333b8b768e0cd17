package inbox_test

import (
	"go/ast"
	"go/importer"
	"go/token"
	"go/types"
	"path/filepath"
	"slices"
	"testing"

	"github.com/effectively-once/watermill-inbox/internal/require"
)

// The packages whose files depend on one another in one direction only: a file that uses another's declarations
// is never used by it, so each file reads after the ones it uses, and a mode never reaches back up into the
// middleware that chose it.
var oneWayDirs = []string{
	".", "dialect", "dialect/postgres", "driver", "internal/batch", "internal/fingerprint", "internal/maintain",
	"internal/produced", "internal/readiness", "internal/store", "internal/text",
}

func TestLayout_FilesOfAPackageDependOnOneAnotherInOneDirection(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "source", nil)
	for _, dir := range oneWayDirs {
		t.Run(dir, func(t *testing.T) {
			deps := fileDeps(t, fset, imp, dir)
			require.Empty(t, fileCycle(deps), "files of %s that use one another, in a cycle", dir)
		})
	}
	// The middleware picks a mode; nothing below it calls back up.
	for from, to := range fileDeps(t, fset, imp, ".") {
		require.NotContains(t, to, "middleware.go", "%s uses middleware.go", from)
	}
}

// fileDeps returns, for each non-test file of the package in dir, the other files of it whose declarations it uses.
func fileDeps(t *testing.T, fset *token.FileSet, imp types.Importer, dir string) map[string][]string {
	t.Helper()
	files := packageFiles(t, fset, dir, 0)
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	pkg, err := (&types.Config{Importer: imp}).Check(dir, fset, files, info)
	require.NoError(t, err)
	deps := map[string][]string{}
	for id, obj := range info.Uses {
		if obj.Pkg() != pkg {
			continue
		}
		if _, method := obj.(*types.Func); obj.Parent() != pkg.Scope() && !method {
			continue // a local name, a field: its file is the one it is used in, or its type's
		}
		from, to := filepath.Base(fset.Position(id.Pos()).Filename), filepath.Base(fset.Position(obj.Pos()).Filename)
		if from != to && !slices.Contains(deps[from], to) {
			deps[from] = append(deps[from], to)
		}
	}
	return deps
}

// fileCycle returns files that use one another in a cycle, the first file again at the end, or nil.
func fileCycle(deps map[string][]string) []string {
	const (
		unseen = iota
		open
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(f string) []string
	visit = func(f string) []string {
		state[f] = open
		path = append(path, f)
		for _, g := range deps[f] {
			switch state[g] {
			case open:
				return append(slices.Clone(path[slices.Index(path, g):]), g)
			case unseen:
				if c := visit(g); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		state[f] = done
		return nil
	}
	var names []string
	for f := range deps {
		names = append(names, f)
	}
	slices.Sort(names)
	for _, f := range names {
		if state[f] == unseen {
			if c := visit(f); c != nil {
				return c
			}
		}
	}
	return nil
}

func TestLayout_FileCycleFindsACycle(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"a.go", "b.go", "c.go", "a.go"},
		fileCycle(map[string][]string{"a.go": {"b.go"}, "b.go": {"c.go"}, "c.go": {"a.go"}, "d.go": {"a.go"}}))
	require.Empty(t, fileCycle(map[string][]string{"a.go": {"b.go"}, "b.go": {"c.go"}, "d.go": {"a.go", "c.go"}}))
}
