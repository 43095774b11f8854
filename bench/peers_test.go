package bench

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-resty/resty/v2"
	"github.com/google/uuid"
	"github.com/hashicorp/go-retryablehttp"

	"github.com/idem-go/idem"
)

// payload is the small JSON body of every POST.
var payload = []byte(`{"payment":"p-000001","amount_cents":4200,"currency":"EUR","card":"tok_visa"}`)

// opHeader names the operation a request belongs to, so a server can count
// effects per operation whatever the client's retries do.
const opHeader = "X-Op"

// newTransport is the one http.Transport setup every peer gets a fresh copy
// of, so that connection reuse is equal. dials, if not nil, counts dials:
// under refused connections, each is an attempt.
func newTransport(dials *atomic.Int64) *http.Transport {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if dials != nil {
				dials.Add(1)
			}
			return d.DialContext(ctx, network, addr)
		},
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// retries configures every peer alike: the same number of retries and the
// same backoff bounds.
type retries struct {
	n         int // retries after the first attempt
	base, max time.Duration
}

// equalRetries: 4 attempts, idem's default, and short waits so a run holds
// many operations.
var equalRetries = retries{n: 3, base: 2 * time.Millisecond, max: 20 * time.Millisecond}

// peer sends operations as its library's caller would.
type peer struct {
	// do sends one operation and reads and closes the response. body is
	// nil for a GET; op, if not empty, is sent in opHeader. It returns the
	// final status, or the error the caller would see.
	do func(ctx context.Context, method, url string, body []byte, op string) (int, error)
	// stats, if not nil, describes what the client counted itself.
	stats func() idem.Stats
}

// peerMaker makes a peer that sends through tr.
type peerMaker struct {
	name string
	make func(tr http.RoundTripper, r retries) peer
}

// peers lists the clients compared, raw http.Client first: benchstat
// compares columns with the first.
func peers() []peerMaker {
	return []peerMaker{
		{"raw", rawPeer},
		{"retryablehttp", retryablePeer},
		{"resty", restyPeer},
		{"idem-do", idemDoPeer},
		{"idem-transport", idemTransportPeer},
	}
}

// keyedPeers are compared on the success path only, for POST: peers given a
// key per operation, so that they send what idem sends.
func keyedPeers() []peerMaker {
	return []peerMaker{{"retryablehttp-key", keyedRetryablePeer}}
}

// newPeer makes m's peer over a fresh newTransport, with equalRetries.
func newPeer(b *testing.B, m peerMaker, dials *atomic.Int64) peer {
	tr := newTransport(dials)
	b.Cleanup(tr.CloseIdleConnections)
	return m.make(tr, equalRetries)
}

func bodyReader(body []byte) io.Reader {
	if body == nil {
		return nil
	}
	return bytes.NewReader(body)
}

// setHeaders sets what every peer sends beside the body: its Content-Type,
// opHeader if op is not empty, and, if key is set, a fresh idempotency key on
// a request that is not a GET.
func setHeaders(req *http.Request, body []byte, op string, key bool) {
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if op != "" {
		req.Header.Set(opHeader, op)
	}
	if key && req.Method != http.MethodGet {
		req.Header.Set(idem.DefaultKeyHeader, uuid.NewString())
	}
}

