package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
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

// twinFiles writes a queue file with records in several states (two failed
// by a server's 400, three pending, one with control characters in its
// lane) and a copy of it, byte for byte.
func twinFiles(t *testing.T) (string, string) {
	t.Helper()
	srv := newServer(t, idem.DefaultKeyHeader, http.StatusBadRequest, nil)
	file, _ := queueFile(t,
		intent(t, srv.URL+"/pay?token=s3cret", "a", idem.WithLane("payments")),
		intent(t, srv.URL+"/refund?token=s3cret", "b", idem.WithLane("refunds")),
	)
	ok(t, file, "drain", "--timeout", "10s")
	q, err := queue.Open(file, queue.Options{})
	require.NoError(t, err)
	for _, in := range []*idem.Intent{
		intent(t, secretURL, "c", idem.WithLane("payments"), idem.WithHeader("X-Source", "till-4")),
		intent(t, secretURL, "d", idem.WithKey("order-42")),
		intent(t, secretURL, "e", idem.WithLane("evil\x1b[2J\u202elane")),
	} {
		_, err := q.Enqueue(context.Background(), in)
		require.NoError(t, err)
	}
	require.NoError(t, q.Close())
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	twin := filepath.Join(t.TempDir(), "twin.db")
	require.NoError(t, os.WriteFile(twin, data, 0o600))
	return file, twin
}

// serve opens file as the application would and serves it with
// queueweb.Handler under /admin/queue/, behind a bearer token.
func serve(t *testing.T, file string, opts queueweb.Options) string {
	t.Helper()
	q, err := queue.Open(file, queue.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { q.Close() })
	h := http.StripPrefix("/admin/queue", queueweb.Handler(q, opts))
	mux := http.NewServeMux()
	mux.Handle("/admin/queue/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer op3rator" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/admin/queue"
}

// ages are what changes between two runs a second apart: ages and the
// oldest pending's seconds.
var (
	ages   = regexp.MustCompile(`\b\d+(s|m\d+s|h\d+m|d\d+h)\b`)
	oldest = regexp.MustCompile(`"oldest_pending_seconds": [0-9.e+-]+`)
)

func sameOutput(s string) string {
	return oldest.ReplaceAllString(ages.ReplaceAllString(s, "AGE"), `"oldest_pending_seconds": 0`)
}

// TestURLSameAsFile: each command prints the same, exit code, stdout and
// stderr, run on a queue file (--file) and on a twin of it that a running
// application serves with queueweb.Handler (--url): the application holds
// its file, which idemq could not open.
func TestURLSameAsFile(t *testing.T) {
	file, twin := twinFiles(t)
	url := serve(t, twin, queueweb.Options{Writes: true})
	viaURL := []string{"--url", url, "--url-auth-env", "IDEMQ_TEST_AUTH"}
	env := []string{"IDEMQ_TEST_AUTH=Bearer op3rator", "IDEMQ_FILE=", "IDEMQ_URL="}

	tests := [][]string{
		{"ls"},
		{"ls", "--json"},
		{"ls", "--state", "pending"},
		{"ls", "--state", "failed,expired", "--json"},
		{"ls", "--lane", "payments"},
		{"ls", "--lane", ""},
		{"ls", "--older-than", "1h"},
		{"ls", "--limit", "2", "--json"},
		{"show", "1"},
		{"show", "1", "--json"},
		{"show", "3"},
		{"show", "4", "--json"},
		{"show", "5"},
		{"show", "99"},
		{"stats"},
		{"stats", "--json"},
		{"stats", "--within", "0s"},
		{"resubmit", "3"},
		{"resubmit", "1"},
		{"resubmit", "1"},
		{"discard", "4", "99"},
		// The resubmitted record has a new key on each side: tables and
		// the settled records only.
		{"ls"},
		{"ls", "--json", "--state", "failed"},
		{"stats", "--json"},
	}
	for _, args := range tests {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			f := idemq(t, env, append([]string{"--file", file}, args...)...)
			u := idemq(t, env, append(viaURL, args...)...)
			t.Logf("idemq --url %v: exit %d\n%s%s", args, u.code, u.stdout, u.stderr)
			assert.Equal(t, f.code, u.code, "exit code; stderr of --file:\n%s\nof --url:\n%s", f.stderr, u.stderr)
			fout, uout := sameOutput(f.stdout), sameOutput(u.stdout)
			if args[0] == "stats" {
				fout, uout = withoutWhere(t, fout), withoutWhere(t, uout)
			}
			assert.Equal(t, fout, uout, "stdout")
			assert.Equal(t, f.stderr, u.stderr, "stderr")
			noSecret(t, u, "op3rator")
			noRawControls(t, u)
		})
	}
}

