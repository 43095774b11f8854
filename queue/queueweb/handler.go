package queueweb

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idem-go/idem/queue"
)

// Options configure a Handler and ReadStats. The zero value serves a
// queue read-only, judging the horizon by the queue's defaults.
type Options struct {
	// Writes turns on discard, resubmit and reset-clock. False answers
	// them 403: an operator looks, and acts through the application or
	// idemq.
	Writes bool
	// Retention and Margin are the queue's Options.Retention and Margin,
	// by which the horizon at risk is judged; 0 means
	// queue.DefaultRetention and queue.DefaultMargin. Set them as the
	// application sets the queue's.
	Retention, Margin time.Duration
	// Within is how near a horizon counts as at risk; 0 means one hour,
	// and a negative Within none at all: only the horizons passed already.
	// A request's ?within= overrides it.
	Within time.Duration
}

func (o Options) withDefaults() (Options, error) {
	if o.Retention == 0 {
		o.Retention = queue.DefaultRetention
	}
	if o.Margin == 0 {
		o.Margin = queue.DefaultMargin
	}
	if o.Within == 0 {
		o.Within = time.Hour
	}
	if o.Retention < 0 || o.Margin < 0 || o.Margin >= o.Retention {
		return o, fmt.Errorf("queueweb: Retention %v, Margin %v: want 0 <= Margin < Retention", o.Retention, o.Margin)
	}
	o.Within = max(o.Within, 0)
	return o, nil
}

// Listing limits of GET /api/records.
const (
	defaultLimit = 100
	maxLimit     = 1000
)

//go:embed page
var page embed.FS

// Handler returns an http.Handler that shows q: JSON under /api/ and an
// HTML page at /, relative to where it is mounted (strip the mount point
// with http.StripPrefix). It does no authentication: mount it behind the
// application's own. Every record it shows is RecordOf's: redacted.
//
//	GET  /api/stats                    Stats; ?within=1h overrides Options.Within
//	GET  /api/records                  {"records": [Record...], "next": ID}
//	                                   ?state=failed,expired&lane=payments&after=ID&limit=100
//	GET  /api/records/{id}             Record
//	POST /api/records/{id}/discard     (Options.Writes)
//	POST /api/records/{id}/resubmit    (Options.Writes; ?force=true for an unknown outcome)
//	POST /api/reset-clock              (Options.Writes)
//	GET  /api/config                   {"writes": bool}
//
// Errors are JSON, {"error": "..."}: 400 for a bad parameter, 403 for a
// write without Options.Writes, 404 for no such record, 405 for a wrong
// method, 409 for a record in flight or not resubmittable, with "code":
// CodeOutcomeUnknown when only force would resubmit it. Each call reads
// q under the request's context. Options it cannot use (Margin not below
// Retention) make every request answer 500 with the reason.
func Handler(q *queue.Queue, opts Options) http.Handler {
	h := &handler{q: q, now: time.Now}
	h.opts, h.optsErr = opts.withDefaults()
	mux := http.NewServeMux()
	mux.HandleFunc("/api/stats", h.get(h.stats))
	mux.HandleFunc("/api/config", h.get(h.config))
	mux.HandleFunc("/api/records", h.get(h.list))
	mux.HandleFunc("/api/records/{id}", h.get(h.record))
	mux.HandleFunc("/api/records/{id}/discard", h.post(h.discard))
	mux.HandleFunc("/api/records/{id}/resubmit", h.post(h.resubmit))
	mux.HandleFunc("/api/reset-clock", h.post(h.resetClock))
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Errorf("no such API route: %s", r.URL.Path))
	})
	mux.HandleFunc("/", h.page)
	// A browser's cross-site POST is refused (403) before it reaches a
	// write; idemq and curl send no Sec-Fetch-Site or Origin and pass.
	return http.NewCrossOriginProtection().Handler(mux)
}

// handler serves one queue; safe for concurrent use, as the Queue is.
type handler struct {
	q       *queue.Queue
	opts    Options
	optsErr error
	now     func() time.Time
}

