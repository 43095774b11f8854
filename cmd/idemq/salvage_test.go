package main

import (
	"bytes"
	"context"
	binenc "encoding/binary"
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/queue"
)

// TestSalvage: a file the application refuses (a record's key flipped)
// is salvaged: the counts are printed, the damaged file is kept, and the
// fresh file opens with every record. A sound file is left as it is.
func TestSalvage(t *testing.T) {
	file, ids := queueFile(t, intent(t, secretURL, "a"), intent(t, secretURL, "b"), intent(t, secretURL, "c"))
	r := ok(t, file, "salvage")
	assert.Contains(t, r.stdout, "structure sound, left as it is")

	data, err := os.ReadFile(file)
	require.NoError(t, err)
	// The records bucket is inline in the root's leaf page: the key of
	// record 2 is found by its bytes, followed by a record's magic.
	key := binenc.BigEndian.AppendUint64(nil, uint64(ids[1]))
	at := bytes.Index(data, append(key, "iq"...))
	require.Positive(t, at, "record 2's key")
	data[at+7] ^= 0x10
	require.NoError(t, os.WriteFile(file, data, 0o600))
	_, err = queue.Open(file, queue.Options{})
	require.ErrorIs(t, err, queue.ErrDamaged, "the application refuses the file")

	r = ok(t, file, "salvage")
	assert.Regexp(t, `(?m)^recovered\s+3$`, r.stdout)
	assert.Regexp(t, `(?m)^unreadable\s+0$`, r.stdout)
	kept := regexp.MustCompile(`damaged file kept as (\S+)`).FindStringSubmatch(r.stdout)
	require.Len(t, kept, 2, r.stdout)
	got, err := os.ReadFile(kept[1])
	require.NoError(t, err)
	assert.Equal(t, data, got, "the damaged file is kept as it was")
	noSecret(t, r)

	q, err := queue.Open(file, queue.Options{})
	require.NoError(t, err, "the fresh file opens")
	defer q.Close()
	list, err := q.List(context.Background(), 0, 0, 10)
	require.NoError(t, err)
	require.Len(t, list, 3)
	for i, rec := range list {
		assert.Equal(t, ids[i], rec.ID)
	}
}

func TestSalvageMissingFile(t *testing.T) {
	r := idemq(t, nil, "--file", t.TempDir()+"/none.db", "salvage")
	assert.Equal(t, exitError, r.code)
	assert.Contains(t, r.stderr, "no such queue file")
}

// TestSalvageLostCommits: a file whose newest meta page is damaged lacks the
// last commit the queue acknowledged; the application refuses it, and
// salvage accepts the loss and says so.
func TestSalvageLostCommits(t *testing.T) {
	file, _ := queueFile(t, intent(t, secretURL, "a"), intent(t, secretURL, "b"))
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	// bbolt's meta pages: 0 at the start, 1 a page further; the page size
	// at byte 24, the transaction ID at byte 64 (in the machine's byte order).
	pageSize := int(binenc.NativeEndian.Uint32(data[24:]))
	newest := 0
	if binenc.NativeEndian.Uint64(data[pageSize+64:]) > binenc.NativeEndian.Uint64(data[64:]) {
		newest = pageSize
	}
	data[newest+32] ^= 0x04 // its root page id: the checksum fails
	require.NoError(t, os.WriteFile(file, data, 0o600))
	_, err = queue.Open(file, queue.Options{})
	require.ErrorIs(t, err, queue.ErrDamaged, "the application refuses the file")

	r := ok(t, file, "salvage")
	assert.Regexp(t, `(?m)^lost commits 1 `, r.stdout)
	q, err := queue.Open(file, queue.Options{})
	require.NoError(t, err, "the fresh file opens")
	require.NoError(t, q.Close())
}