// readStatus reads and closes the body of resp, as a caller would, and
// returns its status.
func readStatus(resp *http.Response, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// stdDo sends through an http.Client; key, if set, adds an idempotency key
// to non-GET requests, as an application using idem.Transport must.
func stdDo(hc *http.Client, key bool) func(ctx context.Context, method, url string, body []byte, op string) (int, error) {
	return func(ctx context.Context, method, url string, body []byte, op string) (int, error) {
		req, err := http.NewRequestWithContext(ctx, method, url, bodyReader(body))
		if err != nil {
			return 0, err
		}
		setHeaders(req, body, op, key)
		return readStatus(hc.Do(req))
	}
}

// rawPeer is net/http alone: no retries of its own.
func rawPeer(tr http.RoundTripper, _ retries) peer {
	return peer{do: stdDo(&http.Client{Transport: tr}, false)}
}

// retryablePeer is go-retryablehttp's NewClient with the equal retry count
// and waits, its logger silenced.
func retryablePeer(tr http.RoundTripper, r retries) peer {
	return retryable(tr, r, false)
}

// keyedRetryablePeer is retryablePeer adding a fresh idempotency key to each
// POST, as a caller must for its retries to be safe: the same request on the
// wire as idem's.
func keyedRetryablePeer(tr http.RoundTripper, r retries) peer {
	return retryable(tr, r, true)
}

func retryable(tr http.RoundTripper, r retries, key bool) peer {
	c := retryablehttp.NewClient()
	c.HTTPClient = &http.Client{Transport: tr}
	c.Logger = nil
	c.RetryMax = r.n
	c.RetryWaitMin, c.RetryWaitMax = r.base, r.max
	return peer{do: func(ctx context.Context, method, url string, body []byte, op string) (int, error) {
		var raw any
		if body != nil {
			raw = body
		}
		req, err := retryablehttp.NewRequestWithContext(ctx, method, url, raw)
		if err != nil {
			return 0, err
		}
		setHeaders(req.Request, body, op, key)
		return readStatus(c.Do(req))
	}}
}

// quiet is a resty.Logger that drops everything.
type quiet struct{}

func (quiet) Errorf(string, ...any) {}
func (quiet) Warnf(string, ...any)  {}
func (quiet) Debugf(string, ...any) {}

// restyPeer is resty.New with the equal retry count and waits, its logger
// silenced. resty reads the whole response body, as its callers expect.
func restyPeer(tr http.RoundTripper, r retries) peer {
	c := resty.New().SetTransport(tr).SetLogger(quiet{}).
		SetRetryCount(r.n).SetRetryWaitTime(r.base).SetRetryMaxWaitTime(r.max)
	return peer{do: func(ctx context.Context, method, url string, body []byte, op string) (int, error) {
		req := c.R().SetContext(ctx)
		if body != nil {
			req.SetHeader("Content-Type", "application/json").SetBody(body)
		}
		if op != "" {
			req.SetHeader(opHeader, op)
		}
		resp, err := req.Execute(method, url)
		if err != nil {
			return 0, err
		}
		return resp.StatusCode(), nil
	}}
}

func idemPolicy(r retries) idem.Policy {
	return idem.Policy{MaxAttempts: r.n + 1, BaseDelay: r.base, MaxDelay: r.max}
}

// idemDoPeer makes an Intent per operation, as a caller would, and runs it
// with Client.Do: the key is generated by NewIntent.
func idemDoPeer(tr http.RoundTripper, r retries) peer {
	c := &idem.Client{HTTPClient: &http.Client{Transport: tr}, Policy: idemPolicy(r)}
	return peer{stats: c.Stats, do: func(ctx context.Context, method, url string, body []byte, op string) (int, error) {
		var opts []idem.IntentOption
		if body != nil {
			opts = append(opts, idem.WithHeader("Content-Type", "application/json"))
		}
		if op != "" {
			opts = append(opts, idem.WithHeader(opHeader, op))
		}
		in, err := idem.NewIntent(method, url, body, opts...)
		if err != nil {
			return 0, err
		}
		res, err := c.Do(ctx, in)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, res.Response.Body)
		_ = res.Response.Body.Close()
		return res.Response.StatusCode, nil
	}}
}

// idemTransportPeer is an http.Client over idem.Transport. The application
// gives each POST its key, since the Transport never makes one.
func idemTransportPeer(tr http.RoundTripper, r retries) peer {
	t := &idem.Transport{Base: tr, Policy: idemPolicy(r)}
	return peer{stats: t.Stats, do: stdDo(&http.Client{Transport: t}, true)}
}
