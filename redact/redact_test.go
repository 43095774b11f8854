package redact

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRawURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"https://h/p", "https://h/p"},
		{"https://u:pw@h/p?k=v#f", "https://redacted@h/p"},
		{"https://h/p?token=s3cret", "https://h/p"},
		{"https://h/p?", "https://h/p"},
		{"http://h/%zz", "(unparsable URL)"},
	}
	for _, tt := range tests {
		if got := RawURL(tt.in); got != tt.want {
			t.Errorf("RawURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestURLLeavesItsArgument(t *testing.T) {
	u, _ := url.Parse("https://u:pw@h/p?k=v")
	_ = URL(u)
	assert.Equal(t, "k=v", u.RawQuery)
	assert.Equal(t, "u", u.User.Username())
}

func TestError(t *testing.T) {
	err := &url.Error{Op: "Post", URL: "https://h/p?token=s3cret", Err: io.ErrUnexpectedEOF}
	assert.Equal(t, "unexpected EOF", Error(fmt.Errorf("wrapped: %w", err)))
	assert.Equal(t, "plain", Error(errors.New("plain")))
}

func TestWrap(t *testing.T) {
	err := &url.Error{Op: "Post", URL: "https://h/p?token=s3cret", Err: io.ErrUnexpectedEOF}
	w := Wrap(err)
	assert.Equal(t, "unexpected EOF", w.Error())
	assert.ErrorIs(t, w, io.ErrUnexpectedEOF)
	var ue *url.Error
	assert.ErrorAs(t, w, &ue)
	assert.NoError(t, Wrap(nil))
}
