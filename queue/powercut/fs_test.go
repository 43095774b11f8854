package powercut

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCutDropsUnsynced: what was synced survives a cut, what was not does
// not, and a name not synced in its directory is undone.
func TestCutDropsUnsynced(t *testing.T) {
	p := mountT(t)
	path := filepath.Join(p.Dir(), "f")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("synced"), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	_, err = f.WriteAt([]byte("lost!!"), 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("tail"), 6)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(p.Dir(), "new"), []byte("x"), 0o600))
	require.NoError(t, f.Close())

	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "lost!!tail", string(got), "before the cut, reads see every write")

	rep := p.Cut(Plan{})
	assert.Equal(t, CutReport{Pending: 3, Names: 1}, rep, "two writes to f, one to new")
	got, err = os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "synced", string(got), "after the cut, only the synced write")
	_, err = os.Stat(filepath.Join(p.Dir(), "new"))
	assert.ErrorIs(t, err, os.ErrNotExist, "a file never synced, in a directory never synced")
}

// TestCutTearsTheLastWrite: with Tear, the last write lands in part, a
// prefix of it, and the writes before it not at all.
func TestCutTearsTheLastWrite(t *testing.T) {
	p := mountT(t)
	path := filepath.Join(p.Dir(), "f")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	_, err = f.WriteAt(make([]byte, 4096), 0)
	require.NoError(t, err)
	page := make([]byte, 4096)
	for i := range page {
		page[i] = 0xAB
	}
	_, err = f.WriteAt(page, 4096)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	rep := p.Cut(Plan{Tear: true})
	assert.True(t, rep.Torn)
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Greater(t, len(got), 4096, "part of the last write landed")
	require.Less(t, len(got), 8192, "not all of it")
	for i := range len(got) - 4096 {
		require.Equal(t, byte(0xAB), got[4096+i])
	}
}

// TestArmedCutFailsFromItsChange: the armed change fails with EIO, as does
// every one after it, until the cut; Off is closed.
func TestArmedCutFailsFromItsChange(t *testing.T) {
	p := mountT(t)
	path := filepath.Join(p.Dir(), "f")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Sync())
	p.Arm(2)
	_, err = f.WriteAt([]byte("a"), 0)
	require.NoError(t, err, "the first change is made")
	select {
	case <-p.Off():
		t.Fatal("power off before the armed change")
	default:
	}
	require.Error(t, f.Sync(), "the second change fails")
	<-p.Off()
	_, err = f.WriteAt([]byte("b"), 0)
	require.Error(t, err, "and every one after it")
	require.NoError(t, f.Close())
	p.Cut(Plan{})
	assert.False(t, p.IsOff())
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Empty(t, got, "the write never synced")
}
