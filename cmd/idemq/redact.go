package main

import (
	"strings"

	"github.com/idem-go/idem/internal/redact"
)

// redactURL returns raw without what may hold a secret: its query and
// fragment go, and user info becomes "redacted", which shows credentials
// were there without showing them. A URL that does not parse is not shown at
// all, since which part of it is a secret cannot be told.
// It is internal/redact's, so that idemq shows a URL as the application's
// logs and errors do.
func redactURL(raw string) string { return redact.RawURL(raw) }

// scrub replaces the URL raw, wherever it appears in s, with its redacted
// form. The queue stores errors and reasons without the URL's secrets
// already; this guards against a message that quotes it anyway.
func scrub(s, raw string) string {
	if raw == "" || !strings.Contains(s, raw) {
		return s
	}
	return strings.ReplaceAll(s, raw, redactURL(raw))
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
