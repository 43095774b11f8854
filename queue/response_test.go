package queue

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestResponseReplayed: a stored answer tells a replay by the headers a
// Client reads for Result.Replayed, in any of their spellings.
func TestResponseReplayed(t *testing.T) {
	tests := []struct {
		name string
		h    http.Header
		want bool
	}{
		{"Idempotent-Replayed", http.Header{"Idempotent-Replayed": {"true"}}, true},
		{"X-Idempotent-Replayed", http.Header{"X-Idempotent-Replayed": {"TRUE"}}, true},
		{"false", http.Header{"Idempotent-Replayed": {"false"}}, false},
		{"none", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := (&Response{Status: 201, Header: tt.h}).Replayed()
			assert.Equal(t, tt.want, got, "Replayed() = %v, want %v", got, tt.want)
		})
	}
}
