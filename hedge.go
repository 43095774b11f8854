package idem

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/idem-go/idem/internal/methods"
	"github.com/idem-go/idem/internal/wire"
)

// A hedge is a second request of one attempt, sent to the same URL when the
// first has had no answer (response headers) for Policy.HedgeAfter, so that
// a slow server or connection costs a read HedgeAfter more rather than its
// whole delay. Only a safe method is hedged: two requests of a write, keyed
// or not, would be two operations to a server that does not dedupe, or a
// 409 from one that does.
//
// The rules, in the order they apply:
//   - the first answer, from either request, is the attempt's; the other
//     request is cancelled (its context) and its response, if one comes,
//     closed, by a goroutine that waits for it;
//   - a request that fails while the other is under way is waited out: the
//     other may still answer. When the first fails before the hedge went
//     out, the attempt fails at once, without a hedge: the retry rule, not
//     the hedge, answers a refused connection;
//   - when both fail, the attempt's error is the one that came first;
//   - at most one hedge per attempt. Both requests end with the attempt's
//     timeout and the operation's context;
//   - a request that panics (in the HTTPClient's RoundTripper,
//     CheckRedirect or Jar) or calls runtime.Goexit ends the attempt, the
//     other request cancelled, and the caller's goroutine panics (with an
//     error holding the value and the request's stack, which the caller's
//     does not show) or exits: the requests run on goroutines of idem's,
//     and an unhedged request would have done so on the caller's. A
//     request that panics once the attempt has its answer is cancelled
//     already, its result dropped, its panic too.
//
// The attempt's record (Attempt.Wire) holds the facts of the request whose
// result it reports, recorded by a recorder of its own: a recorder shared
// by two requests would mix their connections, and for a safe method only
// the reported request's facts bear on the decision. Wire.Hedged says that
// a hedge went out, and Stats.Requests counts it.
//
// The hedge is a clone of the first request, headers and all (credentials
// from Authorize and what OnSend added), its body from GetBody; neither
// hook runs again. Its context is the attempt's, not the one OnSend
// returned, which carries the first request's recorder. A request whose
// body cannot be replayed (a Transport's request without GetBody) is not
// hedged.

// sent says which of an attempt's requests the attempt reports.
type sent struct {
	rec    *wire.Recorder // the reported request's recorder
	hedged bool           // a hedge went out
}

// sendAttempt sends req, the request of one attempt whose context (before
// the recorder rec) is actx, hedging it when the policy and the method allow.
func (r *run) sendAttempt(actx context.Context, req *http.Request, rec *wire.Recorder) (*http.Response, sent, error) {
	if !r.hedgeable(req) {
		resp, err := r.s.send(req)
		return resp, sent{rec: rec}, err
	}
	return r.sendHedged(actx, req, rec)
}

