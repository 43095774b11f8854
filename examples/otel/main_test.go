package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// summarySpan is a line of the traces' summary.
type summarySpan struct {
	depth      int
	name, kind string
	attrs      map[string]string // k=v, span= and link= among them
	parent     *summarySpan
	children   []*summarySpan
}

var spanLineRE = regexp.MustCompile(`^( +)(\S.*?) +(internal|client|server|consumer|producer) (.*)$`)

// parseTraces reads the traces' summary of out: the root spans, in order.
func parseTraces(t *testing.T, out string) []*summarySpan {
	t.Helper()
	section, _, ok := strings.Cut(out, "\n\n")
	require.True(t, ok, "no blank line after the traces' summary:\n%s", out)
	var roots []*summarySpan
	var stack []*summarySpan // the last span at each depth
	for _, line := range strings.Split(section, "\n")[1:] {
		if strings.HasPrefix(line, "trace ") {
			stack = stack[:0]
			continue
		}
		m := spanLineRE.FindStringSubmatch(line)
		require.NotNil(t, m, "summary line %q", line)
		s := &summarySpan{depth: len(m[1]) / 2, name: m[2], kind: m[3], attrs: map[string]string{}}
		for _, f := range strings.Fields(m[4]) {
			k, v, _ := strings.Cut(f, "=")
			s.attrs[k] = v
		}
		require.LessOrEqual(t, s.depth, len(stack)+1, "line %q is indented past its parent", line)
		stack = stack[:s.depth-1]
		if s.depth == 1 {
			roots = append(roots, s)
		} else {
			s.parent = stack[s.depth-2]
			s.parent.children = append(s.parent.children, s)
		}
		stack = append(stack, s)
	}
	return roots
}

// shape is the names of s and its descendants, "name[kind](child ...)".
func shape(s *summarySpan) string {
	var b strings.Builder
	b.WriteString(s.name + "[" + s.kind + "]")
	if len(s.children) > 0 {
		b.WriteString("(")
		for i, c := range s.children {
			if i > 0 {
				b.WriteString(" ")
			}
			b.WriteString(shape(c))
		}
		b.WriteString(")")
	}
	return b.String()
}

func TestRun(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, run(t.Context(), &buf))
	out := buf.String()

	roots := parseTraces(t, out)
	require.Len(t, roots, 3, "traces: checkout, order-placed, the drain\n%s", out)
	checkout, placed, drain := roots[0], roots[1], roots[2]

	// The payment through a lost answer: the shop's SERVER span is a child
	// of each attempt's CLIENT span, so the traceparent reached it.
	assert.Equal(t,
		"checkout[internal](idem POST[internal](HTTP POST[client](POST /payments[server]) HTTP POST[client](POST /payments[server])))",
		shape(checkout))
	require.Len(t, checkout.children, 1)
	op := checkout.children[0]
	assert.Equal(t, "applied", op.attrs["idem.outcome"])
	require.Len(t, op.children, 2)
	first, second := op.children[0], op.children[1]
	assert.Equal(t, "503", first.attrs["error.type"])
	assert.Equal(t, "retry", first.attrs["idem.action"])
	assert.Empty(t, first.attrs["http.request.resend_count"], "a first attempt is no resend")
	assert.Equal(t, "1", second.attrs["http.request.resend_count"])
	assert.Equal(t, "201", second.attrs["http.response.status_code"])
	assert.Equal(t, "done", second.attrs["idem.action"])
	assert.Equal(t, "503", first.children[0].attrs["http.response.status_code"])
	assert.Equal(t, "201", second.children[0].attrs["http.response.status_code"])

	// The queued payment: its drain, a root span, links to order-placed.
	assert.Equal(t, "order-placed[internal]", shape(placed))
	assert.Equal(t, "idem drain POST[consumer](HTTP POST[client](POST /payments[server]))", shape(drain))
	require.NotEmpty(t, placed.attrs["span"])
	assert.Equal(t, placed.attrs["span"]+"(order-placed)", drain.attrs["link"])
	assert.Equal(t, "applied", drain.attrs["idem.outcome"])
	assert.Equal(t, "done", drain.attrs["idem.action"])

	// The shop received each attempt's span context in traceparent.
	traceparents := regexp.MustCompile(`traceparent=00-[0-9a-f]{32}-([0-9a-f]{16})-01`).FindAllStringSubmatch(out, -1)
	var got []string
	for _, m := range traceparents {
		got = append(got, m[1])
	}
	want := []string{first.attrs["span"], second.attrs["span"], drain.children[0].attrs["span"]}
	assert.Equal(t, want, got, "the parents the shop received")
	assert.Contains(t, out, "replayed=true -> 201")

	// The stdout exporters printed the spans and the metrics.
	_, exported, ok := strings.Cut(out, "== The spans, as stdouttrace printed them")
	require.True(t, ok, "no stdout exporter output:\n%s", out)
	for _, want := range []string{
		`"Name":"checkout"`, `"Name":"idem POST"`, `"Name":"HTTP POST"`,
		`"Name":"POST /payments"`, `"Name":"order-placed"`, `"Name":"idem drain POST"`,
		`"Name":"http.client.request.duration"`, `"Name":"idem.operation.duration"`,
		`"Name":"idem.queue.record.count"`,
	} {
		assert.Contains(t, exported, want)
	}
}
