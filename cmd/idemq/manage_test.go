package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
	"github.com/idem-go/idem/queue/queueweb"
)

func jsonOf(r result, v any) error { return json.Unmarshal([]byte(r.stdout), v) }

func TestDiscard(t *testing.T) {
	file, ids := queueFile(t,
		intent(t, secretURL, "a"), intent(t, secretURL, "b"), intent(t, secretURL, "c"),
	)
	r := ok(t, file, "discard", ids[0].String(), ids[2].String())
	assert.Equal(t, "discarded 1 (pending)\ndiscarded 3 (pending)\n", r.stdout)
	assert.Empty(t, r.stderr, "records never sent: no warning")
	assert.Equal(t, ids[1:2], idsOf(listed(t, ok(t, file, "ls", "--json"))))

	r = idemq(t, nil, "--file", file, "discard", ids[0].String(), ids[1].String())
	assert.Equal(t, exitError, r.code)
	assert.Contains(t, r.stderr, "idemq: discard 1: queue: no such record")
	assert.Equal(t, "discarded 2 (pending)\n", r.stdout, "the others are still discarded")
	assert.Equal(t, []recordView{}, listed(t, ok(t, file, "ls", "--json")))
}

// TestDiscardSentWarns: discarding a pending record an attempt may have
// reached the server with leaves its outcome unknown, and says so.
//
// The record is sent once by a drainer the test stops when the server has
// seen it (a 503 asking for an hour keeps it pending), not by a drain with
// a short timeout, which a busy machine could end before the attempt.
func TestDiscardSentWarns(t *testing.T) {
	srv := newServer(t, idem.DefaultKeyHeader, http.StatusServiceUnavailable, map[string]string{"Retry-After": "3600"})
	file, ids := queueFile(t, intent(t, srv.URL+"/pay?token=s3cret", "x"))
	q, err := queue.Open(file, queue.Options{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- q.Run(ctx) }()
	require.Eventually(t, func() bool { keys, _ := srv.seen(); return len(keys) == 1 }, 20*time.Second, time.Millisecond,
		"the record never reached the server")
	cancel()
	<-ran
	require.NoError(t, q.Close())

	r := ok(t, file, "discard", ids[0].String())
	assert.Contains(t, r.stderr, "idemq: warning: 1 may have reached the server")
	noSecret(t, r)
}

// TestResubmit: a record the server refused (400, not applied) is
// resubmitted as a new pending record, once.
func TestResubmit(t *testing.T) {
	srv := newServer(t, idem.DefaultKeyHeader, http.StatusBadRequest, nil)
	in := intent(t, srv.URL+"/pay?token=s3cret", "x", idem.WithLane("payments"))
	file, ids := queueFile(t, in)
	r := ok(t, file, "drain", "--timeout", "10s")
	assert.Contains(t, r.stdout, ": 1 settled (0 done, 1 failed, 0 expired), 0 pending")

	failed := listed(t, ok(t, file, "ls", "--json", "--state", "failed"))
	require.Len(t, failed, 1)
	require.NotNil(t, failed[0].Outcome)
	assert.Equal(t, "not_applied", *failed[0].Outcome)
	assert.Equal(t, 400, failed[0].LastStatus)
	assert.Equal(t, 400, failed[0].Result.Status)

	r = ok(t, file, "resubmit", ids[0].String())
	assert.Regexp(t, `^resubmitted 1 as \d+ \(new key\)\n$`, r.stdout)
	pending := listed(t, ok(t, file, "ls", "--json", "--state", "pending"))
	require.Len(t, pending, 1)
	assert.Equal(t, "payments", pending[0].Lane)
	assert.NotEqual(t, in.Key()[:8]+"…", pending[0].Key, "a new key")

	var old recordView
	require.NoError(t, jsonOf(ok(t, file, "show", "--json", "1"), &old))
	assert.Equal(t, pending[0].ID, old.ResubmittedAs)

	r = idemq(t, nil, "--file", file, "resubmit", ids[0].String())
	assert.Equal(t, exitError, r.code)
	assert.Contains(t, r.stderr, "cannot be resubmitted")
}

// TestResubmitUnknownNeedsForce: a record whose attempt may have been
// applied is resubmitted only with --force, in a file, in PostgreSQL and
// over --url, with the same words: each asks the queue, which refuses.
func TestResubmitUnknownNeedsForce(t *testing.T) {
	srv := newServer(t, idem.DefaultKeyHeader, 0, nil) // closes the connection: ambiguous
	in := func() *idem.Intent { return intent(t, srv.URL+"/pay?token=s3cret", "x") }
	drained := func(t *testing.T, flags ...string) {
		r := idemq(t, nil, append(flags, "drain", "--max-attempts", "1", "--timeout", "10s")...)
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, "1 failed")
	}
	file, _ := queueFile(t, in())
	dsn, _ := pgQueueOf(t, in())
	served, _ := queueFile(t, in())
	drained(t, "--file", file)
	drained(t, "--dsn", dsn)
	drained(t, "--file", served)
	url := serve(t, served, queueweb.Options{Writes: true})
	env := []string{"IDEMQ_TEST_AUTH=Bearer op3rator", "IDEMQ_FILE=", "IDEMQ_DSN=", "IDEMQ_URL="}

	var refusals []string
	for _, flags := range [][]string{
		{"--file", file},
		{"--dsn", dsn},
		{"--url", url, "--url-auth-env", "IDEMQ_TEST_AUTH"},
	} {
		t.Run(flags[0], func(t *testing.T) {
			var v recordView
			r := idemq(t, env, append(flags, "show", "--json", "1")...)
			require.NoError(t, jsonOf(r, &v), r.stderr)
			require.NotNil(t, v.Outcome)
			require.Equal(t, "unknown", *v.Outcome)
			assert.True(t, v.InDoubt)

			r = idemq(t, env, append(flags, "resubmit", "1")...)
			assert.Equal(t, exitError, r.code)
			assert.Contains(t, r.stderr, "outcome unknown")
			assert.Contains(t, r.stderr, "--force")
			refusals = append(refusals, r.stderr)
			assert.Empty(t, listed(t, idemq(t, env, append(flags, "ls", "--json", "--state", "pending")...)))

			r = idemq(t, env, append(flags, "resubmit", "--force", "1")...)
			assert.Equal(t, exitOK, r.code, r.stderr)
			assert.Contains(t, r.stdout, "resubmitted 1 as ")
		})
	}
	for _, r := range refusals[1:] {
		assert.Equal(t, refusals[0], r, "the refusal, for a file and another queue")
	}
}

func TestResetClock(t *testing.T) {
	file, _ := queueFile(t, intent(t, secretURL, "a"))
	r := ok(t, file, "reset-clock")
	assert.Regexp(t, `^clock mark reset: (none|\S+Z) -> \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\n$`, r.stdout)
	first := r.stdout[len(r.stdout)-len("2006-01-02T15:04:05Z\n"):]
	r = ok(t, file, "reset-clock")
	assert.Contains(t, r.stdout, "clock mark reset: "+first[:len(first)-1]+" -> ", "the mark was kept in the file")
}
