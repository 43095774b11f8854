package idem

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadmeDecisionDiagram keeps the decision table and its picture true to
// the code: README's table names every Class, in order; the flowchart in
// docs/decision.md draws every Class as one hexagon node ({{Name}}); and the
// ends reachable from each class's node (done, retry, stop: the stadium nodes
// whose labels start with those words) are the actions decide takes for that
// class. .ci/mermaid checks that the picture renders; this checks what it says.
func TestReadmeDecisionDiagram(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	section := readmeSection(t, string(readme), "## The decision table")
	decision, err := os.ReadFile(filepath.Join("docs", "decision.md"))
	require.NoError(t, err)
	picture := readmeSection(t, string(decision), "## The table as a picture")

	var want []string
	for c := ClassNone + 1; c < numClasses; c++ {
		want = append(want, className(c))
	}

	var table []string
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || strings.HasPrefix(line, "|---") {
			continue
		}
		if name := strings.TrimSpace(cells[1]); name != "class" {
			table = append(table, name)
		}
	}
	assert.Equal(t, want, table, "the decision table's class column")

	_, rest, ok := strings.Cut(picture, "```mermaid\n")
	require.True(t, ok, "no mermaid block under %q in docs/decision.md", "## The table as a picture")
	flow, _, ok := strings.Cut(rest, "```")
	require.True(t, ok, "mermaid block not closed")
	require.True(t, strings.HasPrefix(flow, "flowchart"), "the block is not a flowchart")

	g := parseFlowchart(flow)
	var drawn []string
	for _, n := range g.hexagons {
		drawn = append(drawn, n.label)
	}
	slices.Sort(drawn)
	assert.Equal(t, slices.Sorted(slices.Values(want)), drawn, "the classes drawn as hexagons, each once")

	actions := decidedActions()
	for _, n := range g.hexagons {
		c := slices.Index(want, n.label) + 1
		if c == 0 {
			continue // reported above
		}
		assert.Equal(t, actions[Class(c)], g.reachableEnds(n.id), "what the diagram lets %s lead to", n.label)
	}
}

