package queue

import (
	"bytes"
	"context"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

// TestSameKeyComparesBodiesInPlace: a supplied key that comes again is
// checked against the operation its record holds without copying either
// body: reading the record costs one copy of its body, the comparison none.
func TestSameKeyComparesBodiesInPlace(t *testing.T) {
	q, _ := openTest(t, Options{})
	body := bytes.Repeat([]byte("x"), 4<<20)
	enqueue := func() *idem.Intent {
		in, err := idem.NewIntent("POST", url, body, idem.WithKey("order-1"))
		require.NoError(t, err)
		return in
	}
	id, err := q.Enqueue(waitCtx(t), enqueue())
	require.NoError(t, err)
	again := enqueue()
	st := q.st.(*boltStore)

	// allocated reports the bytes fn allocates.
	allocated := func(fn func()) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		fn()
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	read := allocated(func() {
		_, err := st.Get(context.Background(), id)
		require.NoError(t, err)
	})
	var got ID
	checked := allocated(func() {
		got, err = st.queued(again)
		require.NoError(t, err)
	})
	assert.Equal(t, id, got, "the same operation under its key is the queued record")
	assert.Less(t, checked, read+uint64(len(body)/2),
		"the key check allocated %d bytes, reading the record %d: the comparison copied a body of %d", checked, read, len(body))
}
