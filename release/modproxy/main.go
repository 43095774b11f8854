// Command modproxy writes a module proxy, as a directory that GOPROXY=file://
// can name, serving the repository's modules at one version from the git tags
// that version has (or from one revision), the files the go command would
// download from a public proxy once the tags are pushed:
//
//	<out>/<module path>/@v/list
//	<out>/<module path>/@v/<version>.info
//	<out>/<module path>/@v/<version>.mod
//	<out>/<module path>/@v/<version>.zip
//
// in the layout of the module proxy protocol (https://go.dev/ref/mod#goproxy-protocol).
// The zip is made by golang.org/x/mod/zip from the git tree, as the go command
// makes it from a repository: nested modules' directories are left out, the
// repository's LICENSE is added to a module in a subdirectory that has none.
//
// Usage:
//
//	modproxy -repo DIR -version vX.Y.Z -out DIR [-rev REV] MODULE_DIR...
//
// A MODULE_DIR is a module's directory relative to the repository root ("."
// for the root module); its revision is its tag (vX.Y.Z for the root,
// MODULE_DIR/vX.Y.Z for the others, the go command's convention), or REV for
// all of them when -rev is given.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

func main() {
	repo := flag.String("repo", ".", "the git repository")
	version := flag.String("version", "", "the version to serve, such as v0.1.0")
	out := flag.String("out", "", "the proxy's directory, created if missing")
	rev := flag.String("rev", "", "serve every module from this revision instead of its tag")
	flag.Parse()
	if err := run(*repo, *version, *out, *rev, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

func run(repo, version, out, rev string, dirs []string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("-version %q is not a canonical semantic version such as v0.1.0", version)
	}
	if out == "" {
		return errors.New("-out is missing")
	}
	if len(dirs) == 0 {
		return errors.New("no module directory given")
	}
	root, err := filepath.Abs(repo)
	if err != nil {
		return err
	}
	for _, dir := range dirs {
		if err := serve(root, version, out, rev, path.Clean(dir)); err != nil {
			return fmt.Errorf("module in %s: %w", dir, err)
		}
	}
	return nil
}

// serve writes the proxy's files for the module in dir at version.
func serve(repo, version, out, rev, dir string) error {
	if rev == "" {
		rev = version
		if dir != "." {
			rev = dir + "/" + version
		}
	}
	commit, err := git(repo, "rev-parse", "--verify", "--quiet", rev+"^{commit}")
	if err != nil {
		return fmt.Errorf("no revision %s in %s", rev, repo)
	}
	commit = strings.TrimSpace(commit)
	gomodPath := "go.mod"
	subdir := ""
	if dir != "." {
		gomodPath = dir + "/go.mod"
		subdir = dir
	}
	gomod, err := git(repo, "show", commit+":"+gomodPath)
	if err != nil {
		return fmt.Errorf("no %s at %s", gomodPath, rev)
	}
	mf, err := modfile.ParseLax(gomodPath, []byte(gomod), nil)
	if err != nil {
		return err
	}
	if mf.Module == nil {
		return fmt.Errorf("%s at %s has no module directive", gomodPath, rev)
	}
	mv := module.Version{Path: mf.Module.Mod.Path, Version: version}
	if err := module.Check(mv.Path, mv.Version); err != nil {
		return err
	}
	when, err := git(repo, "log", "-1", "--format=%cI", commit)
	if err != nil {
		return err
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(when))
	if err != nil {
		return fmt.Errorf("commit time of %s: %w", rev, err)
	}

	escPath, err := module.EscapePath(mv.Path)
	if err != nil {
		return err
	}
	escVersion, err := module.EscapeVersion(version)
	if err != nil {
		return err
	}
	vdir := filepath.Join(out, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	base := filepath.Join(vdir, escVersion)

	var zip bytes.Buffer
	if err := modzip.CreateFromVCS(&zip, mv, repo, commit, subdir); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, t.UTC()})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		base + ".zip":  zip.Bytes(),
		base + ".mod":  []byte(gomod),
		base + ".info": info,
	} {
		if err := os.WriteFile(name, data, 0o644); err != nil {
			return err
		}
	}
	return addToList(filepath.Join(vdir, "list"), version)
}

// addToList adds version to the proxy's list of a module's versions.
func addToList(name, version string) error {
	b, err := os.ReadFile(name)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	versions := strings.Fields(string(b))
	if !slices.Contains(versions, version) {
		versions = append(versions, version)
	}
	semver.Sort(versions)
	return os.WriteFile(name, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}

// git runs git in repo and returns what it printed.
func git(repo string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", repo}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(b), nil
}
