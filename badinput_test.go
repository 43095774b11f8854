package idem_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
)

// TestBadInputIntent gives NewIntent every kind of bad argument: each is
// refused with a sentinel and an idem: message that names the problem and
// never echoes a credential.
func TestBadInputIntent(t *testing.T) {
	const u = "https://api.example/pay"
	tests := []struct {
		name   string
		method string
		url    string
		body   []byte
		opts   []idem.IntentOption
		want   error
		msg    string
	}{
		{"empty URL", "POST", "", nil, nil, idem.ErrInvalidIntent, "empty URL"},
		{"relative URL", "POST", "/pay", nil, nil, idem.ErrInvalidIntent, `URL "/pay" is not absolute`},
		{"bad escape with a password", "POST", "https://bob:s3cret@h/%zz", nil, nil, idem.ErrInvalidIntent, `invalid URL escape "%zz"`},
		{"bad escape", "POST", "http://h/%zz", nil, nil, idem.ErrInvalidIntent, `invalid URL escape "%zz"`},
		{"control byte in URL", "POST", "http://h/\x00", nil, nil, idem.ErrInvalidIntent, "invalid control character"},
		{"unsupported scheme", "POST", "ftp://h/x", nil, nil, idem.ErrInvalidIntent, "scheme must be http or https"},
		{"token in the query", "POST", "ftp://h/x?token=s3cret#s3cret", nil, nil, idem.ErrInvalidIntent, `URL "ftp://h/x": scheme must be`},
		{"user info and query", "POST", "https://bob:s3cret@h/x?k=s3cret", nil, nil, idem.ErrInvalidIntent, `URL "https://redacted@h/x" carries user info`},
		{"no host", "POST", "http:///x", nil, nil, idem.ErrInvalidIntent, "has no host"},
		{"user info", "POST", "https://bob:s3cret@h/x", nil, nil, idem.ErrInvalidIntent, "carries user info"},
		{"user only", "POST", "https://bob@h/x", nil, nil, idem.ErrInvalidIntent, "carries user info"},
		{"unknown method", "FROB", u, nil, nil, idem.ErrInvalidIntent, `unsupported method "FROB"`},
		{"empty method", "", u, nil, nil, idem.ErrInvalidIntent, `unsupported method ""`},
		{"CONNECT", "CONNECT", u, nil, nil, idem.ErrInvalidIntent, `unsupported method "CONNECT"`},
		{"lowercase method", "post", u, nil, nil, idem.ErrInvalidIntent, `methods are case-sensitive, use "POST"`},
		{"mixed-case method", "Delete", u, nil, nil, idem.ErrInvalidIntent, `use "DELETE"`},
		{"body over MaxBodyBytes", "POST", u, make([]byte, idem.MaxBodyBytes+1), nil, idem.ErrBodyTooLarge, "8388609 bytes, limit 8388608"},
		{"empty key", "POST", u, nil, []idem.IntentOption{idem.WithKey("")}, idem.ErrInvalidKey, "idempotency key: empty"},
		{"oversized key", "POST", u, nil, []idem.IntentOption{idem.WithKey(strings.Repeat("k", idem.MaxKeyLen+1))}, idem.ErrInvalidKey, "256 bytes, limit 255"},
		{"huge key", "POST", u, nil, []idem.IntentOption{idem.WithKey(strings.Repeat("k", 1<<20))}, idem.ErrInvalidKey, "1048576 bytes, limit 255"},
		{"non-ASCII key", "POST", u, nil, []idem.IntentOption{idem.WithKey("clé")}, idem.ErrInvalidKey, "byte 0xc3 at offset 2 is not visible ASCII"},
		{"non-breaking space key", "POST", u, nil, []idem.IntentOption{idem.WithKey("\u00a0k")}, idem.ErrInvalidKey, "offset 0 is not visible ASCII"},
		{"key with comma", "POST", u, nil, []idem.IntentOption{idem.WithKey("a,b")}, idem.ErrInvalidKey, `character ',' at offset 1`},
		{"Authorization", "POST", u, nil, []idem.IntentOption{idem.WithHeader("Authorization", "Bearer s3cret")}, idem.ErrSecretHeader, "Authorization: credentials are added per attempt by Client.Authorize"},
		{"authorization lowercase", "POST", u, nil, []idem.IntentOption{idem.WithHeader("authorization", "Bearer s3cret")}, idem.ErrSecretHeader, "Authorization"},
		{"AUTHORIZATION uppercase", "POST", u, nil, []idem.IntentOption{idem.WithHeader("AUTHORIZATION", "Bearer s3cret")}, idem.ErrSecretHeader, "Authorization"},
		{"Cookie", "POST", u, nil, []idem.IntentOption{idem.WithHeader("Cookie", "session=s3cret")}, idem.ErrSecretHeader, "Cookie"},
		{"cOOkIE mixed case", "GET", u, nil, []idem.IntentOption{idem.WithHeader("cOOkIE", "session=s3cret")}, idem.ErrSecretHeader, "Cookie"},
		{"X-Api-Key", "POST", u, nil, []idem.IntentOption{idem.WithHeader("x-api-key", "s3cret")}, idem.ErrSecretHeader, "X-Api-Key"},
		{"Set-Cookie", "POST", u, nil, []idem.IntentOption{idem.WithHeader("Set-Cookie", "a=s3cret")}, idem.ErrSecretHeader, "Set-Cookie"},
		{"headers too large", "POST", u, nil, []idem.IntentOption{idem.WithHeader("X-Big", strings.Repeat("v", idem.MaxHeaderBytes))}, idem.ErrInvalidIntent, "headers take"},
		{"Proxy-Authorization", "PUT", u, nil, []idem.IntentOption{idem.WithHeader("Proxy-Authorization", "Basic s3cret")}, idem.ErrSecretHeader, "Proxy-Authorization"},
		{"proxy-authorization lowercase", "PUT", u, nil, []idem.IntentOption{idem.WithHeader("proxy-authorization", "Basic s3cret")}, idem.ErrSecretHeader, "Proxy-Authorization"},
		{"port above range", "POST", "http://h:99999/x?token=s3cret", nil, nil, idem.ErrInvalidIntent, `URL "http://h:99999/x": port "99999" is not a number from 1 to 65535`},
		{"port zero", "POST", "http://h:0/x", nil, nil, idem.ErrInvalidIntent, `port "0"`},
		{"Upgrade", "POST", u, nil, []idem.IntentOption{idem.WithHeader("Upgrade", "h2c")}, idem.ErrInvalidIntent, "header Upgrade is hop-by-hop"},
		{"Keep-Alive", "POST", u, nil, []idem.IntentOption{idem.WithHeader("keep-alive", "timeout=5")}, idem.ErrInvalidIntent, "header Keep-Alive is hop-by-hop"},
		{"Proxy-Connection", "POST", u, nil, []idem.IntentOption{idem.WithHeader("Proxy-Connection", "keep-alive")}, idem.ErrInvalidIntent, "header Proxy-Connection is hop-by-hop"},
		{"Te", "GET", u, nil, []idem.IntentOption{idem.WithHeader("TE", "trailers")}, idem.ErrInvalidIntent, "header Te is hop-by-hop"},
		{"Connection", "POST", u, nil, []idem.IntentOption{idem.WithHeader("Connection", "close")}, idem.ErrInvalidIntent, "header Connection is hop-by-hop"},
		{"Transfer-Encoding", "POST", u, nil, []idem.IntentOption{idem.WithHeader("Transfer-Encoding", "chunked")}, idem.ErrInvalidIntent, "header Transfer-Encoding is hop-by-hop"},
		{"Trailer", "POST", u, nil, []idem.IntentOption{idem.WithHeader("Trailer", "X-Sum")}, idem.ErrInvalidIntent, "header Trailer is hop-by-hop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, err := idem.NewIntent(tt.method, tt.url, tt.body, tt.opts...)
			require.Error(t, err)
			assert.Nil(t, in)
			assert.ErrorIs(t, err, tt.want)
			assert.True(t, strings.HasPrefix(err.Error(), "idem: "), "message %q lacks the idem: prefix", err)
			assert.Contains(t, err.Error(), tt.msg)
			assert.NotContains(t, err.Error(), "s3cret", "an error must not echo a credential")
		})
	}
}

