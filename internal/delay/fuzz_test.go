package delay

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The seed corpus is testdata/fuzz/FuzzParseRetryAfter; run the fuzzer with
//
//	go test -run '^$' -fuzz '^FuzzParseRetryAfter$' -fuzztime 5m ./internal/delay

// FuzzParseRetryAfter checks ParseRetryAfter against arbitrary values and
// clocks: it never panics, never reports a negative wait, reads small
// delta-seconds exactly, reads an HTTP-date relative to now (a past date is
// 0), and accepts a value starting with a digit only when it is all digits.
func FuzzParseRetryAfter(f *testing.F) {
	f.Fuzz(func(t *testing.T, v string, nowSec int64, n uint32, delta uint32) {
		// HTTP-dates have four-digit years: keep now in 1970..9000.
		now := time.Unix(int64(uint64(nowSec)%220_000_000_000), 0).UTC()

		d, ok := ParseRetryAfter(v, now)
		if ok && d < 0 {
			t.Fatalf("ParseRetryAfter(%q, %v) = %v, true; want a wait >= 0", v, now, d)
		}
		if tv := strings.TrimSpace(v); tv != "" && tv[0] >= '0' && tv[0] <= '9' {
			if fzAllDigits(tv) && !ok {
				t.Fatalf("ParseRetryAfter(%q) = %v, false; delta-seconds must be accepted", v, d)
			}
			if ok && !fzAllDigits(tv) {
				t.Fatalf("ParseRetryAfter(%q) = %v, true; a value starting with a digit that is not all digits is malformed and must be ignored", v, d)
			}
		}

		secs := strconv.FormatUint(uint64(n), 10)
		if d, ok := ParseRetryAfter(secs, now); !ok || d != time.Duration(n)*time.Second {
			t.Fatalf("ParseRetryAfter(%q) = %v, %v; want %v, true", secs, d, ok, time.Duration(n)*time.Second)
		}
		if d, ok := ParseRetryAfter(" "+secs+"\t", now); !ok || d != time.Duration(n)*time.Second {
			t.Fatalf("ParseRetryAfter(%q) = %v, %v; want %v, true", " "+secs+"\t", d, ok, time.Duration(n)*time.Second)
		}

		step := time.Duration(delta) * time.Second
		past := now.Add(-step).Format(http.TimeFormat)
		if d, ok := ParseRetryAfter(past, now); !ok || d != 0 {
			t.Fatalf("ParseRetryAfter(%q, now %v) = %v, %v; want 0, true for a date in the past", past, now, d, ok)
		}
		future := now.Add(step).Format(http.TimeFormat)
		if d, ok := ParseRetryAfter(future, now); !ok || d != step {
			t.Fatalf("ParseRetryAfter(%q, now %v) = %v, %v; want %v, true", future, now, d, ok, step)
		}
	})
}

func fzAllDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
