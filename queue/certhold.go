package queue

import (
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	neturl "net/url"
	"time"

	"github.com/idem-go/idem"
)

// A certificate refused for its validity dates alone (idem.ErrCertificateDates)
// is a clock question: on a device whose clock is wrong every valid
// certificate is expired or not yet valid, and failing the records for it
// would lose every one of them. Sends to that host are held instead, until
// the clock reads within the certificate's dates (the clock was set right),
// or Wake or ResetClock (an operator's word), and the record is kept.

// certWindow is the validity period of a certificate refused for its dates.
type certWindow struct{ notBefore, notAfter time.Time }

// covers reports whether a clock reading now would accept the certificate.
func (w certWindow) covers(now time.Time) bool {
	return !now.Before(w.notBefore) && !now.After(w.notAfter)
}

// certHolds maps a host (host:port, as in the URL) to the validity period of
// the certificate that held its sends.
type certHolds map[string]certWindow

// holds reports whether sends to r's host are held at now.
func (h certHolds) holds(r *Record, now time.Time) bool {
	if len(h) == 0 {
		return false
	}
	w, ok := h[hostOf(r)]
	return ok && !w.covers(now)
}

// hostOf is the host of r's URL, with its port if it names one; "" for a
// damaged record without intent.
func hostOf(r *Record) string {
	if r.Intent == nil {
		return ""
	}
	u, err := neturl.Parse(r.Intent.URL())
	if err != nil { // an Intent's URL parsed when it was made
		return ""
	}
	return u.Host
}

// certHeld reports whether sends to r's host are held at now, and ends a
// hold the clock now agrees with.
func (q *Queue) certHeld(r *Record, now time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.dateHold) == 0 {
		return false
	}
	if q.dateHold.holds(r, now) {
		return true
	}
	delete(q.dateHold, hostOf(r))
	return false
}

// certHoldsNow returns a copy of the holds, nil when there are none, for a
// judgement made under the store's lock, where Queue.mu may not be taken.
func (q *Queue) certHoldsNow() certHolds {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.dateHold) == 0 {
		return nil
	}
	return maps.Clone(q.dateHold)
}

// endCertHolds ends every hold, for Wake and ResetClock. Queue.mu is held.
func (q *Queue) endCertHolds() { q.dateHold = nil }

// holdCertificate handles the attempt step of the leased r, whose
// certificate was refused for its dates: r goes back to pending, the
// attempt not counted (the clock's fault, not the record's) and its
// FirstSentAt cleared if this lease set it (nothing reached the server),
// and sends to its host are held and reported.
func (q *Queue) holdCertificate(r *Record, step *idem.Step, now time.Time, d *drainEnd) (time.Time, error) {
	d.tell(step, idem.ActionHold, 0)
	r.unlease()
	var (
		invalid x509.CertificateInvalidError
		w       certWindow
	)
	if errors.As(step.Attempt.Err, &invalid) && invalid.Cert != nil {
		w = certWindow{invalid.Cert.NotBefore, invalid.Cert.NotAfter}
	}
	host := hostOf(r)
	q.mu.Lock()
	if q.dateHold == nil {
		q.dateHold = certHolds{}
	}
	q.dateHold[host] = w
	q.mu.Unlock()
	if err := q.requeue(r, now); err != nil {
		return now, err
	}
	q.notify(Event{Kind: EventClockHeld, Err: fmt.Errorf(
		"queue: sends to %s held: its certificate is valid from %s until %s and the clock reads %s: the clock or the certificate is wrong; held until the clock reads within those dates, or Wake or ResetClock",
		host, fmtMark(w.notBefore), fmtMark(w.notAfter), fmtMark(now))})
	return now.Add(q.opts.idle), nil
}