// hedgeable reports whether req, of r's method, may be hedged.
func (r *run) hedgeable(req *http.Request) bool {
	if r.policy.HedgeAfter <= 0 || !methods.Safe(r.method) {
		return false
	}
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// hedged is the result of one of an attempt's requests.
type hedged struct {
	i       int // 0 for the first request, 1 for the hedge
	resp    *http.Response
	err     error
	rec     *wire.Recorder
	aborted *hedgePanic // the request panicked or called runtime.Goexit
}

// hedgePanic is a panic on the goroutine of a hedged attempt's request,
// carried to the caller's goroutine, which panics with it.
type hedgePanic struct {
	value any    // nil for a runtime.Goexit
	stack []byte // the request's goroutine's
}

func (p *hedgePanic) Error() string {
	return fmt.Sprintf("idem: a request of a hedged attempt panicked: %v\n\n%s", p.value, p.stack)
}

// Unwrap returns the value the request panicked with, if it is an error.
func (p *hedgePanic) Unwrap() error {
	err, _ := p.value.(error)
	return err
}

// raise panics with p on the caller's goroutine, or ends it as a
// runtime.Goexit ended the request's.
func (p *hedgePanic) raise() {
	if p.value == nil {
		runtime.Goexit()
	}
	panic(p)
}

// sendHedged sends req and, when no answer came within HedgeAfter, a hedge;
// see the rules at the top of this file.
func (r *run) sendHedged(actx context.Context, req *http.Request, rec *wire.Recorder) (*http.Response, sent, error) {
	results := make(chan hedged, 2) // each request's goroutine sends once and never blocks
	var cancels [2]context.CancelFunc
	// The goroutines capture the sender, not r: a closure that held r
	// would move every run to the heap, hedged or not.
	s := r.s
	launch := func(i int, req *http.Request, rec *wire.Recorder) {
		go func() {
			returned := false
			defer func() {
				if !returned { // a panic, or runtime.Goexit (recover gives nil)
					results <- hedged{i: i, rec: rec, aborted: &hedgePanic{value: recover(), stack: debug.Stack()}}
				}
			}()
			resp, err := s.send(req)
			returned = true
			results <- hedged{i: i, resp: resp, err: err, rec: rec}
		}()
	}
	// The timer starts before the first request goes out, so that whoever
	// sees that request under way (a test's fake clock) finds its timer;
	// the hedge still goes out only from the loop below.
	fire := make(chan struct{})
	var once sync.Once // a late timer, or a fake clock's, may call its function again
	t := r.clock.AfterFunc(r.policy.HedgeAfter, func() { once.Do(func() { close(fire) }) })
	defer t.Stop()

	ctx, cancel := context.WithCancel(req.Context())
	cancels[0] = cancel
	launch(0, req.WithContext(ctx), rec)

	pending, out := 1, sent{rec: rec}
	var failed *hedged
	for {
		select {
		case <-fire:
			fire = nil // at most one hedge
			h, hrec, hcancel, ok := hedgeRequest(actx, req)
			if !ok {
				continue // no body for it: the first request alone goes on
			}
			cancels[1], out.hedged = hcancel, true
			pending++
			launch(1, h, hrec)
		case res := <-results:
			pending--
			if res.aborted != nil {
				for _, c := range cancels {
					if c != nil {
						c()
					}
				}
				if pending > 0 {
					go closeLosers(results, pending)
				}
				res.aborted.raise()
			}
			if res.resp != nil { // an answer, the attempt's
				for i, c := range cancels {
					if i != res.i && c != nil {
						c()
					}
				}
				if pending > 0 {
					go closeLosers(results, pending)
				}
				out.rec = res.rec
				if res.err != nil {
					// A CheckRedirect's refusal: http.Client closed the
					// body already, and run.send replaces it.
					cancels[res.i]()
				} else {
					res.resp.Body = &cancelOnClose{ReadCloser: res.resp.Body, cancel: cancels[res.i]}
				}
				return res.resp, out, res.err
			}
			cancels[res.i]()
			if failed == nil {
				failed = &res
			}
			if pending == 0 {
				// Both failed, or the first did before any hedge: the first
				// failure is the attempt's.
				out.rec = failed.rec
				return nil, out, failed.err
			}
		}
	}
}

// hedgeRequest returns the hedge of req, with a recorder and a context of
// its own under actx, or false when req's body cannot be had again.
func hedgeRequest(actx context.Context, req *http.Request) (*http.Request, *wire.Recorder, context.CancelFunc, bool) {
	rec := wire.New()
	ctx, cancel := context.WithCancel(actx)
	h := req.Clone(rec.WithContext(ctx))
	if req.Body != nil && req.Body != http.NoBody {
		body, err := req.GetBody()
		if err != nil {
			cancel()
			return nil, nil, nil, false
		}
		h.Body = body
	}
	return h, rec, cancel, true
}

// closeLosers waits for the n requests still under way after an attempt's
// answer, already cancelled, and closes any response they bring.
func closeLosers(results <-chan hedged, n int) {
	for range n {
		if res := <-results; res.resp != nil {
			_ = res.resp.Body.Close()
		}
	}
}
