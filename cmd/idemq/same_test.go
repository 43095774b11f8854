package main

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

// backend is a queue idemq is pointed at: a file or a PostgreSQL DSN.
type backend struct {
	name   string
	flags  []string // the flags naming the queue
	source string   // how idemq names the queue in its output
}

// normalize replaces in out what must differ between two queues holding
// the same records: where they are, and the clock's readings.
var (
	rfc3339  = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
	duration = regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|ms|s|m|h)\b`)
	seconds  = regexp.MustCompile(`("(age|oldest_pending)[a-z_]*": )[0-9.e+-]+`)
	// A resubmitted record's key is generated afresh.
	genKey = regexp.MustCompile(`[0-9a-f]{8}…( \(generated\)|",\s+"key_source": "generated")`)
)

func normalize(out, source string) string {
	out = strings.ReplaceAll(out, source, "QUEUE")
	if js, err := json.Marshal(source); err == nil { // JSON escapes & as \u0026
		out = strings.ReplaceAll(out, string(js[1:len(js)-1]), "QUEUE")
	}
	out = genKey.ReplaceAllString(out, "KEY${1}")
	out = rfc3339.ReplaceAllString(out, "TIME")
	out = seconds.ReplaceAllString(out, "${1}N")
	return duration.ReplaceAllString(out, "D")
}

// TestSameOutputFileAndPostgreSQL runs every command against a file and a
// PostgreSQL queue holding the same records, step by step, and compares
// what they print.
func TestSameOutputFileAndPostgreSQL(t *testing.T) {
	srv := newServer(t, idem.DefaultKeyHeader, http.StatusUnprocessableEntity, nil)
	ins := func() []*idem.Intent {
		return []*idem.Intent{
			intent(t, srv.URL+"/pay?token=s3cret", "a", idem.WithLane("payments"), idem.WithKey("order-1")),
			intent(t, srv.URL+"/pay?token=s3cret", "b", idem.WithKey("order-2")),
			intent(t, srv.URL+"/refund?token=s3cret", "c", idem.WithLane("refunds"), idem.WithKey("order-3")),
		}
	}
	file, fids := queueFile(t, ins()...)
	dsn, pids := pgQueueOf(t, ins()...)
	require.Equal(t, fids, pids, "the same records under the same IDs")
	backends := []backend{
		{"file", []string{"--file", file}, file},
		{"postgres", []string{"--dsn", dsn}, redactDSN(dsn)},
	}
	steps := []struct {
		args []string
		code int
	}{
		{[]string{"ls"}, exitOK},
		{[]string{"ls", "--json"}, exitOK},
		{[]string{"ls", "--lane", "refunds"}, exitOK},
		{[]string{"show", "2"}, exitOK},
		{[]string{"show", "2", "--json"}, exitOK},
		{[]string{"stats"}, exitOK},
		{[]string{"stats", "--json"}, exitOK},
		{[]string{"discard", "3"}, exitOK},
		{[]string{"discard", "3"}, exitError},
		{[]string{"drain", "--timeout", "10s", "--progress", "plain"}, exitOK},
		{[]string{"drain", "--timeout", "10s", "--progress", "plain"}, exitOK},
		{[]string{"ls", "--state", "failed"}, exitOK},
		{[]string{"show", "1"}, exitOK},
		{[]string{"resubmit", "1"}, exitOK},
		{[]string{"resubmit", "3"}, exitError},
		{[]string{"stats"}, exitOK},
		{[]string{"ls", "--json"}, exitOK},
	}
	for _, st := range steps {
		var outs [2]result
		for i, b := range backends {
			r := idemq(t, []string{"IDEMQ_FILE=", "IDEMQ_DSN="}, append(b.flags, st.args...)...)
			require.Equal(t, st.code, r.code, "%s: idemq %v: exit code; stderr:\n%s", b.name, st.args, r.stderr)
			noSecret(t, r)
			t.Logf("%s: idemq %v: exit %d\n%s%s", b.name, st.args, r.code, r.stdout, r.stderr)
			r.stdout, r.stderr = normalize(r.stdout, b.source), normalize(r.stderr, b.source)
			outs[i] = r
		}
		assert.Equal(t, outs[0].stdout, outs[1].stdout, "idemq %v: stdout, file then PostgreSQL", st.args)
		assert.Equal(t, outs[0].stderr, outs[1].stderr, "idemq %v: stderr, file then PostgreSQL", st.args)
	}
}
