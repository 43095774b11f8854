package queueweb

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// MarshalJSON encodes v as the handler writes its JSON, and as idemq
// prints it: indented, with every rune that is not printable escaped, as \u escapes JSON decodes to the same text.
// encoding/json escapes the C0 controls and, for HTML, <, > and &, but
// writes DEL, the C1 controls and the bidi and other format characters as
// they are: a record's lane must not reorder what a page or a terminal
// shows.
func MarshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	out := buf.Bytes()
	b := make([]byte, 0, len(out))
	for i := 0; i < len(out); {
		r, n := utf8.DecodeRune(out[i:])
		// Outside strings JSON holds only ASCII; the encoder wrote the C0
		// controls as \u escapes and invalid UTF-8 as U+FFFD.
		if r < 0x7f || (r >= utf8.RuneSelf && strconv.IsPrint(r)) {
			b = append(b, out[i:i+n]...)
		} else {
			b = appendJSONEscape(b, r)
		}
		i += n
	}
	return b, nil
}

// appendJSONEscape appends r as a JSON \u escape: a surrogate pair beyond
// the Basic Multilingual Plane.
func appendJSONEscape(b []byte, r rune) []byte {
	if r > 0xFFFF {
		r -= 0x10000
		return fmt.Appendf(b, `\u%04x\u%04x`, 0xD800+(r>>10), 0xDC00+(r&0x3FF))
	}
	return fmt.Appendf(b, `\u%04x`, r)
}
