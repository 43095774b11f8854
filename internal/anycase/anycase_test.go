package anycase

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestAnyCase(t *testing.T) {
	tests := []struct {
		name       string
		h          http.Header
		has        bool
		values     []string
		afterDel   http.Header
		hasAnother bool // Has(h, "Idempotency-Key", "X-Idempotency-Key")
	}{
		{"absent", http.Header{"Accept": {"*/*"}}, false, nil, http.Header{"Accept": {"*/*"}}, false},
		{"canonical", http.Header{"Idempotency-Key": {"k"}}, true, []string{"k"}, http.Header{}, true},
		{"lower case", http.Header{"idempotency-key": {"k"}}, true, []string{"k"}, http.Header{}, true},
		{"empty value", http.Header{"idempotency-key": {""}}, false, []string{""}, http.Header{}, false},
		{"no value", http.Header{"Idempotency-Key": nil}, false, nil, http.Header{}, false},
		{"two spellings", http.Header{"Idempotency-Key": {"a"}, "IDEMPOTENCY-KEY": {"b"}, "Accept": {"*/*"}}, true, []string{"a", "b"}, http.Header{"Accept": {"*/*"}}, true},
		{"other name", http.Header{"x-idempotency-key": {"k"}}, false, nil, http.Header{"x-idempotency-key": {"k"}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Has(tt.h, "Idempotency-Key")
			assert.Equal(t, tt.has, got, "Has(%v) = %v, want %v", tt.h, got, tt.has)
			got = Has(tt.h, "Idempotency-Key", "X-Idempotency-Key")
			assert.Equal(t, tt.hasAnother, got, "Has(%v, two names) = %v, want %v", tt.h, got, tt.hasAnother)
			vs := Values(tt.h, "Idempotency-Key")
			assert.Len(t, vs, len(tt.values), "Values(%v) = %q, want %q", tt.h, vs, tt.values)
			assert.Subset(t, vs, tt.values, "Values(%v)", tt.h)
			Del(tt.h, "Idempotency-Key")
			assert.Equal(t, tt.afterDel, tt.h, "after Del")
		})
	}
}

// TestValuesDoesNotWriteIntoTheMap: appending the other spellings' values
// must not write into the canonical value list's spare capacity.
func TestValuesDoesNotWriteIntoTheMap(t *testing.T) {
	canon := make([]string, 1, 4)
	canon[0] = "a"
	h := http.Header{"Idempotency-Key": canon, "idempotency-key": {"b"}}
	_ = Values(h, "Idempotency-Key")
	assert.Equal(t, "", canon[:2][1], "the canonical list's backing array is untouched")
}
