package idemtest

import (
	"crypto/sha256"
	"errors"
	"net/http"
	"strings"

	"github.com/idem-go/idem/internal/anycase"
)

// Messages of the 400 answers for a bad key; the key errors double as those
// messages so the handler needs no mapping.
var (
	errKeyRequired  = errors.New("idempotency key required")
	errKeyMalformed = errors.New("malformed idempotency key")
	errKeyEmpty     = errors.New("idempotency key is empty")
	errKeyTooLong   = errors.New("idempotency key is longer than 255 characters")
	errKeyMultiple  = errors.New("more than one idempotency key")
	errKeyBare      = errors.New("idempotency key is not an sf-string")
)

// requestKey returns the key carried by header name in h, "" with a nil
// error when there is none.
//
// The draft defines the value as an RFC 8941 sf-string ("abc"), while
// deployed servers and most clients send the bare key; both are accepted
// unless sfOnly, and decode to the same key, so "abc" and abc name one
// record.
func requestKey(h http.Header, name string, sfOnly bool) (string, error) {
	// Any spelling: a handler called directly may get a map key that is
	// not canonical, and two spellings are two field lines.
	values := anycase.Values(h, http.CanonicalHeaderKey(name))
	switch len(values) {
	case 0:
		return "", nil
	case 1:
	default:
		// Two field lines are a list, not a key; picking one would guess.
		return "", errKeyMultiple
	}
	// RFC 8941 parsing discards leading and trailing spaces.
	v := strings.Trim(values[0], " \t")
	var key string
	if strings.HasPrefix(v, `"`) {
		k, err := parseSFString(v)
		if err != nil {
			return "", err
		}
		key = k
	} else {
		if !isPlainKey(v) {
			return "", errKeyMalformed
		}
		if sfOnly {
			return "", errKeyBare
		}
		key = v
	}
	switch {
	case key == "":
		return "", errKeyEmpty
	case len(key) > MaxKeyLength:
		return "", errKeyTooLong
	}
	return key, nil
}

// parseSFString decodes an RFC 8941 section 3.3.3 sf-string that must make
// up the whole of s. Parameters after the string are rejected: the draft
// defines none, and accepting them would make "a";x=1 and "a" one key.
func parseSFString(s string) (string, error) {
	if len(s) < 2 || s[0] != '"' {
		return "", errKeyMalformed
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i >= len(s) || (s[i] != '"' && s[i] != '\\') {
				return "", errKeyMalformed
			}
			b.WriteByte(s[i])
		case c == '"':
			if i != len(s)-1 {
				return "", errKeyMalformed
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", errKeyMalformed
		default:
			b.WriteByte(c)
		}
	}
	return "", errKeyMalformed // no closing quote
}

// isPlainKey reports whether s is acceptable as a bare key: visible ASCII
// only. A quote is refused because a value with one is a broken sf-string,
// and serving it under a different key than the client meant would be worse
// than a 400.
func isPlainKey(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= 0x20 || c > 0x7e || c == '"' {
			return false
		}
	}
	return true
}

// fingerprint identifies a request's payload for the 422 check. The NUL
// separators keep method, path and body from running into one another.
func fingerprint(method, path string, body []byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte(method))
	h.Write([]byte{0})
	h.Write([]byte(path))
	h.Write([]byte{0})
	h.Write(body)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
