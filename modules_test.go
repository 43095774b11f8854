package idem_test

import (
	"bufio"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNoModuleImportsAnothersInternal keeps each module of the repository
// (the root and its companions: otel, pgqueue, cmd/idemq, interop, bench,
// the examples) on its own internal packages: a companion uses only what
// another module exports. Once versions are tagged, a pgqueue of one version
// can meet a root of another, and an internal package promises nothing
// between them.
//
// The go command does not catch this. It allows importing a path with an
// "internal" element from any package under the directory that holds the
// internal one, by import path, not by module; the companion modules live
// under the root's directory and share its path prefix
// (github.com/idem-go/idem/pgqueue is under github.com/idem-go/idem), so
// their imports of github.com/idem-go/idem/internal/... compile. Hence this
// check: it parses every Go file's imports (go/parser, no build, no network)
// and requires that an internal package belong to the importing file's own
// module.
func TestNoModuleImportsAnothersInternal(t *testing.T) {
	mods := repoModules(t)
	require.Contains(t, mods, ".", "the root module")
	require.Greater(t, len(mods), 1, "the companion modules")
	paths := slices.Collect(maps.Values(mods))

	files := 0
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != "." && skippedDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		files++
		own := mods[owningModuleDir(mods, filepath.Dir(p))]
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, spec := range f.Imports {
			imp, err := strconv.Unquote(spec.Path.Value)
			require.NoError(t, err)
			if !mayImport(imp, own, paths) {
				t.Errorf("%s (module %s) imports %s, internal to another module: use what that module exports, or a copy of its own", p, own, imp)
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, files, 100, "Go files checked")
}

// TestMayImport pins the rule the test above applies.
func TestMayImport(t *testing.T) {
	mods := []string{
		"github.com/idem-go/idem", "github.com/idem-go/idem/pgqueue",
		"github.com/idem-go/idem/otel", "github.com/idem-go/idem/examples/otel",
	}
	tests := []struct {
		imp, own string
		want     bool
	}{
		{"github.com/idem-go/idem/internal/redact", "github.com/idem-go/idem", true},
		{"github.com/idem-go/idem/internal/redact", "github.com/idem-go/idem/pgqueue", false},
		{"github.com/idem-go/idem/queue/internal/x", "github.com/idem-go/idem/pgqueue", false},
		{"github.com/idem-go/idem/pgqueue/internal/pgtest", "github.com/idem-go/idem/pgqueue", true},
		{"github.com/idem-go/idem/pgqueue/internal/pgtest", "github.com/idem-go/idem", false},
		{"github.com/idem-go/idem/otel/internal/x", "github.com/idem-go/idem/examples/otel", false},
		{"github.com/idem-go/idem/queue", "github.com/idem-go/idem/pgqueue", true},
		{"github.com/idem-go/idem/internalish", "github.com/idem-go/idem/pgqueue", true},
		{"example.com/lib/internal/x", "github.com/idem-go/idem", false},
	}
	for _, tt := range tests {
		got := mayImport(tt.imp, tt.own, mods)
		assert.Equal(t, tt.want, got, "mayImport(%q, %q) = %v, want %v", tt.imp, tt.own, got, tt.want)
	}
}

// repoModules maps the directory of each go.mod in the repository to the
// module path it declares.
func repoModules(t *testing.T) map[string]string {
	t.Helper()
	mods := map[string]string{}
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != "." && skippedDir(d.Name()) {
			return filepath.SkipDir
		}
		if d.IsDir() || d.Name() != "go.mod" {
			return nil
		}
		mods[filepath.Dir(p)] = modulePath(t, p)
		return nil
	})
	require.NoError(t, err)
	return mods
}

// modulePath reads the module directive of the go.mod file at p.
func modulePath(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	require.NoError(t, sc.Err())
	t.Fatalf("%s has no module directive", p)
	return ""
}

// skippedDir reports whether the go command ignores a directory so named.
func skippedDir(name string) bool {
	return name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")
}

// owningModuleDir returns the directory of the innermost module holding dir.
func owningModuleDir(mods map[string]string, dir string) string {
	for {
		if _, ok := mods[dir]; ok || dir == "." {
			return dir
		}
		dir = filepath.Dir(dir)
	}
}

// mayImport reports whether a file of module own may import imp: yes
// unless imp has an "internal" element and the package is not own's, the
// module of a package being the one of mods with the longest path holding it.
func mayImport(imp, own string, mods []string) bool {
	if !slices.Contains(strings.Split(imp, "/"), "internal") {
		return true
	}
	owner := ""
	for _, m := range mods {
		if (imp == m || strings.HasPrefix(imp, m+"/")) && len(m) > len(owner) {
			owner = m
		}
	}
	return owner == own
}

// benchOnly are the module paths (prefixes) that only the benchmark and
// interop modules may require: the peers measured beside idem, River among
// them, and the bench module itself, which holds the latency proxy.
var benchOnly = []string{
	"github.com/riverqueue/", "github.com/hashicorp/go-retryablehttp", "resty.dev/", "github.com/go-resty/",
	"github.com/stripe/", "github.com/sony/gobreaker", "github.com/failsafe-go/", "github.com/idem-go/idem/bench",
}

// TestPublishedModulesLeaveThePeersOut: no module published to users
// (release/modules) requires a peer of the benchmarks or the bench module,
// directly or indirectly, so that installing idem never brings them; and
// the root requires only its four chosen modules directly.
func TestPublishedModulesLeaveThePeersOut(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("release", "modules"))
	require.NoError(t, err)
	var dirs []string
	for line := range strings.Lines(string(raw)) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			dirs = append(dirs, line)
		}
	}
	require.Contains(t, dirs, ".")
	for _, dir := range dirs {
		direct, all := requires(t, filepath.Join(dir, "go.mod"))
		require.NotEmpty(t, all, "%s/go.mod requires nothing", dir)
		for _, m := range all {
			for _, p := range benchOnly {
				assert.False(t, strings.HasPrefix(m, p), "%s/go.mod requires %s, which only the bench and interop modules may", dir, m)
			}
		}
		if dir == "." {
			assert.ElementsMatch(t, []string{
				"github.com/cenkalti/backoff/v4", "github.com/google/uuid",
				"github.com/stretchr/testify", "go.etcd.io/bbolt",
			}, direct, "the root module's direct requirements")
		}
	}
}

// requires returns the module paths go.mod at p requires: those not marked
// indirect, and all.
func requires(t *testing.T, p string) (direct, all []string) {
	t.Helper()
	raw, err := os.ReadFile(p)
	require.NoError(t, err)
	block := false
	for line := range strings.Lines(string(raw)) {
		line = strings.TrimSpace(line)
		switch {
		case line == "require (":
			block = true
			continue
		case block && line == ")":
			block = false
			continue
		case !block && strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !block:
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		all = append(all, f[0])
		if !strings.Contains(line, "// indirect") {
			direct = append(direct, f[0])
		}
	}
	return direct, all
}
