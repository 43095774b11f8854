package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out))
	got := out.String()
	for _, want := range []string{
		// The five orders sent with Do: requests 3 and 6 were answered 503,
		// and their retries were replayed; the queue's first record was the
		// 9th request, answered 503 and retried by the queue.
		"3                      error.type=503 http.request.method=POST http.response.status_code=503 idem.action=retry idem.class=ambiguous\n",
		"2                      http.request.method=POST http.request.resend_count=1 http.response.status_code=201 idem.action=done idem.class=applied\n",
		"1                      idem.outcome=not_applied\n",
		"5                      idem.outcome=applied\n",
		"2                      idem.queue.state=done\n",
	} {
		assert.Contains(t, got, want)
	}
	// One count of retries: the attempts with idem.action=retry.
	assert.NotContains(t, got, "idem.retries", "a second count of retries")
	assert.False(t, strings.Contains(got, "not printed"), "every instrument printed:\n%s", got)
}
