package idem

import (
	"go/ast"
	"go/build"
	"go/doc"
	"go/parser"
	"go/token"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// maxAPIEntries bounds the root package's API: the func and type entries of
// `go doc -all .`, which are its exported functions, its exported types, and
// their constructors and exported methods (constants, variables and fields
// are not counted). Every entry is one more thing a user reads to find what
// they need; a new one should replace one or make the case that it must be.
//
// 51: WithPolicy, a per-call policy (the one call that needs fewer attempts
// or a Veto of its own), which no field of Client or Intent could carry
// without a second Client per policy.
const maxAPIEntries = 51

// TestAPISize keeps the root API within maxAPIEntries, counted as
// `go doc -all . | grep -cE '^(func|type) '` counts it.
func TestAPISize(t *testing.T) {
	bp, err := build.Default.ImportDir(".", 0)
	require.NoError(t, err)
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		require.NoError(t, err)
		files = append(files, f)
	}
	pkg, err := doc.NewFromFiles(fset, files, "github.com/idem-go/idem")
	require.NoError(t, err)
	var entries []string
	for _, f := range pkg.Funcs {
		entries = append(entries, f.Name)
	}
	for _, ty := range pkg.Types {
		entries = append(entries, ty.Name)
		for _, f := range ty.Funcs {
			entries = append(entries, f.Name)
		}
		for _, m := range ty.Methods {
			entries = append(entries, ty.Name+"."+m.Name)
		}
	}
	assert.LessOrEqual(t, len(entries), maxAPIEntries, "the root API has %d func and type entries, want at most %d: %v", len(entries), maxAPIEntries, entries)
}
