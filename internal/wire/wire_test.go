package wire

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRecorder(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(204)
	}))
	defer srv.Close()

	tests := []struct {
		name string
		dial func(ctx context.Context, network, addr string) (net.Conn, error)
		want Trace
	}{
		{"answered", nil, Trace{Conns: 1, WroteHeaders: true, WroteRequest: true}},
		{"refused", func(context.Context, string, string) (net.Conn, error) {
			return nil, &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}
		}, Trace{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := &http.Transport{DialContext: tt.dial}
			defer tr.CloseIdleConnections()
			rec := New()
			req, err := http.NewRequestWithContext(rec.WithContext(context.Background()), "POST", srv.URL, strings.NewReader("x"))
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
			assert.Equal(t, tt.want, rec.Trace())
		})
	}
}

func TestRecorderHeadersWrittenNoAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, _ := http.NewResponseController(w).Hijack()
		conn.Close()
	}))
	defer srv.Close()
	rec := New()
	req, _ := http.NewRequestWithContext(rec.WithContext(context.Background()), "POST", srv.URL, strings.NewReader("x"))
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	_, err := tr.RoundTrip(req)
	require.Error(t, err)
	f := rec.Trace()
	assert.True(t, f.WroteHeaders)
	assert.Equal(t, 1, f.Conns)
}

func TestRecorderComposes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	outer := 0
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { outer++ },
	})
	rec := New()
	req, _ := http.NewRequestWithContext(rec.WithContext(ctx), "GET", srv.URL, nil)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 1, outer, "an existing trace keeps running")
	assert.Equal(t, 1, rec.Trace().Conns)
}

// TestRecorderResent: net/http resends a replayable request on a fresh
// connection when a reused one fails after the headers went out; the
// Recorder marks it, and only then.
func TestRecorderResent(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if n.Add(1) == 2 { // the first send of the POST: read, then hang up
			conn, _, _ := http.NewResponseController(w).Hijack()
			conn.Close()
			return
		}
		w.WriteHeader(201)
	}))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()

	warm, err := tr.RoundTrip(httptestRequest(t, context.Background(), "GET", srv.URL, ""))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, warm.Body)
	warm.Body.Close() // the connection goes back to the pool

	rec := New()
	req := httptestRequest(t, rec.WithContext(context.Background()), "POST", srv.URL, "x")
	req.Header.Set("Idempotency-Key", "k-1") // makes a POST replayable for net/http
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, Trace{Conns: 2, WroteHeaders: true, WroteRequest: true, Resent: true}, rec.Trace())

	rec = New()
	resp, err = tr.RoundTrip(httptestRequest(t, rec.WithContext(context.Background()), "POST", srv.URL, "y"))
	require.NoError(t, err)
	resp.Body.Close()
	assert.False(t, rec.Trace().Resent, "one send on one connection")
}

func httptestRequest(t *testing.T, ctx context.Context, method, url, body string) *http.Request {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	require.NoError(t, err)
	return req
}

// TestRecorderRedirectIsNotResent: a redirect net/http follows takes a new
// connection after an answer, which is no resend.
func TestRecorderRedirectIsNotResent(t *testing.T) {
	var mux http.ServeMux
	mux.HandleFunc("/a", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/b", http.StatusTemporaryRedirect) })
	mux.HandleFunc("/b", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(404) })
	srv := httptest.NewServer(&mux)
	defer srv.Close()
	tr := &http.Transport{DisableKeepAlives: true} // each hop on a new connection
	defer tr.CloseIdleConnections()
	rec := New()
	req := httptestRequest(t, rec.WithContext(context.Background()), "POST", srv.URL+"/a", "x")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 404, resp.StatusCode)
	assert.Equal(t, Trace{Conns: 2, WroteHeaders: true, WroteRequest: true}, rec.Trace())
}

// TestRecorderZeroValue: a Recorder held in another struct, never made by
// New, records an attempt as one from New does.
func TestRecorderZeroValue(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	var holder struct {
		n   int
		rec Recorder
	}
	req := httptestRequest(t, holder.rec.WithContext(context.Background()), "POST", srv.URL, "x")
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, Trace{Conns: 1, WroteHeaders: true, WroteRequest: true}, holder.rec.Trace())
}
