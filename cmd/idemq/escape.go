package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A record's lane, a server's Content-Type, an error's text and the file's
// own path are anyone's bytes: printed as they are, an ESC or C1 sequence
// repaints the operator's terminal and a bidi override (U+202E) reorders
// what it shows. Every text idemq writes goes through textWriter, which
// escapes every rune strconv.IsPrint rejects (C0 and C1 controls, DEL,
// format characters such as the bidi ones, line separators, invalid UTF-8)
// as Go writes it in a string literal (\x1b, \u202e); printable UTF-8 is
// kept as it is. JSON goes through queueweb.MarshalJSON instead, whose escapes are
// JSON's.

// printable returns s with every rune that is not printable escaped, the
// newline and tab included: a record's field cannot start a line or a
// column of its own.
func printable(s string) string {
	if !needsEscape(s, "") {
		return s
	}
	var b strings.Builder
	writeEscaped(&b, s, "")
	return b.String()
}

// needsEscape reports whether s holds a rune that is neither printable nor
// in keep.
func needsEscape(s, keep string) bool {
	for _, r := range s {
		// A real U+FFFD is printable, but range cannot tell it from an
		// invalid byte: writeEscaped can.
		if (r == utf8.RuneError || !strconv.IsPrint(r)) && !strings.ContainsRune(keep, r) {
			return true
		}
	}
	return false
}

// writeEscaped writes s to b, each rune that is neither printable nor in
// keep escaped.
func writeEscaped(b *strings.Builder, s, keep string) {
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(b, `\x%02x`, s[0])
		case strconv.IsPrint(r) || strings.ContainsRune(keep, r):
			b.WriteString(s[:n])
		default:
			q := strconv.QuoteRune(r) // '\x1b', '\u202e', '\n'
			b.WriteString(q[1 : len(q)-1])
		}
		s = s[n:]
	}
}

// textWriter escapes what it writes to w as printable does, but for the
// newline and the tab, which lay out idemq's own lines (and the
// name<TAB>description lines of cobra's shell completion). Its writers
// (fmt, tabwriter) hand it whole runes.
type textWriter struct{ w io.Writer }

// Write writes p escaped and reports len(p) written when all of it was.
func (t textWriter) Write(p []byte) (int, error) {
	s := string(p)
	if !needsEscape(s, textLayout) {
		return t.w.Write(p)
	}
	var b strings.Builder
	writeEscaped(&b, s, textLayout)
	if _, err := io.WriteString(t.w, b.String()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// textLayout are the runes textWriter writes as they are.
const textLayout = "\n\t"
