package queuetest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
)

// resubmitRaces is how many records resubmitRacesSettle races, and
// resubmitLanes how many of them are in flight at once.
const (
	resubmitRaces = 1000
	resubmitLanes = 16
)

// resubmitRacesSettle: Resubmit, without force, called while a record is in
// flight and settles Failed, never copies a record whose outcome ends
// Unknown: the copy, under a new key, would apply the operation a second
// time. Each record is answered 502 (Unknown) or 400 (NotApplied), and
// Resubmit is called before the answer (a quarter), after the record
// settled (a quarter), or over and over from the answer until once after
// the record is seen settled (half), as an operator's impatient clicks
// would: a Resubmit is either refused, or the record had settled
// NotApplied before it.
func resubmitRacesSettle(t *testing.T, open Opener) {
	srv := newHeldServer(resubmitRaces)
	t.Cleanup(srv.Close)
	var settles sync.Map // a record's ID to a channel closed once it settled
	q := open(t, queue.Options{Policy: fast(), MaxAttempts: 1, Workers: resubmitLanes, Notify: func(e queue.Event) {
		if ch, ok := settles.LoadAndDelete(e.Record.ID); ok && e.Kind == queue.EventSettled {
			close(ch.(chan struct{}))
		}
	}})
	ctx := waitCtx(t)
	ids := enqueueRaces(ctx, t, q, srv.URL)
	settled := make([]chan struct{}, resubmitRaces)
	for i, id := range ids {
		settled[i] = make(chan struct{})
		settles.Store(id, settled[i])
	}
	drain(t, q)

	races := make([]resubmitRace, resubmitRaces)
	var wg sync.WaitGroup
	for n := range resubmitRaces {
		var i int
		select {
		case i = <-srv.arrived:
		case <-ctx.Done():
			t.Fatalf("%d of %d records reached the server: %v", n, resubmitRaces, ctx.Err())
		}
		wg.Go(func() {
			id, r := ids[i], &races[i]
			switch i / 2 % 4 {
			case 0:
				r.copied, r.err = q.Resubmit(ctx, id)
				close(srv.release[i])
			case 1:
				close(srv.release[i])
				select {
				case <-settled[i]:
				case <-ctx.Done():
					r.err = ctx.Err()
					return
				}
				var (
					two   sync.WaitGroup // two calls at once
					other resubmitRace
				)
				two.Go(func() { r.copied, r.err = q.Resubmit(ctx, id) })
				two.Go(func() { other.copied, other.err = q.Resubmit(ctx, id) })
				two.Wait()
				if r.err != nil { // the first to copy, if one did
					*r, other = other, *r
				}
				r.second = &other
			default:
				close(srv.release[i])
				for {
					var done bool
					select {
					case <-settled[i]:
						done = true
					default:
					}
					r.calls++
					if r.copied, r.err = q.Resubmit(ctx, id); r.err == nil || done || ctx.Err() != nil {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	for _, ch := range settled {
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("not every record settled: %v", ctx.Err())
		}
	}
	failed := make(map[queue.ID]*queue.Record, resubmitRaces)
	for after := queue.ID(0); ; {
		page, err := q.List(ctx, queue.Failed, after, 500)
		require.NoError(t, err)
		for _, r := range page {
			failed[r.ID] = r
		}
		if len(page) < 500 {
			break
		}
		after = page[len(page)-1].ID
	}

	var twice, calls int
	var wrong []string
	for i, r := range races {
		calls += max(r.calls, 1) // 1 before and after the settle
		old := failed[ids[i]]
		require.NotNil(t, old, "record %d did not fail", ids[i])
		if r.err == nil {
			assert.Equal(t, r.copied, old.ResubmittedAs, "race %d", i)
			if old.Outcome == idem.Unknown {
				twice++
			}
		} else {
			assert.Zero(t, old.ResubmittedAs, "race %d: refused, yet record %d was resubmitted", i, old.ID)
		}
		if got, want := r.verdict(), wantVerdict(i); got != want {
			wrong = append(wrong, fmt.Sprintf("race %d (record %d, %s): %s, want %s", i, old.ID, old.Outcome, got, want))
		}
	}
	t.Logf("%d races, %d Resubmit calls", resubmitRaces, calls)
	assert.Zero(t, twice, "of %d records resubmitted without force while they settled, %d were copied though their outcome is Unknown: applied under two keys", resubmitRaces, twice)
	assert.Empty(t, wrong[:min(len(wrong), 10)], "%d races of %d ended otherwise than they must", len(wrong), resubmitRaces)
}

// forceResubmit: a record settled Unknown is refused by Resubmit
// (ErrUnknownOutcome), copied by ForceResubmit, once; ForceResubmit lifts
// that refusal only.
func forceResubmit(t *testing.T, open Opener) {
	srv := newRecorder(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		if n == 0 {
			w.WriteHeader(http.StatusBadGateway) // may have been applied
		}
	})
	q := open(t, queue.Options{Policy: fast(), MaxAttempts: 1})
	ctx := waitCtx(t)
	id, err := q.Enqueue(ctx, intent(t, "POST", srv.URL+"/pay", "x"))
	require.NoError(t, err)
	drain(t, q)
	old, err := q.Wait(ctx, id)
	require.NoError(t, err)
	require.Equal(t, idem.Unknown, old.Outcome, old.Reason)

	_, err = q.Resubmit(ctx, id)
	assert.ErrorIs(t, err, queue.ErrUnknownOutcome)
	assert.NotErrorIs(t, err, queue.ErrNotResubmittable)
	fresh, err := q.ForceResubmit(ctx, id)
	require.NoError(t, err)
	old, err = q.Get(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, fresh, old.ResubmittedAs)
	_, err = q.ForceResubmit(ctx, id)
	assert.ErrorIs(t, err, queue.ErrNotResubmittable, "once")
	_, err = q.Resubmit(ctx, id)
	assert.ErrorIs(t, err, queue.ErrNotResubmittable, "once, whatever its outcome")
	copied, err := q.Wait(ctx, fresh)
	require.NoError(t, err)
	assert.Equal(t, queue.Done, copied.State, copied.Reason)
	_, err = q.ForceResubmit(ctx, fresh)
	assert.ErrorIs(t, err, queue.ErrNotResubmittable, "a done record")
	_, err = q.ForceResubmit(ctx, id+fresh)
	assert.ErrorIs(t, err, queue.ErrNotFound)
}

// resubmitRace is one race of resubmitRacesSettle: the last Resubmit's
// answer, how many calls were made, and a second call made at once.
type resubmitRace struct {
	copied queue.ID
	err    error
	calls  int
	second *resubmitRace
}

// verdict names r's answer, and its second call's after a slash.
func (r resubmitRace) verdict() string {
	var v string
	switch {
	case r.err == nil:
		v = "copied"
	case errors.Is(r.err, queue.ErrUnknownOutcome):
		v = "refused: unknown"
	case errors.Is(r.err, queue.ErrNotResubmittable):
		v = "refused: not resubmittable"
	default:
		v = r.err.Error()
	}
	if r.second != nil {
		v += " / " + r.second.verdict()
	}
	return v
}

// wantVerdict is the answer race i must end with: refused while in flight
// (the first quarter); else, for the record answered 502, refused because
// its outcome is unknown (the last call of a hammering, if not the first,
// came after it settled), and copied for the one answered 400; of two
// calls at once after the settle (the second quarter), the second is
// refused.
func wantVerdict(i int) string {
	switch settledFirst := i/2%4 == 1; {
	case i/2%4 == 0:
		return "refused: not resubmittable"
	case i%2 == 0 && settledFirst:
		return "refused: unknown / refused: unknown"
	case i%2 == 0:
		return "refused: unknown"
	case settledFirst:
		return "copied / refused: not resubmittable"
	}
	return "copied"
}

// heldServer holds the first request for each of its paths /pay/{i} until
// release[i] is closed, and then answers 502 for an even i, 400 for an odd
// one; it sends i on arrived as the request arrives. A later request for a
// path, a copy's, is answered 201 at once.
type heldServer struct {
	*httptest.Server
	arrived  chan int
	release  []chan struct{}
	answered []chan struct{} // closed once the answer is written
	seen     []atomic.Bool
}

func newHeldServer(n int) *heldServer {
	s := &heldServer{arrived: make(chan int, n), release: make([]chan struct{}, n), answered: make([]chan struct{}, n), seen: make([]atomic.Bool, n)}
	for i := range s.release {
		s.release[i], s.answered[i] = make(chan struct{}), make(chan struct{})
	}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/pay/"))
		if err != nil || i < 0 || i >= n {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		if s.seen[i].Swap(true) {
			w.WriteHeader(http.StatusCreated)
			return
		}
		s.arrived <- i
		select {
		case <-s.release[i]:
		case <-r.Context().Done():
			return
		}
		defer close(s.answered[i])
		if i%2 == 0 {
			w.WriteHeader(http.StatusBadGateway)
		} else {
			w.WriteHeader(http.StatusBadRequest)
		}
		http.NewResponseController(w).Flush() //nolint:errcheck // the client sees the answer by its close otherwise
	}))
	return s
}

// enqueueRaces enqueues the records of resubmitRacesSettle, /pay/{i} in
// lane i modulo resubmitLanes, from several goroutines, so that they share
// commits.
func enqueueRaces(ctx context.Context, t *testing.T, q *queue.Queue, url string) []queue.ID {
	t.Helper()
	ids := make([]queue.ID, resubmitRaces)
	errs := make([]error, resubmitLanes)
	var wg sync.WaitGroup
	for w := range resubmitLanes {
		wg.Go(func() {
			for i := w; i < resubmitRaces; i += resubmitLanes {
				in, err := idem.NewIntent("POST", fmt.Sprintf("%s/pay/%d", url, i), []byte("x"), idem.WithLane(strconv.Itoa(w)))
				if err == nil {
					ids[i], err = q.Enqueue(ctx, in)
				}
				if err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	return ids
}
