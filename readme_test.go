package idem_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmeSection returns the README's section under heading, up to the next
// "## " heading.
func readmeSection(t *testing.T, heading string) string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	_, sec, ok := strings.Cut(string(b), "\n"+heading+"\n")
	require.True(t, ok, "README has no %q", heading)
	sec, _, _ = strings.Cut(sec, "\n## ")
	return sec
}

// TestREADMEQuickStart: the quick start in the README is the code
// Example_quickStart compiles and runs (its quickStart), with the README's
// URL for the example's url parameter and without the example's fmt lines.
func TestREADMEQuickStart(t *testing.T) {
	sec := readmeSection(t, "## Quick start")
	_, code, ok := strings.Cut(sec, "```go\n")
	require.True(t, ok, "no go block in the quick start")
	code, _, ok = strings.Cut(code, "```")
	require.True(t, ok, "unterminated go block in the quick start")
	readme := strings.Split(strings.TrimSuffix(code, "\n"), "\n")
	for i, l := range readme {
		readme[i] = strings.ReplaceAll(l, `"https://api.example/payments"`, "url")
	}

	src, err := os.ReadFile("example_test.go")
	require.NoError(t, err)
	_, body, ok := strings.Cut(string(src), "\n\tquickStart := func(ctx context.Context, url string, body []byte) error {\n")
	require.True(t, ok, "example_test.go has no quickStart")
	body, _, ok = strings.Cut(body, "\n\t\treturn nil\n\t}\n")
	require.True(t, ok, "quickStart does not end with return nil")
	var example []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "fmt.") {
			continue
		}
		example = append(example, strings.TrimPrefix(l, "\t\t"))
	}
	assert.Equal(t, readme, example, "README quick start and quickStart in example_test.go differ")
}

// TestREADMEExamples: every program under examples/ is listed in the README
// with the command that runs it, has a test, and imports no internal
// package: an example shows what a user of the module can write.
func TestREADMEExamples(t *testing.T) {
	sec := readmeSection(t, "## Examples")
	dirs, err := os.ReadDir("examples")
	require.NoError(t, err)
	require.NotEmpty(t, dirs)
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		dir := filepath.Join("examples", d.Name())
		t.Run(d.Name(), func(t *testing.T) {
			run := "`go run ./examples/" + d.Name() + "`"
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				run = "`cd examples/" + d.Name() + " && go run .`" // its own module
			}
			assert.Contains(t, sec, run, "README's examples section")

			tests, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
			require.NoError(t, err)
			assert.NotEmpty(t, tests, "%s has no test", dir)

			files, err := filepath.Glob(filepath.Join(dir, "*.go"))
			require.NoError(t, err)
			internal := regexp.MustCompile(`(^|/)internal(/|$)`)
			for _, f := range files {
				ast, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
				require.NoError(t, err)
				for _, imp := range ast.Imports {
					path, _ := strconv.Unquote(imp.Path.Value)
					assert.False(t, internal.MatchString(path), "%s imports %s", f, path)
				}
			}
		})
	}
}

// TestREADMEVetoRecipe: the README's recipe for a server that releases a
// key on a 5xx is the Veto Example_vetoReleasedKey runs.
func TestREADMEVetoRecipe(t *testing.T) {
	sec := readmeSection(t, "## The decision table")
	_, code, ok := strings.Cut(sec, "```go\n")
	require.True(t, ok, "no go block in the decision table's section")
	code, _, ok = strings.Cut(code, "```")
	require.True(t, ok, "unterminated go block")
	_, veto, ok := strings.Cut(code, "\tVeto: ")
	require.True(t, ok, "the recipe sets no Veto")
	veto, _, _ = strings.Cut(veto, "\n\t},\n")

	src, err := os.ReadFile("example_test.go")
	require.NoError(t, err)
	_, example, ok := strings.Cut(string(src), "\n\t\tVeto: ")
	require.True(t, ok, "example_test.go sets no Veto")
	example, _, _ = strings.Cut(example, "\n\t\t},\n")
	assert.Equal(t, veto, strings.ReplaceAll(example, "\n\t", "\n"), "README's Veto and Example_vetoReleasedKey's differ")
}
