// Package redact removes what may hold a secret from the URLs and errors that
// idem shows in errors, logs, hooks and stored records: user info, query and
// fragment of a URL, and the URL net/http puts in front of a transport error.
// It is the one place the project decides what a secret-free URL is: the
// root package and queue use it, and so does cmd/idemq, so that the tool
// shows a URL as the application's logs do. It holds the one list of the
// header fields that carry credentials too (CredentialHeaders), which the
// intent check and the redirect rule of the root package consult.
//
// An application may use it for what it logs beside idem. Its functions are
// pure and safe for concurrent use.
package redact

import (
	"errors"
	"net/url"
)

// URL returns u without its query and fragment, and with any user info
// replaced by "redacted", so that it shows that credentials were there
// without showing them.
func URL(u *url.URL) string {
	v := *u
	if v.User != nil {
		v.User = url.User("redacted")
	}
	v.RawQuery, v.ForceQuery, v.Fragment, v.RawFragment = "", false, "", ""
	return v.String()
}

// RawURL parses raw and returns it as URL does, or "(unparsable URL)": a
// URL that does not parse is not shown at all, since what part of it is a
// secret cannot be told.
func RawURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return URL(u)
}

// Error returns err's message without the URL that net/http's *url.Error
// puts in front of it.
func Error(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// Wrap returns err shown as Error shows it, without the request URL, and
// unwrapping to err, so that errors.Is and errors.As still see it; nil for
// a nil err.
func Wrap(err error) error {
	if err == nil {
		return nil
	}
	return wrapped{err}
}

type wrapped struct{ err error }

func (w wrapped) Error() string { return Error(w.err) }
func (w wrapped) Unwrap() error { return w.err }