// className is a Class as README names it: "already applied" is
// AlreadyApplied.
func className(c Class) string {
	var b strings.Builder
	for _, w := range strings.Split(c.String(), "_") {
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	return b.String()
}

// readmeSection returns the text of a Markdown document (README or a page
// of docs/) under heading, up to the next heading of the same level.
func readmeSection(t *testing.T, readme, heading string) string {
	t.Helper()
	_, rest, ok := strings.Cut(readme, "\n"+heading+"\n")
	require.True(t, ok, "the document has no %q", heading)
	section, _, _ := strings.Cut(rest, "\n## ")
	return section
}

// flowchart is the little of a Mermaid flowchart the test reads: its
// hexagon nodes, its end nodes and its edges.
type flowchart struct {
	hexagons []flowNode
	ends     map[string]Action // node id -> the action its label starts with
	edges    map[string][]string
}

type flowNode struct{ id, label string }

var (
	hexagonNode = regexp.MustCompile(`(\w+)\{\{"?([^{}"]*)"?\}\}`)
	stadiumNode = regexp.MustCompile(`(\w+)\(\["?([^\]"]*)"?\]\)`)
	nodeID      = regexp.MustCompile(`^\s*(\w+)`)
)

func parseFlowchart(text string) flowchart {
	g := flowchart{ends: map[string]Action{}, edges: map[string][]string{}}
	for _, line := range strings.Split(text, "\n") {
		for _, m := range hexagonNode.FindAllStringSubmatch(line, -1) {
			g.hexagons = append(g.hexagons, flowNode{id: m[1], label: m[2]})
		}
		for _, m := range stadiumNode.FindAllStringSubmatch(line, -1) {
			for _, a := range []Action{ActionDone, ActionRetry, ActionStop} {
				if strings.HasPrefix(m[2], a.String()) {
					g.ends[m[1]] = a
				}
			}
		}
		from, to, ok := strings.Cut(line, "-->")
		if !ok {
			continue
		}
		src, dst := nodeID.FindStringSubmatch(from), nodeID.FindStringSubmatch(to)
		if src != nil && dst != nil {
			g.edges[src[1]] = append(g.edges[src[1]], dst[1])
		}
	}
	return g
}

// reachableEnds returns the actions of the end nodes reachable from id, in
// Action order.
func (g flowchart) reachableEnds(id string) []Action {
	seen := map[string]bool{}
	var found []Action
	var walk func(string)
	walk = func(n string) {
		if seen[n] {
			return
		}
		seen[n] = true
		if a, ok := g.ends[n]; ok && !slices.Contains(found, a) {
			found = append(found, a)
		}
		for _, next := range g.edges[n] {
			walk(next)
		}
	}
	walk(id)
	slices.Sort(found)
	return found
}

// decidedActions runs decide over every method, key, status, delete policy,
// earlier doubt and kind of transport error, with and without a replay
// header but without server hints, and returns the actions each class led
// to, in Action order.
func decidedActions() map[Class][]Action {
	errs := []facts{
		{Err: errors.New("connection reset"), Wire: Wire{Conns: 1, WroteHeaders: true}},
		{Err: errors.New("connection refused")},
		{Err: fmt.Errorf("%w: header with CR", ErrInvalidRequest)},
	}
	var all []facts
	for _, method := range allMethods {
		for _, key := range []bool{false, true} {
			for _, earlier := range []bool{false, true} {
				for _, policy := range []DeletePolicy{DeleteAfterDoubt, DeleteAlways, DeleteNever} {
					base := facts{Method: method, HasKey: key, EarlierInDoubt: earlier, DeletePolicy: policy}
					for _, e := range errs {
						f := base
						f.Err, f.Wire = e.Err, e.Wire
						all = append(all, f)
					}
					for status := 100; status <= 599; status++ {
						for _, redirect := range []redirectStop{redirectFollowed, redirectOffHost, redirectDropsTLS, redirectRefused} {
							f := base
							f.Status, f.Redirect = status, redirect
							f.Wire = Wire{Conns: 1, WroteHeaders: true, WroteRequest: true, GotResponse: true}
							all = append(all, f)
							if redirect == redirectFollowed {
								f.Header = http.Header{"Idempotent-Replayed": {"true"}}
								all = append(all, f)
							}
						}
					}
				}
			}
		}
	}
	actions := map[Class][]Action{}
	for _, f := range all {
		d := decide(f)
		if !slices.Contains(actions[d.Class], d.Action) {
			actions[d.Class] = append(actions[d.Class], d.Action)
		}
	}
	for c := range actions {
		slices.Sort(actions[c])
	}
	return actions
}

// TestReadmeArchitecture keeps the pictures of the architecture (README links
// them, in docs/architecture.md) true to the code: the package graph has a node for every package of the module
// (companion modules and examples aside) and an arrow for each import
// between them, no more; every file the path of an intent names exists.
func TestReadmeArchitecture(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("docs", "architecture.md"))
	require.NoError(t, err)
	section := readmeSection(t, string(doc), "## Architecture")
	blocks := mermaidBlocks(section)
	require.Len(t, blocks, 2, "the package graph and the path of an intent")

	// Nodes: id["path: what"], the path before the colon, "(root)" dropped.
	nodes := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s*(\w+)\["([^:"]+):`).FindAllStringSubmatch(blocks[0], -1) {
		nodes[m[1]] = strings.TrimSuffix(m[2], " (root)")
	}
	checkSeams(t, blocks[0], nodes)
	drawn := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*(\w+) --> (.+)$`).FindAllStringSubmatch(blocks[0], -1) {
		from, ok := nodes[m[1]]
		require.True(t, ok, "edge from unknown node %q", m[1])
		for _, id := range strings.Split(m[2], "&") {
			to, ok := nodes[strings.TrimSpace(id)]
			require.True(t, ok, "edge to unknown node %q", id)
			drawn[from+" -> "+to] = true
		}
	}

	const module = "github.com/idem-go/idem"
	pkgs := map[string]string{"idem": "."} // name in the picture -> directory
	for _, dir := range []string{"queue", "queue/queuetest", "queue/queueweb", "idemtest", "redact", "pgqueue"} {
		pkgs[dir] = dir
	}
	internal, err := os.ReadDir("internal")
	require.NoError(t, err)
	for _, e := range internal {
		if e.IsDir() {
			pkgs["internal/"+e.Name()] = "internal/" + e.Name()
		}
	}
	assert.ElementsMatch(t, mapKeys(pkgs), mapValuesUnique(nodes), "one node per package")

	imports := map[string]bool{}
	for name, dir := range pkgs {
		for _, imp := range packageImports(t, dir) {
			switch {
			case imp == module:
				imports[name+" -> idem"] = true
			case strings.HasPrefix(imp, module+"/"):
				imports[name+" -> "+strings.TrimPrefix(imp, module+"/")] = true
			}
		}
	}
	assert.Equal(t, imports, drawn, "the arrows are the imports between the module's packages")

	for _, m := range regexp.MustCompile(`\(([\w/]+\.go)\)`).FindAllStringSubmatch(blocks[1], -1) {
		_, err := os.Stat(m[1])
		assert.NoError(t, err, "the path of an intent names %s", m[1])
	}
}

