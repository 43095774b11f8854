// Package anycase finds header fields by name in any letter case.
//
// Field names are case-insensitive (RFC 9110 5.1), and net/http sends a
// Header map key as it is, canonical or not: req.Header["idempotency-key"]
// goes out as the same field as Idempotency-Key. http.Header's methods look
// up the canonical key alone, so a rule about a field (a key that must not
// go to another host, a key that makes a request retryable) read through
// them misses the field set under another spelling.
//
// Names given to these functions must be canonical. Has looks the
// canonical key up first, a map access, and so does First, and scans the map for other
// spellings only when it is absent; Values and Del always scan.
package anycase

import (
	"net/http"
	"strings"
)

// Has reports whether h carries a non-empty value of one of the fields
// names, under any spelling.
func Has(h http.Header, names ...string) bool { return First(h, names...) != "" }

// First returns the first value of the first of the fields names that h
// carries with a non-empty one, under any spelling, the canonical spellings
// looked up first; "" when there is none.
func First(h http.Header, names ...string) string {
	for _, name := range names {
		if vs := h[name]; len(vs) > 0 && vs[0] != "" {
			return vs[0]
		}
	}
	for k, vs := range h {
		if len(vs) > 0 && vs[0] != "" && other(k, names...) {
			return vs[0]
		}
	}
	return ""
}

// Values returns the values of the field name in h under every spelling,
// the canonical one first. It allocates only when the field is present
// under more than one spelling. Two spellings are two field lines.
func Values(h http.Header, name string) []string {
	vs := h[name]
	for k, more := range h {
		if other(k, name) {
			vs = append(vs[:len(vs):len(vs)], more...)
		}
	}
	return vs
}

// Del deletes the field name from h under every spelling.
func Del(h http.Header, name string) {
	delete(h, name)
	for k := range h {
		if other(k, name) {
			delete(h, k)
		}
	}
}

// other reports whether k is a spelling of one of names other than the
// name itself.
func other(k string, names ...string) bool {
	for _, name := range names {
		if len(k) == len(name) && k != name && strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}
