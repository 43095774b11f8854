package idemtest

import (
	"errors"
	"net"
	"net/http"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDialRefusal(t *testing.T) {
	refuse := true
	s := startServer(t, Options{RefuseDial: func() bool { return refuse }})
	c := testClient(t, s)

	_, err := send(c, "POST", s.URL()+"/payments", "k", "x")
	require.Error(t, err)
	assert.True(t, errors.Is(err, syscall.ECONNREFUSED), "errors.Is(%v, ECONNREFUSED) = false, want true", err)
	var opErr *net.OpError
	require.True(t, errors.As(err, &opErr), "got %T, want a *net.OpError inside", err)
	assert.Equal(t, "dial", opErr.Op)
	assert.Equal(t, 0, s.Requests(), "a refused dial reached a handler")

	refuse = false
	got := mustSend(t, c, "POST", s.URL()+"/payments", "k", "x")
	assert.Equal(t, http.StatusCreated, got.status, "after refusals stop")
	assert.Equal(t, 1, s.Stats().Refused, "Stats.Refused")
}

func TestSetDown(t *testing.T) {
	asked := 0
	s := startServer(t, Options{RefuseDial: func() bool { asked++; return false }})
	c := testClient(t, s)
	url := s.URL() + "/resources/r"

	steps := []struct {
		down    bool
		wantErr bool
	}{
		{false, false},
		{true, true},
		{true, true},
		{false, false},
	}
	for i, step := range steps {
		s.SetDown(step.down)
		_, err := send(c, "GET", url, "", "")
		if step.wantErr {
			assert.True(t, errors.Is(err, syscall.ECONNREFUSED), "step %d: got %v, want ECONNREFUSED", i, err)
		} else {
			assert.NoError(t, err, "step %d", i)
		}
	}
	assert.Equal(t, 2, asked, "RefuseDial consulted while down")
	assert.Equal(t, 2, s.Requests(), "Requests")
}

func TestClientDialsThroughServer(t *testing.T) {
	s := startServer(t, Options{})
	c := s.Client()
	defer c.CloseIdleConnections()
	s.SetDown(true)
	_, err := c.Get(s.URL() + "/resources/r")
	assert.True(t, errors.Is(err, syscall.ECONNREFUSED), "got %v, want ECONNREFUSED", err)
	s.SetDown(false)
	resp, err := c.Get(s.URL() + "/resources/r")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
}
