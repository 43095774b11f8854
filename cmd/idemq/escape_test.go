package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
	"github.com/idem-go/idem/queue/queueweb"
)

// rawControls are runes a record may hold that must never reach a
// terminal as they are: ESC (a CSI sequence repaints the screen), C1's CSI,
// DEL, and the bidi override, which reorders what follows it.
var rawControls = []string{"\x1b", "\u009b", "\x7f", "\u202e"}

// noRawControls checks that neither output of r holds a rawControls rune.
func noRawControls(t *testing.T, r result) {
	t.Helper()
	for _, c := range rawControls {
		assert.NotContains(t, r.stdout, c, "stdout holds %q raw:\n%q", c, r.stdout)
		assert.NotContains(t, r.stderr, c, "stderr holds %q raw:\n%q", c, r.stderr)
	}
}

func TestPrintable(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"payments", "payments"},
		{"zahlungen-é-日本-😀 \\x", "zahlungen-é-日本-😀 \\x"},
		{"\x1b[2J", `\x1b[2J`},
		{"a\u202eb", `a\u202eb`},
		{"\u200b\u2028\ufeff", `\u200b\u2028\ufeff`},
		{"\x7f\u0085\u009b", `\x7f\u0085\u009b`},
		{"a\nb\tc\rd\x00", `a\nb\tc\rd\x00`},
		{"bad\xffutf8\xe2\x80", `bad\xffutf8\xe2\x80`},
		{"\U000e0001tag", `\U000e0001tag`},
	}
	for _, tt := range tests {
		if got := printable(tt.in); got != tt.want {
			t.Errorf("printable(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestTextWriterKeepsLines(t *testing.T) {
	var b strings.Builder
	w := textWriter{&b}
	n, err := w.Write([]byte("lane\t\x1b[2J\u202e\r\n"))
	require.NoError(t, err)
	assert.Equal(t, len("lane\t\x1b[2J\u202e\r\n"), n, "Write reports the bytes it was given")
	assert.Equal(t, "lane\t\\x1b[2J\\u202e\\r\n", b.String(), "newlines and tabs are idemq's own layout")
}

// TestShellCompletion: cobra's completion protocol, name<TAB>description
// lines, goes through the escaping writer unharmed.
func TestShellCompletion(t *testing.T) {
	r := idemq(t, nil, "__complete", "")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "\ndiscard\tRemove records")
}

func TestJSONSafe(t *testing.T) {
	in := map[string]string{"lane": "pay\x1b[2J\u202e\u009b\x7f\U000e0001 é😀"}
	out, err := queueweb.MarshalJSON(in)
	require.NoError(t, err)
	for _, c := range append(rawControls, "\U000e0001") {
		assert.NotContains(t, string(out), c)
	}
	assert.Contains(t, string(out), `\u202e`)
	assert.Contains(t, string(out), `\udb40\udc01`, "a rune beyond the BMP is a surrogate pair")
	assert.Contains(t, string(out), "é😀", "printable runes are kept")
	var got map[string]string
	require.NoError(t, json.Unmarshal(out, &got))
	assert.Equal(t, in, got, "the escapes decode to the record's own text")
}

// TestControlBytesEscaped: a lane, a URL and a server's Content-Type that
// hold control and bidi characters are shown escaped by ls, show, stats and
// drain, in text and in JSON, never as they are; JSON still decodes to
// the record's own text, and a newline in a lane does not start a row.
func TestControlBytesEscaped(t *testing.T) {
	const lane = "pay\x1b[2J\u202eevil\u009b\x7f\nrow"
	const shown = `pay\x1b[2J\u202eevil\u009b\x7f\nrow`
	srv := newServer(t, idem.DefaultKeyHeader, http.StatusBadRequest,
		map[string]string{"Content-Type": "text/plain; x=\u202e\u009b"})
	dir := filepath.Join(t.TempDir(), "q\x1b[2J\u202e")
	require.NoError(t, os.Mkdir(dir, 0o700))
	in := intent(t, srv.URL+"/a\u202eb/%1b[2J?token=s3cret", "x", idem.WithLane(lane))
	file, ids := queueFileIn(t, filepath.Join(dir, "q.db"), in)
	fileShown := printable(file)
	id := ids[0].String()

	r := ok(t, file, "ls")
	noRawControls(t, r)
	assert.Contains(t, r.stdout, shown)
	assert.Len(t, strings.Split(strings.TrimSpace(r.stdout), "\n"), 2, "a header and one row:\n%s", r.stdout)

	r = ok(t, file, "show", id)
	noRawControls(t, r)
	assert.Contains(t, r.stdout, "lane:         "+shown+"\n")

	r = ok(t, file, "ls", "--json")
	noRawControls(t, r)
	got := listed(t, r)
	require.Len(t, got, 1)
	assert.Equal(t, lane, got[0].Lane, "JSON keeps the lane, escaped")

	r = ok(t, file, "stats")
	noRawControls(t, r)
	assert.Regexp(t, `(?m)^file:\s+`+regexp.QuoteMeta(fileShown)+`$`, r.stdout)

	r = ok(t, file, "drain", "--progress", "plain", "--timeout", "10s")
	noRawControls(t, r)
	assert.Contains(t, r.stderr, "idemq: draining 1 records from "+fileShown)
	assert.Contains(t, r.stdout, "drained "+fileShown)
	noSecret(t, r)

	r = ok(t, file, "show", id)
	noRawControls(t, r)
	assert.Contains(t, r.stdout, `result:       400 (text/plain; x=\u202e\u009b, 0 bytes)`)
	r = ok(t, file, "show", "--json", id)
	noRawControls(t, r)
	var v recordView
	require.NoError(t, jsonOf(r, &v))
	assert.Equal(t, "text/plain; x=\u202e\u009b", v.Result.ContentType)

	r = idemq(t, nil, "--file", file+"\x1b[2J", "ls")
	assert.Equal(t, exitError, r.code)
	noRawControls(t, r)
	assert.Contains(t, r.stderr, "idemq: "+fileShown+`\x1b[2J: no such queue file`)
}

// queueFileIn is queueFile at path.
func queueFileIn(t *testing.T, path string, ins ...*idem.Intent) (string, []queue.ID) {
	t.Helper()
	tmp, ids := queueFile(t, ins...)
	data, err := os.ReadFile(tmp)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path, ids
}
