package idemtest

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestResources(t *testing.T) {
	s := startServer(t, Options{RequireKey: true})
	c := testClient(t, s)
	url := s.URL() + "/resources/r1"

	// Keys are ignored on PUT, DELETE and GET: reusing one with another
	// body is no 422, and a repeat is executed, not replayed.
	steps := []struct {
		method, key, body string
		wantStatus        int
		wantBody          string // "" skips the check
		wantEffects       int
	}{
		{"GET", "", "", 404, "", 0},
		{"PUT", "k", "v1", 201, `{"id":"r1","seq":1}`, 1},
		{"PUT", "k", "v2", 200, `{"id":"r1","seq":2}`, 2},
		{"PUT", "", "v2", 200, `{"id":"r1","seq":3}`, 3},
		{"GET", "k", "", 200, "v2", 3},
		{"DELETE", `"malformed`, "", 204, "", 4},
		{"DELETE", "", "", 404, "", 4},
		{"GET", "", "", 404, "", 4},
	}
	for i, step := range steps {
		got := mustSend(t, c, step.method, url, step.key, step.body)
		assert.Equal(t, step.wantStatus, got.status, "step %d %s status", i, step.method)
		if step.wantBody != "" {
			assert.Equal(t, step.wantBody, got.body, "step %d %s body", i, step.method)
		}
		assert.Empty(t, got.header.Get("Idempotent-Replayed"), "step %d replayed", i)
		assert.Equal(t, step.wantEffects, s.TotalEffects(), "step %d TotalEffects", i)
	}
	assert.Equal(t, 2, s.EffectsForKey("k"), "EffectsForKey counts keyed PUTs")
	assert.Equal(t, 2, s.EffectsForPayload([]byte("v2")), "EffectsForPayload")
	assert.Equal(t, 0, s.Stats().BadRequests, "Stats.BadRequests")
}

func TestResourceKeepsContentType(t *testing.T) {
	s := startServer(t, Options{})
	c := testClient(t, s)
	req, err := http.NewRequest("PUT", s.URL()+"/resources/doc", http.NoBody)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	resp, err := c.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode, "PUT status")
	got := mustSend(t, c, "GET", s.URL()+"/resources/doc", "", "")
	assert.Equal(t, "text/plain; charset=utf-8", got.header.Get("Content-Type"))
}
