package queueweb_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/queue"
	"github.com/idem-go/idem/queue/queueweb"
)

// The page is tested in a real browser, Debian's chromium run headless from
// its command line: --dump-dom prints the document once its scripts have
// run (--virtual-time-budget lets their fetches finish), --screenshot
// keeps a picture of it. CI installs chromium (.ci/chromium); elsewhere the
// test skips without it, but under CI=true it fails.

// browser returns the chromium to run: $IDEM_CHROMIUM, or chromium on the
// PATH.
func browser(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("IDEM_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium on the PATH (nor $IDEM_CHROMIUM): CI must install it (.ci/chromium)")
	}
	t.Skip("no chromium on the PATH (nor $IDEM_CHROMIUM); CI=true makes this a failure")
	return ""
}

// runBrowser runs chromium headless on url with args and returns its
// standard output.
func runBrowser(t *testing.T, url string, args ...string) string {
	t.Helper()
	bin := browser(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--disable-extensions", "--disable-background-networking",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=5000",
	}
	cmd := exec.CommandContext(ctx, bin, append(append(base, args...), url)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, err, "%s %v: stderr:\n%s", bin, args, stderr.String())
	return stdout.String()
}

// row is one row of the page's table, as the dumped DOM holds it.
type row struct{ id, state, lane string }

var rowRE = regexp.MustCompile(`<tr data-id="(\d+)" data-state="([a-z_]+)" data-lane="([^"]*)"`)

func rows(dom string) []row {
	var out []row
	for _, m := range rowRE.FindAllStringSubmatch(dom, -1) {
		out = append(out, row{m[1], m[2], m[3]})
	}
	return out
}

// TestPageInBrowser loads the page of a filled queue in chromium: it shows
// every record with its state and lane, the counts, a filter URL shows only
// the matching rows, and a record's detail. The screenshot is kept in
// $IDEM_ARTIFACTS, or else in a temporary directory the test logs.
func TestPageInBrowser(t *testing.T) {
	browser(t)
	f := fill(t, queueweb.Options{})
	id := func(id queue.ID) string { return id.String() }

	dom := runBrowser(t, f.srv.URL+"/", "--dump-dom")
	assert.Equal(t, []row{
		{id(f.done), "done", "payments"},
		{id(f.failed), "failed", "refunds"},
		{id(f.pending), "pending", "payments"},
		{id(f.other), "pending", ""},
		{id(f.odd), "pending", `evil\x1b[2J\u202elane`},
	}, rows(dom), "the page's rows; DOM:\n%s", dom)
	assert.Contains(t, dom, `<div class="count" id="count-pending"><dt>pending</dt><dd>3</dd></div>`)
	assert.Contains(t, dom, `<td class="request">POST http://127.0.0.1:1/later</td>`)
	assert.Contains(t, dom, "Horizon at risk: 0 within 1h0m0s")
	assert.Contains(t, dom, `<td class="lane">evil\x1b[2J\u202elane</td>`, "control characters are escaped")
	for _, raw := range []string{"\x1b", "\u202e"} {
		assert.NotContains(t, dom, raw, "the page shows a control character raw")
	}
	assert.NotContains(t, dom, "<script>", "no script but the page's own file")
	for _, secret := range []string{"s3cret", "amount", "till-4", f.key} {
		assert.NotContains(t, dom, secret)
	}

	dom = runBrowser(t, f.srv.URL+"/?state=pending&lane=payments", "--dump-dom")
	assert.Equal(t, []row{{id(f.pending), "pending", "payments"}}, rows(dom), "filtered by state and lane; DOM:\n%s", dom)
	assert.Contains(t, dom, `<option value="pending" selected`, "the filter shows what it filters")

	dom = runBrowser(t, f.srv.URL+"/?state=failed&id="+id(f.failed), "--dump-dom")
	assert.Equal(t, []row{{id(f.failed), "failed", "refunds"}}, rows(dom), "DOM:\n%s", dom)
	assert.Contains(t, dom, "Record "+id(f.failed))
	assert.Contains(t, dom, "<dt>outcome</dt><dd>not_applied</dd>")
	assert.Contains(t, dom, "<dt>last status</dt><dd>400</dd>")
	assert.Contains(t, dom, "<dt>attempts</dt><dd>1</dd>")

	dir := os.Getenv("IDEM_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	shot := filepath.Join(dir, "queueweb.png")
	runBrowser(t, f.srv.URL+"/?id="+id(f.done), "--screenshot="+shot, "--window-size=1280,800", "--hide-scrollbars")
	png, err := os.ReadFile(shot)
	require.NoError(t, err, "chromium wrote no screenshot")
	assert.True(t, bytes.HasPrefix(png, []byte("\x89PNG")), "the screenshot is a PNG")
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
}
