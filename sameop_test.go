package idem

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSameOperation: the same method, URL and body is the same operation,
// whatever the key, headers or lane; a change to any of the three is not.
func TestSameOperation(t *testing.T) {
	const u = "http://127.0.0.1:1/payments"
	mk := func(method, url, body string, opts ...IntentOption) *Intent {
		in, err := NewIntent(method, url, []byte(body), opts...)
		require.NoError(t, err)
		return in
	}
	base := mk("POST", u, `{"amount":1}`, WithKey("k-1"))
	tests := []struct {
		name  string
		other *Intent
		want  bool
	}{
		{"same", mk("POST", u, `{"amount":1}`, WithKey("k-1")), true},
		{"other key, header and lane", mk("POST", u, `{"amount":1}`, WithKey("k-2"), WithHeader("X-A", "b"), WithLane("l")), true},
		{"other method", mk("PUT", u, `{"amount":1}`, WithKey("k-1")), false},
		{"other URL", mk("POST", u+"?x=1", `{"amount":1}`, WithKey("k-1")), false},
		{"other body", mk("POST", u, `{"amount":2}`, WithKey("k-1")), false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := base.SameOperation(tt.other)
			assert.Equal(t, tt.want, got, "SameOperation = %v, want %v", got, tt.want)
		})
	}
}
