package idemotel

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadmeListsEverything: the README's Observability section names every
// instrument, span and attribute key this package declares in names.go, and
// the conventions' attributes it sets: a name added here and not there
// fails.
func TestReadmeListsEverything(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	readme := string(b)
	start := strings.Index(readme, "\n## Observability\n")
	require.GreaterOrEqual(t, start, 0, "README has no Observability section")
	sec := readme[start+1:]
	if end := strings.Index(sec[3:], "\n## "); end >= 0 {
		sec = sec[:end+3]
	}

	f, err := parser.ParseFile(token.NewFileSet(), "names.go", nil, 0)
	require.NoError(t, err)
	var names []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			if !vs.Names[0].IsExported() || vs.Names[0].Name == "ScopeName" {
				continue
			}
			ast.Inspect(vs.Values[0], func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					if strings.HasSuffix(vs.Names[0].Name, "Prefix") {
						v += "POST" // spans are named prefix + method
					}
					names = append(names, v)
					return false
				}
				return true
			})
		}
	}
	require.GreaterOrEqual(t, len(names), 15, "constants found in names.go")
	names = append(names, "http.request.method", "server.address", "server.port", "url.scheme", "url.full",
		"http.response.status_code", "http.request.resend_count", "error.type")
	for _, n := range names {
		assert.Contains(t, sec, "`"+n+"`", "README's Observability section does not name %s", n)
	}
}