// TestBadInputNilIntent passes a nil intent to Do, Resume and a queue's
// Enqueue: each refuses it without a panic, and the queue keeps what it held.
func TestBadInputNilIntent(t *testing.T) {
	c := &idem.Client{}
	_, err := c.Do(context.Background(), nil)
	assert.ErrorIs(t, err, idem.ErrInvalidIntent)
	assert.EqualError(t, err, "idem: invalid intent: nil intent")

	_, err = c.Resume(context.Background(), nil, err)
	assert.ErrorIs(t, err, idem.ErrInvalidIntent)
	assert.EqualError(t, err, "idem: invalid intent: nil intent")

	q, err := queue.Open(filepath.Join(t.TempDir(), "q.db"), queue.Options{})
	require.NoError(t, err)
	defer q.Close()
	kept, err := idem.NewIntent("POST", "https://api.example/pay", []byte("kept"))
	require.NoError(t, err)
	id, err := q.Enqueue(context.Background(), kept)
	require.NoError(t, err)

	_, err = q.Enqueue(context.Background(), nil)
	assert.ErrorIs(t, err, idem.ErrInvalidIntent)
	assert.EqualError(t, err, "idem: invalid intent: nil intent")

	r, err := q.Get(context.Background(), id)
	require.NoError(t, err, "the record enqueued before must still be there")
	assert.Equal(t, kept.Key(), r.Intent.Key())
	assert.Equal(t, []byte("kept"), r.Intent.Body())
	counts, err := q.Counts(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, counts[queue.Pending])
}

