// Command modproxy writes a directory that GOPROXY=file://DIR serves: the given modules at one version, each
// zipped from its directory by the rules the module proxy applies to a tag (submodule directories left out).
// It lets .ci/modules prove that the submodules build against the root module's release version before that
// version is tagged.
//
// Before it writes anything it checks what a user's build would meet in each MODULEDIR's go.mod: no replace
// directive naming a directory (a user's build ignores it, so the module would build here and nowhere else), and
// every requirement on one of the given modules at the release version, never a pseudo-version. Without -version
// the release version is the one the second MODULEDIR requires of the first.
//
// Usage:
//
//	modproxy [-version v0.1.0] -out DIR ROOTDIR MODULEDIR...
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

func main() {
	version := flag.String("version", "", "the version every module is served at, such as v0.1.0")
	out := flag.String("out", "", "the proxy directory to write")
	flag.Parse()
	if err := run(*version, *out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

func run(version, out string, dirs []string) error {
	if out == "" || len(dirs) < 2 {
		return errors.New("usage: modproxy [-version vX.Y.Z] -out DIR ROOTDIR MODULEDIR...")
	}
	mods := make([]*modfile.File, len(dirs))
	ours := make(map[string]bool)
	for i, dir := range dirs {
		f, err := parse(dir)
		if err != nil {
			return err
		}
		mods[i] = f
		ours[f.Module.Mod.Path] = true
	}
	if version == "" {
		version = required(mods[1], mods[0].Module.Mod.Path)
	}
	// A release version, never a pseudo-version: the check stands for a tag that a person will push.
	if !semver.IsValid(version) || semver.Canonical(version) != version || module.IsPseudoVersion(version) {
		return fmt.Errorf("version %q is not a release version such as v0.1.0", version)
	}
	var problems []string
	for i, f := range mods {
		problems = append(problems, check(dirs[i], f, ours, version)...)
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	for _, dir := range dirs {
		if err := serve(out, version, dir); err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
	}
	return nil
}

func parse(dir string) (*modfile.File, error) {
	name := filepath.Join(dir, "go.mod")
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	f, err := modfile.Parse(name, data, nil)
	if err != nil {
		return nil, err
	}
	if f.Module == nil {
		return nil, fmt.Errorf("%s has no module line", name)
	}
	return f, nil
}

// required returns the version f requires of path, or "" when it requires none.
func required(f *modfile.File, path string) string {
	for _, r := range f.Require {
		if r.Mod.Path == path {
			return r.Mod.Version
		}
	}
	return ""
}

// check lists what in f would break, or differ in, a user's build: directory replacements, and requirements on
// the project's own modules at anything but the release version.
func check(dir string, f *modfile.File, ours map[string]bool, version string) []string {
	var problems []string
	name := filepath.Join(dir, "go.mod")
	for _, r := range f.Replace {
		if modfile.IsDirectoryPath(r.New.Path) {
			problems = append(problems, fmt.Sprintf("%s:%d: replace %s => %s: a user's build ignores replace "+
				"directives, and go.work already serves the workspace's modules", name, r.Syntax.Start.Line,
				r.Old.Path, r.New.Path))
		}
	}
	for _, r := range f.Require {
		if !ours[r.Mod.Path] || r.Mod.Version == version {
			continue
		}
		why := "want the release version " + version
		if module.IsPseudoVersion(r.Mod.Version) {
			why = "a pseudo-version names a commit no user can fetch; " + why
		}
		problems = append(problems, fmt.Sprintf("%s:%d: require %s %s: %s", name, r.Syntax.Start.Line,
			r.Mod.Path, r.Mod.Version, why))
	}
	return problems
}

// serve writes the four files the proxy protocol reads for one module version: list, .info, .mod and .zip.
func serve(out, version, dir string) error {
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return err
	}
	path := modfile.ModulePath(gomod)
	if path == "" {
		return errors.New("go.mod has no module line")
	}
	mv := module.Version{Path: path, Version: version}
	escaped, err := module.EscapePath(path)
	if err != nil {
		return err
	}
	at := filepath.Join(out, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"list":            []byte(version + "\n"),
		version + ".info": info,
		version + ".mod":  gomod,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
			return err
		}
	}
	f, err := os.Create(filepath.Join(at, version+".zip"))
	if err != nil {
		return err
	}
	if err := zip.CreateFromDir(f, mv, dir); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
