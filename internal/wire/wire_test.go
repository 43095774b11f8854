package wire

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
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
		want Facts
	}{
		{"answered", nil, Facts{Conns: 1, WroteHeaders: true, WroteRequest: true}},
		{"refused", func(context.Context, string, string) (net.Conn, error) {
			return nil, &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}
		}, Facts{}},
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
			assert.Equal(t, tt.want, rec.Facts())
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
	f := rec.Facts()
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
	assert.Equal(t, 1, rec.Facts().Conns)
}
