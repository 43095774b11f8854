package engine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestRegister: the implementation is set once; a second registration is a
// programming error, not a silent swap.
func TestRegister(t *testing.T) {
	saved := impl
	t.Cleanup(func() { impl = saved })
	impl = Impl{}
	Register(Impl{
		Attempt:   func(context.Context, Call) (Step, error) { return Step{Status: 201}, nil },
		Unsettled: func(inDoubt bool) uint8 { return map[bool]uint8{true: 1, false: 4}[inDoubt] },
	})
	s, err := Attempt(context.Background(), Call{})
	assert.NoError(t, err)
	assert.Equal(t, 201, s.Status)
	assert.Equal(t, uint8(1), Unsettled(true))
	assert.PanicsWithValue(t, "engine: Register called twice", func() { Register(Impl{}) })
}
