package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
	"github.com/idem-go/idem/queue/queueweb"
	"github.com/idem-go/idem/redact"
)

// urlSource reads a running application's queue through its queueweb
// handler: bbolt lets no other process open a file the application holds.
type urlSource struct {
	base   *url.URL // the handler's mount point, ending in "/"
	auth   string   // the Authorization header, "" for none
	client *http.Client
	shown  string // base as messages show it, redacted
}

// urlTimeout bounds each call to the handler.
const urlTimeout = 30 * time.Second

// maxAnswer bounds an answer idemq reads from the handler.
const maxAnswer = 64 << 20

// urlSource is the running application's queue --url names; a usage error
// when a file or a DSN is given too, or the URL is not one to call.
func (a *app) urlSource() (urlSource, error) {
	if a.file != "" || a.dsn != "" {
		return urlSource{}, a.checkFlags() // both given
	}
	u, err := url.Parse(a.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return urlSource{}, usagef("--url %s: want the http or https URL where the application mounts queueweb.Handler", redact.RawURL(a.url))
	}
	if u.User != nil {
		return urlSource{}, usagef("--url %s: put no credentials in the URL; pass --url-auth-env NAME to send $NAME as the Authorization header", redact.RawURL(a.url))
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	u.RawQuery, u.Fragment = "", ""
	// A redirect to another origin does not take the Authorization header
	// along, as net/http would to another port or over http.
	hc := &http.Client{Timeout: urlTimeout, CheckRedirect: idem.RedirectPolicy("", nil)}
	s := urlSource{base: u, client: hc, shown: u.String()}
	if a.urlAuthEnv != "" {
		s.auth = os.Getenv(a.urlAuthEnv)
		if s.auth == "" {
			return urlSource{}, usagef("--url-auth-env %s: $%s is empty", a.urlAuthEnv, a.urlAuthEnv)
		}
	}
	return s, nil
}

// call does method on path under the mount point and decodes the JSON
// answer into v; an error answer becomes the handler's message.
func (s urlSource) call(ctx context.Context, method, path string, query url.Values, v any) error {
	u := s.base.JoinPath(path)
	u.RawQuery = query.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if s.auth != "" {
		req.Header.Set("Authorization", s.auth)
	}
	res, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", s.shown, errors.Unwrap(err))
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if res.StatusCode != http.StatusOK {
		var e struct{ Error, Code string }
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return &answerError{e.Error, e.Code}
		}
		return fmt.Errorf("%s %s: %s from %s; is queueweb.Handler mounted there, and is idemq allowed in (--url-auth-env)?", method, path, res.Status, s.shown)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%s %s: the answer of %s is not queueweb's JSON: %w", method, path, s.shown, err)
	}
	return nil
}

func (s urlSource) list(ctx context.Context, f lsFilter, now time.Time) ([]recordView, error) {
	q := url.Values{"limit": {strconv.Itoa(listPage)}}
	if len(f.states) > 0 {
		names := make([]string, len(f.states))
		for i, st := range f.states {
			names[i] = st.String()
		}
		q.Set("state", strings.Join(names, ","))
	}
	if f.lane != nil {
		q.Set("lane", *f.lane)
	}
	var out []recordView
	for after := queue.ID(0); ; {
		q.Set("after", after.String())
		var page struct {
			Records []recordView `json:"records"`
			Next    queue.ID     `json:"next"`
		}
		if err := s.call(ctx, http.MethodGet, "api/records", q, &page); err != nil {
			return nil, err
		}
		for _, v := range page.Records {
			if !f.match(v, now) {
				continue
			}
			out = append(out, v)
			if f.limit > 0 && len(out) == f.limit {
				return out, nil
			}
		}
		if page.Next == 0 || page.Next <= after {
			return out, nil
		}
		after = page.Next
	}
}

func (s urlSource) get(ctx context.Context, id queue.ID) (recordView, error) {
	var v recordView
	err := s.call(ctx, http.MethodGet, "api/records/"+id.String(), nil, &v)
	return v, err
}

// stats reads the handler's stats. The horizon is the application's
// (queueweb.Options), not opts': only Within goes with the request.
func (s urlSource) stats(ctx context.Context, opts queueweb.Options, _ time.Time) (queueweb.Stats, error) {
	var v queueweb.Stats
	q := url.Values{}
	if opts.Within != 0 {
		q.Set("within", max(opts.Within, 0).String())
	}
	err := s.call(ctx, http.MethodGet, "api/stats", q, &v)
	if v.Horizon.AtRisk == nil {
		v.Horizon.AtRisk = []queue.ID{}
	}
	return v, err
}

func (s urlSource) discard(ctx context.Context, id queue.ID) (discarded, error) {
	var d discarded
	err := s.call(ctx, http.MethodPost, "api/records/"+id.String()+"/discard", nil, &d)
	return d, err
}

func (s urlSource) resubmit(ctx context.Context, id queue.ID, force bool) (queue.ID, error) {
	q := url.Values{}
	if force {
		q.Set("force", "true")
	}
	var res struct{ As queue.ID }
	err := s.call(ctx, http.MethodPost, "api/records/"+id.String()+"/resubmit", q, &res)
	if ae := (*answerError)(nil); errors.As(err, &ae) && ae.code == queueweb.CodeOutcomeUnknown {
		return 0, needsForce(id)
	}
	return res.As, err
}

// answerError is an error answer of the handler: its message, and its
// code, if it has one.
type answerError struct{ msg, code string }

func (e *answerError) Error() string { return e.msg }

func (s urlSource) resetClock(ctx context.Context) error {
	var res struct{ Reset bool }
	return s.call(ctx, http.MethodPost, "api/reset-clock", nil, &res)
}
