package dialect

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/effectively-once/watermill-inbox/driver"
)

// PlainName reports whether name holds only lower-case ASCII letters, digits and underscores, and something: a name
// that means the same quoted or not in every dialect, and that holds no quote of any. The inbox's options admit no
// other table name; the dialects check it again where they put it into SQL text.
func PlainName(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range []byte(name) {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// LoadMigrations reads a dialect's versioned schema changes from fsys: in dir, a file NNN_name.up.sql and its
// NNN_name.down.sql for each version. The files are the ones users may hand to a migration tool of their own, so
// they name the default table, defaultTable; LoadMigrations writes table in its place, its one change to them.
// The files must quote every identifier that starts with defaultTable, and table must be a validated name (lower-
// case letters, digits and underscores), so that the replacement changes identifiers and nothing else.
//
// Each of variants is a directory of files of the same names that replace some versions' SQL for a variant of the
// schema (another type of a column, a partitioned table): a variant's up file replaces its version's Up, and its
// down file, when it has one, the Down. A later variant wins over an earlier one.
func LoadMigrations(fsys fs.FS, dir, defaultTable, table string, variants ...string) ([]Migration, error) {
	if !PlainName(table) {
		return nil, fmt.Errorf("migrations for table %q: a table's name may hold only lower-case letters, digits and underscores", table)
	}
	rename := strings.NewReplacer(defaultTable, table)
	read := func(name string) (string, error) {
		b, err := fs.ReadFile(fsys, name)
		return rename.Replace(string(b)), err
	}
	ups, err := fs.Glob(fsys, path.Join(dir, "*.up.sql"))
	if err != nil {
		return nil, err
	}
	sort.Strings(ups)
	out := make([]Migration, 0, len(ups))
	byVersion := map[int]int{}
	for _, up := range ups {
		m, err := migrationFile(up)
		if err != nil {
			return nil, err
		}
		if m.Up, err = read(up); err != nil {
			return nil, err
		}
		if m.Down, err = read(strings.TrimSuffix(up, ".up.sql") + ".down.sql"); err != nil {
			return nil, err
		}
		byVersion[m.Version] = len(out)
		out = append(out, m)
	}
	for _, variant := range variants {
		ups, err := fs.Glob(fsys, path.Join(variant, "*.up.sql"))
		if err != nil {
			return nil, err
		}
		for _, up := range ups {
			v, err := migrationFile(up)
			if err != nil {
				return nil, err
			}
			n, ok := byVersion[v.Version]
			if !ok {
				return nil, fmt.Errorf("migration file %s: no version %d to replace", up, v.Version)
			}
			if out[n].Up, err = read(up); err != nil {
				return nil, err
			}
			down, err := read(strings.TrimSuffix(up, ".up.sql") + ".down.sql")
			switch {
			case err == nil:
				out[n].Down = down
			case !errors.Is(err, fs.ErrNotExist):
				return nil, err
			}
		}
	}
	return out, nil
}

// migrationFile reads a migration's version and name from the name of its up file.
func migrationFile(up string) (Migration, error) {
	num, name, _ := strings.Cut(strings.TrimSuffix(path.Base(up), ".up.sql"), "_")
	version, err := strconv.Atoi(num)
	if err != nil {
		return Migration{}, fmt.Errorf("migration file %s: version is not a number", up)
	}
	return Migration{Version: version, Name: name}, nil
}

// Apply runs, on q, each migration of p newer than version from, each as the statements split returns for its Up
// (nil: the whole file as one statement), and records its version with the statement record (parameters: the
// version and the name); then it runs p.Check. It returns the version it reached, which is from when it applied
// none. pkg names the dialect's package in errors ("inbox", "mysqlinbox").
func (p MigrateParams) Apply(ctx context.Context, q driver.Executor, from int, record string, split func(string) []string, pkg string) (to int, err error) {
	to = from
	for _, m := range p.Migrations {
		if m.Version <= from {
			continue
		}
		stmts := []string{m.Up}
		if split != nil {
			stmts = split(m.Up)
		}
		for _, stmt := range stmts {
			if _, err := q.Exec(ctx, stmt); err != nil {
				return to, fmt.Errorf("%s: migrate: apply %03d_%s to %s: %w", pkg, m.Version, m.Name, p.Table, err)
			}
		}
		if _, err := q.Exec(ctx, record, m.Version, m.Name); err != nil {
			return to, fmt.Errorf("%s: migrate: record %03d_%s: %w", pkg, m.Version, m.Name, err)
		}
		to = m.Version
	}
	if p.Check != nil {
		if err := p.Check(ctx, q, from, to); err != nil {
			return to, err
		}
	}
	return to, nil
}
