package methods

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMethodProperties(t *testing.T) {
	tests := []struct {
		method           string
		safe, idempotent bool
	}{
		{"GET", true, true}, {"HEAD", true, true}, {"OPTIONS", true, true}, {"TRACE", true, true},
		{"QUERY", true, true}, {"PUT", false, true}, {"DELETE", false, true},
		{"POST", false, false}, {"PATCH", false, false}, {"CONNECT", false, false},
		{"get", false, false}, {"FROB", false, false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.safe, Safe(tt.method), "Safe(%q)", tt.method)
		assert.Equal(t, tt.idempotent, Idempotent(tt.method), "Idempotent(%q)", tt.method)
	}
}
