package idemtest

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRequestKey(t *testing.T) {
	long := strings.Repeat("k", MaxKeyLength)
	tests := []struct {
		name    string
		values  []string
		want    string
		wantErr error
	}{
		{"absent", nil, "", nil},
		{"plain", []string{"abc-123"}, "abc-123", nil},
		{"plain uuid", []string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}, "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
		{"plain with surrounding space", []string{"  abc "}, "abc", nil},
		{"sf-string", []string{`"abc"`}, "abc", nil},
		{"sf-string with space", []string{`"a b"`}, "a b", nil},
		{"sf-string escapes", []string{`"a\"b\\c"`}, `a"b\c`, nil},
		{"max length plain", []string{long}, long, nil},
		{"max length sf-string", []string{`"` + long + `"`}, long, nil},
		{"too long plain", []string{long + "k"}, "", errKeyTooLong},
		{"too long sf-string", []string{`"` + long + `k"`}, "", errKeyTooLong},
		{"empty sf-string", []string{`""`}, "", errKeyEmpty},
		{"unterminated", []string{`"abc`}, "", errKeyMalformed},
		{"lone quote", []string{`"`}, "", errKeyMalformed},
		{"bad escape", []string{`"a\nb"`}, "", errKeyMalformed},
		{"trailing escape", []string{`"ab\`}, "", errKeyMalformed},
		{"text after string", []string{`"ab"c`}, "", errKeyMalformed},
		{"parameters", []string{`"ab";x=1`}, "", errKeyMalformed},
		{"control character", []string{"\"a\x01b\""}, "", errKeyMalformed},
		{"non-ASCII", []string{`"ké"`}, "", errKeyMalformed},
		{"plain with quote", []string{`ab"c`}, "", errKeyMalformed},
		{"plain with inner space", []string{"a b"}, "", errKeyMalformed},
		{"two field lines", []string{"a", "b"}, "", errKeyMultiple},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tt.values {
				h.Add("Idempotency-Key", v)
			}
			got, err := requestKey(h, "Idempotency-Key", false)
			assert.Equal(t, tt.want, got, "requestKey(%q) key", tt.values)
			assert.Equal(t, tt.wantErr, err, "requestKey(%q) error", tt.values)
		})
	}
}

// TestRequestKeyAnyCase: a handler called directly can get a map key that
// is not canonical; it is the same header, and two spellings are two lines.
func TestRequestKeyAnyCase(t *testing.T) {
	tests := []struct {
		name    string
		h       http.Header
		want    string
		wantErr error
	}{
		{"lower case", http.Header{"idempotency-key": {"abc"}}, "abc", nil},
		{"configured name in lower case", http.Header{"Idempotency-Key": {"abc"}}, "abc", nil},
		{"two spellings", http.Header{"Idempotency-Key": {"a"}, "IDEMPOTENCY-KEY": {"b"}}, "", errKeyMultiple},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := requestKey(tt.h, "idempotency-key", false)
			assert.Equal(t, tt.want, got, "requestKey(%v) key", tt.h)
			assert.Equal(t, tt.wantErr, err, "requestKey(%v) error", tt.h)
		})
	}
}

func TestRequestKeySFStringOnly(t *testing.T) {
	tests := []struct {
		value   string
		want    string
		wantErr error
	}{
		{`"abc"`, "abc", nil},
		{"abc", "", errKeyBare},
		{`"abc`, "", errKeyMalformed},
		{`ab"c`, "", errKeyMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			h := http.Header{"Idempotency-Key": {tt.value}}
			got, err := requestKey(h, "Idempotency-Key", true)
			assert.Equal(t, tt.want, got, "requestKey(%q) key", tt.value)
			assert.Equal(t, tt.wantErr, err, "requestKey(%q) error", tt.value)
		})
	}
}

func TestFingerprint(t *testing.T) {
	base := fingerprint("POST", "/payments", []byte(`{"a":1}`))
	tests := []struct {
		name         string
		method, path string
		body         string
		wantSame     bool
	}{
		{"identical", "POST", "/payments", `{"a":1}`, true},
		{"other body", "POST", "/payments", `{"a":2}`, false},
		{"other path", "POST", "/payments/x", `{"a":1}`, false},
		{"other method", "PATCH", "/payments", `{"a":1}`, false},
		{"boundary moved", "POST", "/payments{", `"a":1}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fingerprint(tt.method, tt.path, []byte(tt.body)) == base
			assert.Equal(t, tt.wantSame, got, "fingerprint equal to base: got %v, want %v", got, tt.wantSame)
		})
	}
}
