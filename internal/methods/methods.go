// Package methods says what RFC 9110 promises of a request method, for
// package idem and the queue alike.
package methods

import "net/http"

// Query is the safe, idempotent QUERY method: a GET with a body.
const Query = "QUERY"

// Safe reports whether m is safe (RFC 9110 9.2.1): it requests no change of
// state. GET, HEAD, OPTIONS, TRACE and QUERY are safe.
func Safe(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, Query:
		return true
	}
	return false
}

// Idempotent reports whether m is idempotent (RFC 9110 9.2.2): the safe
// methods, PUT and DELETE. Any other method, POST, PATCH, CONNECT or an
// extension method, is not.
func Idempotent(m string) bool {
	return Safe(m) || m == http.MethodPut || m == http.MethodDelete
}
