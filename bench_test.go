package idem

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// The success path, side by side: a raw http.Client POST and the same POST
// through Client.Do, on one loopback server in the same run. Compare with
// benchstat or read the ratio of ns/op.

func benchServer(b *testing.B) (*httptest.Server, *http.Client) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"pay_1"}`)
	}))
	b.Cleanup(srv.Close)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	b.Cleanup(tr.CloseIdleConnections)
	return srv, &http.Client{Transport: tr}
}

var benchBody = []byte(`{"payment":"p-00001","amount_cents":4200,"currency":"EUR"}`)

func BenchmarkSuccessPOST(b *testing.B) {
	b.Run("raw", func(b *testing.B) {
		srv, hc := benchServer(b)
		b.ReportAllocs()
		for b.Loop() {
			req, _ := http.NewRequestWithContext(context.Background(), "POST", srv.URL, bytes.NewReader(benchBody))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", "5f1e0c2a-7a43-4d2e-9d0e-4c1a2b3c4d5e")
			resp, err := hc.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	b.Run("idem", func(b *testing.B) {
		srv, hc := benchServer(b)
		c := &Client{HTTPClient: hc}
		b.ReportAllocs()
		for b.Loop() {
			in, err := NewIntent("POST", srv.URL, benchBody, WithHeader("Content-Type", "application/json"))
			if err != nil {
				b.Fatal(err)
			}
			res, err := c.Do(context.Background(), in)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, res.Response.Body)
			res.Response.Body.Close()
		}
	})
}

// BenchmarkDecodeManyHeaders decodes an intent with 6,000 headers: the worst
// case the index of intentConfig (see maxScan) keeps linear.
func BenchmarkDecodeManyHeaders(b *testing.B) {
	opts := make([]IntentOption, 0, 6000)
	for i := range 6000 {
		opts = append(opts, WithHeader(fmt.Sprintf("x%d", i), "v"))
	}
	in, err := NewIntent("POST", "http://h/x", nil, opts...)
	if err != nil {
		b.Fatal(err)
	}
	data, err := in.MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		var out Intent
		if err := out.UnmarshalBinary(data); err != nil {
			b.Fatal(err)
		}
	}
}
