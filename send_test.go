package idem

import (
	"context"
	"io"
	"net/http"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// keepingTransport answers 503 until its last answer, 201, and keeps every
// request it was given with the body it read from it.
type keepingTransport struct {
	answers []int
	reqs    []*http.Request
	bodies  []string
}

func (k *keepingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var b []byte
	if req.Body != nil {
		var err error
		if b, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		_ = req.Body.Close()
	}
	k.reqs, k.bodies = append(k.reqs, req), append(k.bodies, string(b))
	status := k.answers[len(k.reqs)-1]
	return &http.Response{StatusCode: status, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

// TestDoAttemptsOwnTheirRequests: the first attempt's request is made from
// parts the operation holds, and each later attempt's from parts of its
// own: no two attempts share a request, URL, body reader, header or key
// value, and every attempt reads the whole body.
func TestDoAttemptsOwnTheirRequests(t *testing.T) {
	for _, tc := range []struct {
		method, body string
	}{
		{"POST", `{"amount":100}`}, // the operation holds a body reader and key value
		{"GET", ""},                // it holds neither
	} {
		t.Run(tc.method, func(t *testing.T) {
			kt := &keepingTransport{answers: []int{503, 503, 201}}
			c, _ := testClient(t, &http.Client{Transport: kt})
			in := mustIntent(t, tc.method, "http://api.example/pay?x=1", tc.body, WithHeader("Accept", "application/json"))
			res, err := c.Do(context.Background(), in)
			require.NoError(t, err)
			require.Len(t, kt.reqs, 3)
			for i, req := range kt.reqs {
				checkAttemptRequest(t, in, i, req, kt.bodies[i])
				for j, other := range kt.reqs[:i] {
					assert.NotSame(t, other, req, "attempts %d and %d: request", j+1, i+1)
					assert.NotSame(t, other.URL, req.URL, "attempts %d and %d: URL", j+1, i+1)
					assert.NotEqual(t, reflect.ValueOf(other.Header).Pointer(), reflect.ValueOf(req.Header).Pointer(),
						"attempts %d and %d: header", j+1, i+1)
					if tc.body != "" {
						assert.True(t, other.Body != req.Body, "attempts %d and %d: body", j+1, i+1) // the same reader or not
						assert.NotSame(t, &other.Header[DefaultKeyHeader][0], &req.Header[DefaultKeyHeader][0],
							"attempts %d and %d: key value", j+1, i+1)
					}
				}
			}
			assert.Same(t, kt.reqs[2], res.Response.Request)
		})
	}
}

// checkAttemptRequest checks the request of attempt i of in, whose body the
// transport read as body, after the last attempt went out.
func checkAttemptRequest(t *testing.T, in *Intent, i int, req *http.Request, body string) {
	t.Helper()
	want := string(in.Body())
	assert.Equal(t, want, body, "attempt %d body", i+1)
	assert.Equal(t, "http://api.example/pay?x=1", req.URL.String(), "attempt %d URL", i+1)
	assert.Equal(t, "api.example", req.Host, "attempt %d Host", i+1)
	assert.Equal(t, []string{"application/json"}, req.Header.Values("Accept"), "attempt %d header", i+1)
	assert.Equal(t, int64(len(want)), req.ContentLength, "attempt %d ContentLength", i+1)
	if in.Key() == "" {
		assert.Empty(t, req.Header.Values(DefaultKeyHeader), "attempt %d key", i+1)
	} else {
		assert.Equal(t, []string{in.Key()}, req.Header.Values(DefaultKeyHeader), "attempt %d key", i+1)
	}
	if want == "" {
		assert.Nil(t, req.Body, "attempt %d Body", i+1)
		assert.Nil(t, req.GetBody, "attempt %d GetBody", i+1)
		return
	}
	// GetBody still gives the whole body after later attempts went out.
	rc, err := req.GetBody()
	require.NoError(t, err)
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	assert.Equal(t, want, string(b), "attempt %d GetBody", i+1)
}