// apiFunc answers a request with a value to write as JSON, or an error.
type apiFunc func(*http.Request) (any, error)

func (h *handler) get(fn apiFunc) http.HandlerFunc {
	return h.method(http.MethodGet, fn)
}

func (h *handler) post(fn apiFunc) http.HandlerFunc {
	return h.method(http.MethodPost, func(r *http.Request) (any, error) {
		if !h.opts.Writes {
			return nil, httpError{http.StatusForbidden, errors.New("writes are turned off: the application serves this queue read-only (queueweb.Options.Writes)")}
		}
		return fn(r)
	})
}

func (h *handler) method(m string, fn apiFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != m && !(m == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", m)
			writeError(w, http.StatusMethodNotAllowed, fmt.Errorf("%s %s: use %s", r.Method, r.URL.Path, m))
			return
		}
		if h.optsErr != nil {
			writeError(w, http.StatusInternalServerError, h.optsErr)
			return
		}
		v, err := fn(r)
		if err != nil {
			writeError(w, statusOf(err), err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

// httpError is an error with the status it answers.
type httpError struct {
	status int
	err    error
}

func (e httpError) Error() string { return e.err.Error() }
func (e httpError) Unwrap() error { return e.err }

func badRequest(format string, args ...any) error {
	return httpError{http.StatusBadRequest, fmt.Errorf(format, args...)}
}

// statusOf is the status that answers err.
func statusOf(err error) int {
	var he httpError
	switch {
	case errors.As(err, &he):
		return he.status
	case errors.Is(err, queue.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, queue.ErrInFlight), errors.Is(err, queue.ErrNotResubmittable):
		return http.StatusConflict
	case errors.Is(err, queue.ErrReadOnly):
		return http.StatusForbidden
	case errors.Is(err, queue.ErrClosed):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// apiError is the body of every error answer.
type apiError struct {
	Error string `json:"error"`
	Code  string `json:"code,omitempty"`
}

// CodeOutcomeUnknown is the "code" of the error answer to a resubmit
// without force=true of a record whose outcome is unknown
// (queue.ErrUnknownOutcome), for a client that acts on it, as idemq does.
const CodeOutcomeUnknown = "outcome_unknown"

func writeError(w http.ResponseWriter, status int, err error) {
	e := apiError{Error: err.Error()}
	if errors.Is(err, queue.ErrUnknownOutcome) {
		e.Code = CodeOutcomeUnknown
	}
	writeJSON(w, status, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	out, err := MarshalJSON(v)
	if err != nil {
		status, out = http.StatusInternalServerError, []byte(`{"error": "queueweb: cannot encode the answer"}`+"\n")
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/json; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(out)
}

func (h *handler) stats(r *http.Request) (any, error) {
	opts := h.opts
	if s := r.URL.Query().Get("within"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return nil, badRequest("within %q: want a duration of 0 or more, such as 1h", s)
		}
		opts.Within = d
		if d == 0 {
			opts.Within = -1 // none; 0 would mean the default
		}
	}
	return ReadStats(r.Context(), h.q, opts, h.now())
}

// config tells the page what it may offer.
func (h *handler) config(*http.Request) (any, error) {
	return struct {
		Writes bool `json:"writes"`
	}{h.opts.Writes}, nil
}

// listing is the answer of GET /api/records: Next is the ID to pass as
// after for the next page, 0 at the end.
type listing struct {
	Records []Record `json:"records"`
	Next    queue.ID `json:"next"`
}

func (h *handler) list(r *http.Request) (any, error) {
	qs := r.URL.Query()
	var want []queue.State
	if s := qs.Get("state"); s != "" {
		var err error
		if want, err = ParseStates(strings.Split(s, ",")); err != nil {
			return nil, httpError{http.StatusBadRequest, err}
		}
	}
	after, err := uintParam(qs.Get("after"), 0, "after")
	if err != nil {
		return nil, err
	}
	limit, err := uintParam(qs.Get("limit"), defaultLimit, "limit")
	if err != nil {
		return nil, err
	}
	if limit == 0 || limit > maxLimit {
		return nil, badRequest("limit %d: want 1 to %d", limit, maxLimit)
	}
	lane, byLane := qs.Get("lane"), qs.Has("lane")

	var state queue.State // 0: every state, filtered below
	if len(want) == 1 {
		state = want[0]
	}
	out := listing{Records: []Record{}}
	for cursor := queue.ID(after); ; {
		page, err := h.q.List(r.Context(), state, cursor, statsPage)
		if err != nil {
			return nil, err
		}
		for _, rec := range page {
			cursor = rec.ID
			if want != nil && !slices.Contains(want, rec.State) {
				continue
			}
			if byLane && (rec.Intent == nil || rec.Intent.Lane() != lane) {
				continue
			}
			out.Records = append(out.Records, RecordOf(rec))
			if len(out.Records) == int(limit) {
				out.Next = rec.ID
				return out, nil
			}
		}
		if len(page) < statsPage {
			return out, nil
		}
	}
}

func uintParam(s string, def uint64, name string) (uint64, error) {
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, badRequest("%s %q: want a number of 0 or more", name, s)
	}
	return n, nil
}

// ParseStates reads state names as State.String spells them (pending,
// in_flight, done, failed, expired), ignoring case and spaces around them,
// without duplicates.
func ParseStates(names []string) ([]queue.State, error) {
	var out []queue.State
	for _, name := range names {
		name = strings.ToLower(strings.TrimSpace(name))
		i := slices.IndexFunc(states(), func(s queue.State) bool { return s.String() == name })
		if i < 0 {
			return nil, fmt.Errorf("state %q: want pending, in_flight, done, failed or expired", name)
		}
		if s := states()[i]; !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}

func pathID(r *http.Request) (queue.ID, error) {
	s := r.PathValue("id")
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, badRequest("%q is not a record ID (a positive integer)", s)
	}
	return queue.ID(id), nil
}

func (h *handler) record(r *http.Request) (any, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	rec, err := h.q.Get(r.Context(), id)
	if err != nil {
		return nil, err
	}
	return RecordOf(rec), nil
}

func (h *handler) discard(r *http.Request) (any, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	return Discard(r.Context(), h.q, id)
}

func (h *handler) resubmit(r *http.Request) (any, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	resubmit := h.q.Resubmit // which refuses an unknown outcome itself, in the store's commit
	if r.URL.Query().Get("force") == "true" {
		resubmit = h.q.ForceResubmit
	}
	nid, err := resubmit(r.Context(), id)
	if errors.Is(err, queue.ErrUnknownOutcome) {
		return nil, httpError{http.StatusConflict, fmt.Errorf("%w, then pass force=true", err)}
	}
	if err != nil {
		return nil, err
	}
	return struct {
		Resubmitted queue.ID `json:"resubmitted"`
		As          queue.ID `json:"as"`
	}{id, nid}, nil
}

func (h *handler) resetClock(r *http.Request) (any, error) {
	if err := h.q.ResetClock(r.Context()); err != nil {
		return nil, err
	}
	return struct {
		Reset bool `json:"reset"`
	}{true}, nil
}

// contentSecurity lets the page load only its own script and style and
// call only its own API, and be framed by no one.
const contentSecurity = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// page serves the HTML page and its script and style, from page/.
func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	name, ctype := "", ""
	switch r.URL.Path {
	case "/", "":
		name, ctype = "page/index.html", "text/html; charset=utf-8"
	case "/queueweb.js":
		name, ctype = "page/queueweb.js", "text/javascript; charset=utf-8"
	case "/queueweb.css":
		name, ctype = "page/queueweb.css", "text/css; charset=utf-8"
	default:
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "use GET", http.StatusMethodNotAllowed)
		return
	}
	body, err := page.ReadFile(name)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", ctype)
	hd.Set("Content-Security-Policy", contentSecurity)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-store")
	w.Write(body)
}
