package main

import (
	"strings"

	"github.com/idem-go/idem/redact"
)

// scrub replaces the URL raw, wherever it appears in s, with its redacted
// form (package redact's, as the application's logs and errors show it).
// The queue stores errors and reasons without the URL's secrets already;
// this guards against a message that quotes it anyway.
func scrub(s, raw string) string {
	if raw == "" || !strings.Contains(s, raw) {
		return s
	}
	return strings.ReplaceAll(s, raw, redact.RawURL(raw))
}

// keyPrefixLen is how much of an idempotency key idemq shows, and
// keyMinShown the shortest key it shows that much of: enough to find the
// key in a server's logs, never more than half of it. A shorter key is not
// shown at all.
const (
	keyPrefixLen = 8
	keyMinShown  = 2 * keyPrefixLen
)

// keyPrefix returns what idemq shows of key: its first keyPrefixLen
// characters and "…", or "" for a short key, which is hidden.
func keyPrefix(key string) string {
	if len(key) < keyMinShown {
		return ""
	}
	return key[:keyPrefixLen] + "…"
}
