package idemtest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLifecycle(t *testing.T) {
	s := New(Options{})
	assert.Empty(t, s.URL(), "URL before Start")
	require.NoError(t, s.Start())
	assert.Regexp(t, `^http://127\.0\.0\.1:\d+$`, s.URL())
	assert.Error(t, s.Start(), "second Start")
	s.Close()
	s.Close()
	assert.Error(t, s.Start(), "Start after Close")
}

func TestCloseCutsDelayShort(t *testing.T) {
	s := New(Options{Faults: faultOnFirst(FaultDelay), Delay: time.Minute})
	require.NoError(t, s.Start())
	c := testClient(t, s)
	errc := make(chan error, 1)
	go func() {
		_, err := send(c, "POST", s.URL()+"/payments", "k", "x")
		errc <- err
	}()
	waitClaimed(t, s, "k")

	start := time.Now()
	s.Close()
	assert.Less(t, time.Since(start), 5*time.Second, "Close waited for the delay")
	<-errc
	assert.Equal(t, 0, s.EffectsForKey("k"), "effect applied after Close")
	_, held := owner(s, "k")
	assert.False(t, held, "claim kept after Close")
}
