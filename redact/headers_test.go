package redact

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestIsCredentialHeader(t *testing.T) {
	tests := []struct {
		name  string
		extra []string
		want  bool
	}{
		{"Authorization", nil, true},
		{"x-api-key", nil, true},
		{"API-KEY", nil, true},
		{"X-Auth-Token", nil, true},
		{"Set-Cookie", nil, true},
		{"Content-Type", nil, false},
		{"X-Shop-Token", nil, false},
		{"X-Shop-Token", []string{"x-shop-token"}, true},
		{"x-shop-token", []string{"X-Shop-Token"}, true},
		{"X-Shop", []string{"X-Shop-Token"}, false},
	}
	for _, tt := range tests {
		if got := IsCredentialHeader(tt.name, tt.extra...); got != tt.want {
			t.Errorf("IsCredentialHeader(%q, %q) = %v, want %v", tt.name, tt.extra, got, tt.want)
		}
	}
	for _, n := range CredentialHeaders() {
		assert.True(t, IsCredentialHeader(n), n)
	}
}

func TestCredentialHeadersFresh(t *testing.T) {
	l := CredentialHeaders()
	l[0] = "Content-Type"
	assert.Equal(t, "Authorization", CredentialHeaders()[0], "a caller cannot change the list")
	assert.False(t, IsCredentialHeader("Content-Type"))
}