// checkSeams checks the seams of the package graph: nodes
// id{{"pkg.Interface: what"}}, each an interface of a drawn package, and
// edges "from -. implements .-> id", each from a package with a type that
// has a method of every name the interface has. Every seam is implemented
// at least once.
func checkSeams(t *testing.T, graph string, nodes map[string]string) {
	t.Helper()
	seams := map[string][]string{} // node id -> the interface's method names
	for _, m := range regexp.MustCompile(`(?m)^\s*(\w+)\{\{"(\w+)\.(\w+):`).FindAllStringSubmatch(graph, -1) {
		dir := packageDir(t, nodes, m[2])
		seams[m[1]] = interfaceMethods(t, dir, m[3])
		require.NotEmpty(t, seams[m[1]], "%s.%s: an interface with methods", m[2], m[3])
	}
	require.NotEmpty(t, seams, "the storage seam is drawn")
	implemented := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*(\w+) -\. implements \.-> (\w+)$`).FindAllStringSubmatch(graph, -1) {
		methods, ok := seams[m[2]]
		require.True(t, ok, "implements an unknown seam %q", m[2])
		dir := packageDir(t, nodes, nodes[m[1]])
		assert.True(t, hasMethods(t, dir, methods), "%s implements %s: a type of it has every method of the seam", dir, m[2])
		implemented[m[2]] = true
	}
	for id := range seams {
		assert.True(t, implemented[id], "seam %s is implemented by a drawn package", id)
	}
}

// packageDir returns the directory of the package drawn as name.
func packageDir(t *testing.T, nodes map[string]string, name string) string {
	t.Helper()
	if name == "idem" {
		return "."
	}
	require.Contains(t, mapValuesUnique(nodes), name, "a package node %q", name)
	return name
}

// interfaceMethods returns the method names of the interface name declared
// in the non-test files of dir.
func interfaceMethods(t *testing.T, dir, name string) []string {
	t.Helper()
	var out []string
	for _, f := range parseDir(t, dir) {
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok || ts.Name.Name != name {
				return true
			}
			if it, ok := ts.Type.(*ast.InterfaceType); ok {
				for _, m := range it.Methods.List {
					for _, id := range m.Names {
						out = append(out, id.Name)
					}
				}
			}
			return false
		})
	}
	return out
}

// hasMethods reports whether a type declared in the non-test files of dir
// has methods of all the names.
func hasMethods(t *testing.T, dir string, names []string) bool {
	t.Helper()
	byType := map[string]map[string]bool{}
	for _, f := range parseDir(t, dir) {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) != 1 {
				continue
			}
			recv := fn.Recv.List[0].Type
			if star, ok := recv.(*ast.StarExpr); ok {
				recv = star.X
			}
			id, ok := recv.(*ast.Ident)
			if !ok {
				continue
			}
			if byType[id.Name] == nil {
				byType[id.Name] = map[string]bool{}
			}
			byType[id.Name][fn.Name.Name] = true
		}
	}
	for _, methods := range byType {
		if !slices.ContainsFunc(names, func(n string) bool { return !methods[n] }) {
			return true
		}
	}
	return false
}

// parseDir parses the non-test Go files of dir.
func parseDir(t *testing.T, dir string) []*ast.File {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	var out []*ast.File
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		out = append(out, f)
	}
	return out
}

// mermaidBlocks returns the Mermaid blocks of a Markdown text, in order.
func mermaidBlocks(md string) []string {
	var out []string
	for {
		_, rest, ok := strings.Cut(md, "```mermaid\n")
		if !ok {
			return out
		}
		block, after, _ := strings.Cut(rest, "```")
		out, md = append(out, block), after
	}
}

// packageImports returns what the non-test Go files of dir import.
func packageImports(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	var out []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range file.Imports {
			out = append(out, strings.Trim(imp.Path.Value, `"`))
		}
	}
	return out
}

func mapKeys(m map[string]string) []string {
	return slices.Collect(maps.Keys(m))
}

// mapValuesUnique returns the values of m, each once.
func mapValuesUnique(m map[string]string) []string {
	return slices.Compact(slices.Sorted(maps.Values(m)))
}
