package replay

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestReplayed(t *testing.T) {
	tests := []struct {
		h    http.Header
		want bool
	}{
		{http.Header{"Idempotent-Replayed": {"true"}}, true},
		{http.Header{"Idempotency-Replayed": {"TRUE"}}, true},
		{http.Header{"X-Idempotent-Replayed": {" true "}}, true},
		{http.Header{"Idempotent-Replayed": {"false"}}, false},
		{http.Header{"Idempotent-Replayed": {"?1"}}, false},
		{http.Header{}, false},
		{nil, false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, Replayed(tt.h), "Replayed(%v)", tt.h)
	}
}