// TestBadInputStreamBody: a body that arrives as a stream is read up to
// one byte past MaxBodyBytes (see its doc), so that NewIntent refuses a
// longer stream instead of holding it cut.
func TestBadInputStreamBody(t *testing.T) {
	read := func(n int64) []byte {
		b, err := io.ReadAll(io.LimitReader(io.LimitReader(zeros{}, n), idem.MaxBodyBytes+1))
		require.NoError(t, err)
		return b
	}
	_, err := idem.NewIntent("POST", "https://api.example/upload", read(idem.MaxBodyBytes+1<<20))
	assert.ErrorIs(t, err, idem.ErrBodyTooLarge)
	assert.EqualError(t, err, "idem: body too large: 8388609 bytes, limit 8388608")

	in, err := idem.NewIntent("POST", "https://api.example/upload", read(idem.MaxBodyBytes))
	require.NoError(t, err, "a body of exactly MaxBodyBytes is accepted")
	assert.Len(t, in.Body(), idem.MaxBodyBytes)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestBadInputRetryAfter sends Retry-After values a server might get wrong
// through a real server: negative and garbage values are ignored (the client
// backs off as if there were none and finishes), a huge one ends the intent
// with ErrRetryAfterTooLong and the wait in Error.RetryAfter.
func TestBadInputRetryAfter(t *testing.T) {
	const maxSecs = (1<<63 - 1) / int64(time.Second)
	tests := []struct {
		name       string
		value      string
		status     int
		retryAfter time.Duration // 0: ignored, the next attempt succeeds
	}{
		{"negative", "-1", 429, 0},
		{"negative date-like", "-Wed, 02 Dec 2026 10:00:00 GMT", 429, 0},
		{"word", "soon", 503, 0},
		{"fraction", "1.5", 429, 0},
		{"hex", "0x10", 429, 0},
		{"bad date", "Wed, 99 Foo 2026 10:00:00 GMT", 503, 0},
		{"empty", "", 503, 0},
		{"ten days", "864000", 503, 240 * time.Hour},
		{"twenty digits", "99999999999999999999", 429, time.Duration(maxSecs) * time.Second},
		{"year 9999", "Fri, 31 Dec 9999 23:59:59 GMT", 503, -1}, // -1: huge, value depends on now
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) == 1 {
					w.Header().Set("Retry-After", tt.value)
					w.WriteHeader(tt.status)
					return
				}
				w.WriteHeader(http.StatusCreated)
			}))
			defer srv.Close()
			c := badClient(t)
			in, err := idem.NewIntent("POST", srv.URL, []byte("pay"))
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			res, err := c.Do(ctx, in)
			if tt.retryAfter == 0 {
				require.NoError(t, err, "a malformed Retry-After is ignored")
				res.Response.Body.Close()
				assert.Equal(t, idem.Applied, res.Outcome)
				require.Len(t, res.Attempts, 2)
				assert.LessOrEqual(t, res.Attempts[0].Wait, c.Policy.MaxDelay, "the wait is the backoff, not the header")
				return
			}
			require.Error(t, err)
			assert.Nil(t, res)
			assert.ErrorIs(t, err, idem.ErrRetryAfterTooLong)
			var e *idem.Error
			require.ErrorAs(t, err, &e)
			if tt.retryAfter > 0 {
				assert.Equal(t, tt.retryAfter, e.RetryAfter)
			} else {
				assert.Greater(t, e.RetryAfter, 24*time.Hour*365*100, "thousands of years")
			}
			assert.Contains(t, err.Error(), "(Retry-After), over the 1m0s cap")
			assert.True(t, strings.HasPrefix(err.Error(), "idem: "))
			assert.Equal(t, int32(1), n.Load(), "no second attempt")
			if tt.status == 503 {
				assert.ErrorIs(t, err, idem.ErrOutcomeUnknown)
			} else {
				assert.ErrorIs(t, err, idem.ErrNotApplied)
			}
		})
	}
}

// badClient returns a Client with its own transport and millisecond
// backoff, so retries in these tests are quick.
func badClient(t *testing.T) *idem.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return &idem.Client{
		HTTPClient: &http.Client{Transport: tr},
		Policy:     idem.Policy{BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond},
		Budget:     idem.NewBudget(0),
	}
}

