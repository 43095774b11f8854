// Package replay reads whether a response says it is a replay of an answer
// the server stored under the request's idempotency key. The client and the
// queue read it the same way.
package replay

import (
	"net/http"
	"strings"
)

// Replayed reports whether h says its response is a replay of a stored
// answer, in any of the spellings deployed servers use: Idempotent-Replayed,
// Idempotency-Replayed or X-Idempotent-Replayed, with the value true.
func Replayed(h http.Header) bool {
	for _, name := range [...]string{"Idempotent-Replayed", "Idempotency-Replayed", "X-Idempotent-Replayed"} {
		// The names are canonical: a map lookup, without Get's canonicalising.
		if vs := h[name]; len(vs) > 0 && strings.EqualFold(strings.TrimSpace(vs[0]), "true") {
			return true
		}
	}
	return false
}