// withoutWhere drops what stats says of where the queue is: a file's
// path, or the URL.
func withoutWhere(t *testing.T, out string) string {
	t.Helper()
	if strings.HasPrefix(out, "{") {
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &v))
		delete(v, "file")
		delete(v, "url")
		b, err := json.Marshal(v)
		require.NoError(t, err)
		return string(b)
	}
	first, rest, _ := strings.Cut(out, "\n")
	require.Regexp(t, `^(file|url):`, first)
	return rest
}

func TestURL(t *testing.T) {
	_, twin := twinFiles(t)
	url := serve(t, twin, queueweb.Options{})
	auth := "IDEMQ_TEST_AUTH=Bearer op3rator"
	tests := []struct {
		name string
		env  []string
		args []string
		code int
		out  string // in stdout
		err  string // in stderr
	}{
		{"env", []string{auth, "IDEMQ_URL=" + url}, []string{"--url-auth-env", "IDEMQ_TEST_AUTH", "stats"}, exitOK, "url:             " + url + "\npending:         3", ""},
		{"writes off", []string{auth}, []string{"--url", url, "--url-auth-env", "IDEMQ_TEST_AUTH", "discard", "3"}, exitError, "", "writes are turned off"},
		{"reset-clock writes off", []string{auth}, []string{"--url", url, "--url-auth-env", "IDEMQ_TEST_AUTH", "reset-clock"}, exitError, "", "writes are turned off"},
		{"no auth", nil, []string{"--url", url, "ls"}, exitError, "", "401 Unauthorized"},
		{"drain", []string{auth}, []string{"--url", url, "drain"}, exitUsage, "", "works on a queue file only"},
		{"both", []string{auth, "IDEMQ_FILE=" + twin}, []string{"--url", url, "ls"}, exitUsage, "", "pass one"},
		{"credentials in URL", nil, []string{"--url", strings.Replace(url, "http://", "http://op:s3cret@", 1), "ls"}, exitUsage, "", "put no credentials in the URL"},
		{"not a URL", nil, []string{"--url", "intents.db", "ls"}, exitUsage, "", "want the http or https URL"},
		{"nothing there", []string{auth}, []string{"--url", url + "/nowhere", "--url-auth-env", "IDEMQ_TEST_AUTH", "ls"}, exitError, "", "404 Not Found from " + url + "/nowhere/; is queueweb.Handler mounted there"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := idemq(t, append([]string{"IDEMQ_FILE=", "IDEMQ_URL="}, tt.env...), tt.args...)
			assert.Equal(t, tt.code, r.code, "stderr:\n%s", r.stderr)
			assert.Contains(t, r.stdout, tt.out)
			assert.Contains(t, r.stderr, tt.err)
			noSecret(t, r, "op3rator")
		})
	}

	writable := serve(t, twinOf(t, twin), queueweb.Options{Writes: true})
	r := idemq(t, []string{auth}, "--url", writable, "--url-auth-env", "IDEMQ_TEST_AUTH", "reset-clock")
	assert.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "clock mark reset\n", r.stdout)
}

// twinOf copies file, which serve holds: bbolt synced every commit to it,
// and nothing writes it meanwhile.
func twinOf(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "third.db")
	require.NoError(t, os.WriteFile(out, data, 0o600))
	return out
}

// TestURLAuthStaysAtOrigin: a page that redirects idemq to another port
// of its host (or another host, or from https to http) gets no
// --url-auth-env credential there: idemq follows redirects by
// idem.RedirectPolicy, as the Client does.
func TestURLAuthStaysAtOrigin(t *testing.T) {
	got := make(chan string, 1)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- r.Header.Get("Authorization"):
		default:
		}
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	}))
	t.Cleanup(other.Close)
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusFound)
	}))
	t.Cleanup(page.Close)
	r := idemq(t, []string{"IDEMQ_FILE=", "IDEMQ_URL=", "IDEMQ_TEST_AUTH=Bearer op3rator"}, "--url", page.URL+"/admin/queue", "--url-auth-env", "IDEMQ_TEST_AUTH", "ls")
	assert.Equal(t, exitError, r.code, "stderr:\n%s", r.stderr)
	select {
	case auth := <-got:
		assert.Empty(t, auth, "the credential went to another port")
	default:
		t.Fatal("idemq did not follow the redirect")
	}
}