// endlessServer answers each request with the next status of statuses (200
// past their end) and, for a status in endless, a body that never ends: the
// handler writes until the client goes away. It counts the handlers that
// returned and the bytes they wrote.
type endlessServer struct {
	*httptest.Server
	mu       sync.Mutex // guards statuses
	statuses []int
	endless  map[int]bool
	returned chan int64 // bytes written, when a handler returns
	requests atomic.Int32
}

func newEndlessServer(t *testing.T, endless []int, statuses ...int) *endlessServer {
	t.Helper()
	s := &endlessServer{statuses: statuses, endless: map[int]bool{}, returned: make(chan int64, 16)}
	for _, st := range endless {
		s.endless[st] = true
	}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *endlessServer) serve(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	s.mu.Lock()
	status := http.StatusOK
	if len(s.statuses) > 0 {
		status, s.statuses = s.statuses[0], s.statuses[1:]
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(status)
	if !s.endless[status] {
		io.WriteString(w, "ok")
		s.returned <- 2
		return
	}
	chunk := []byte(strings.Repeat("endless ", 4<<10))
	var written int64
	for r.Context().Err() == nil {
		n, err := w.Write(chunk)
		written += int64(n)
		if err != nil {
			break
		}
	}
	s.returned <- written
}

// handlerReturned waits for a handler to see the client go away.
func (s *endlessServer) handlerReturned(t *testing.T) int64 {
	t.Helper()
	select {
	case n := <-s.returned:
		return n
	case <-time.After(5 * time.Second):
		t.Fatal("the handler is still writing: the client never closed the connection")
		return 0
	}
}

// TestBadInputEndlessBody has a server send a body that never ends. On an
// intermediate response Do drains a bounded amount, closes, and finishes;
// on the final response the caller gets the body and can read a bounded
// amount and close it.
func TestBadInputEndlessBody(t *testing.T) {
	t.Run("intermediate", func(t *testing.T) {
		srv := newEndlessServer(t, []int{503}, 503, 201)
		in, err := idem.NewIntent("POST", srv.URL, []byte("pay"))
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := badClient(t).Do(ctx, in)
		require.NoError(t, err)
		defer res.Response.Body.Close()
		assert.Equal(t, idem.Applied, res.Outcome)
		assert.Equal(t, 201, res.Response.StatusCode)
		assert.Equal(t, int32(2), srv.requests.Load())
		written := srv.handlerReturned(t)
		t.Logf("handler wrote %d bytes before the client went away", written)
		// What the handler wrote before its writes failed sits in socket
		// buffers; the client read at most a bounded part of it.
		assert.Less(t, written, int64(256<<20), "the client kept reading the endless body")
	})
	t.Run("final", func(t *testing.T) {
		srv := newEndlessServer(t, []int{200}, 200)
		in, err := idem.NewIntent("POST", srv.URL, []byte("pay"))
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := badClient(t).Do(ctx, in)
		require.NoError(t, err)
		assert.Equal(t, idem.Applied, res.Outcome)
		n, err := io.CopyN(io.Discard, res.Response.Body, 1<<20)
		require.NoError(t, err)
		assert.Equal(t, int64(1<<20), n)
		require.NoError(t, res.Response.Body.Close())
		srv.handlerReturned(t)
	})
}

// TestBadInputEndlessBodyQueue has a server answer a queued attempt with a
// body that never ends: the stored result is cut at MaxResultBody and
// marked Truncated, and the record settles.
func TestBadInputEndlessBodyQueue(t *testing.T) {
	srv := newEndlessServer(t, []int{200}, 200)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	q, err := queue.Open(filepath.Join(t.TempDir(), "q.db"), queue.Options{
		Client:        &idem.Client{HTTPClient: &http.Client{Transport: tr}},
		MaxResultBody: 1000,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- q.Run(ctx) }()
	defer func() {
		require.NoError(t, q.Close())
		require.NoError(t, <-done)
	}()

	in, err := idem.NewIntent("POST", srv.URL, []byte("pay"))
	require.NoError(t, err)
	id, err := q.Enqueue(ctx, in)
	require.NoError(t, err)
	r, err := q.Wait(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, queue.Done, r.State)
	require.NotNil(t, r.Result)
	assert.Equal(t, 200, r.Result.Status)
	assert.Len(t, r.Result.Body, 1000)
	assert.True(t, r.Result.Truncated)
	assert.Equal(t, "endless endless ", string(r.Result.Body[:16]))
	srv.handlerReturned(t)

	again, err := q.Get(context.Background(), id) // and so it is stored
	require.NoError(t, err)
	assert.Len(t, again.Result.Body, 1000)
	assert.True(t, again.Result.Truncated)
}
