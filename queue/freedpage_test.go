package queue

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/idem-go/idem"
)

// history is a queue file whose freed pages hold older copies of its
// records, and the truth about them.
type history struct {
	file  []byte
	truth map[ID][]byte // the records in the tree, as stored
	gone  map[ID]bool   // the records discarded or swept
}

// buildHistory makes a queue of n keyed records over four lanes, one
// commit each, then takes them through their lives one commit at a time,
// as a drainer and an operator would: every third is retried, every
// seventh discarded, the retried ones settled done or failed, and those of
// the first half swept once their retention is over; then, after that
// sweep, a third of the others are retried or settled, and some more
// discarded. Each commit frees the pages it rewrote, which keep the older
// copies: of records since moved on, discarded or swept.
func buildHistory(t *testing.T, path string, n int) history {
	t.Helper()
	clk := newClock()
	opts := Options{now: clk.Now, KeepSettled: time.Hour}
	q := reopen(t, path, opts)
	ctx := context.Background()
	for i := range n {
		_, err := q.Enqueue(ctx, post(t, url, i, idem.WithKey(fmt.Sprintf("key-%d", i)), idem.WithLane(fmt.Sprintf("lane-%d", i%4))))
		require.NoError(t, err)
	}
	gone := map[ID]bool{}
	// attempt leases record id and retries it, in doubt, or settles it.
	attempt := func(id ID, settle bool) {
		r, err := q.Get(ctx, id)
		require.NoError(t, err)
		clk.Add(time.Second)
		markLeased(r, clk.Now())
		st := q.st.(*boltStore)
		require.NoError(t, st.Put(ctx, Pending, r))
		switch {
		case !settle:
			r.InDoubt, r.State, r.NextAttempt = true, Pending, clk.Now().Add(time.Minute)
		case id%2 == 0:
			markSettled(r, Failed, idem.Unknown, "", nil, clk.Now())
		default:
			markSettled(r, Done, idem.Applied, "", nil, clk.Now())
		}
		require.NoError(t, st.Put(ctx, InFlight, r))
	}
	discard := func(id ID) {
		clk.Add(time.Second)
		require.NoError(t, q.Discard(ctx, id))
		gone[id] = true
	}
	for id := ID(3); id <= ID(n); id += 3 {
		attempt(id, false)
	}
	for id := ID(7); id <= ID(n); id += 7 {
		discard(id)
	}
	var sweepAt time.Time // when the settles of the first half are past their retention
	for id := ID(3); id <= ID(n); id += 3 {
		if !gone[id] {
			attempt(id, true)
		}
		if id <= ID(n/2) {
			gone[id] = true // swept at the next Open
			sweepAt = clk.Now().Add(time.Hour + time.Millisecond)
		}
	}
	require.NoError(t, q.Close())
	clk.Set(sweepAt)
	q = reopen(t, path, opts)
	for id := ID(1); id <= ID(n); id += 3 {
		switch {
		case gone[id]:
		case id%11 == 0:
			discard(id)
		default:
			attempt(id, id%2 == 1)
		}
	}
	c, err := q.Counts(ctx)
	require.NoError(t, err)
	require.NoError(t, q.Close())
	truth := storedRecords(t, path)
	for id := range gone {
		_, ok := truth[id]
		require.False(t, ok, "record %d is gone", id)
	}
	require.Equal(t, len(truth), c[Pending]+c[Done]+c[Failed])
	require.Equal(t, n, len(truth)+len(gone))
	file, err := os.ReadFile(path)
	require.NoError(t, err)
	return history{file: file, truth: truth, gone: gone}
}

// regions are the parts of a sound queue file that a damage case hits.
type regions struct {
	list     [][2]int64 // the free list's count and entries
	freed    [][2]int64 // the pages the free list holds
	branches []int64    // the page ids in the records tree's branch elements
	freeIDs  []uint64   // the free pages' ids
}

// freeRegions finds the regions of file, a sound queue file.
func freeRegions(t *testing.T, file []byte) regions {
	t.Helper()
	w := walkSound(t, file)
	require.NotEmpty(t, w.free, "the history left freed pages")
	var r regions
	ps := int64(w.meta.pageSize)
	at := int64(w.meta.freelist) * ps
	n := int64(binary.NativeEndian.Uint16(file[at+10:]))
	r.list = append(r.list, [2]int64{at + 10, at + 12}) // the count
	start := at + pageHeader
	if n == 0xFFFF {
		n = int64(binary.NativeEndian.Uint64(file[start:]))
		r.list = append(r.list, [2]int64{start, start + 8})
		start += 8
	}
	for i := range n {
		r.list = append(r.list, [2]int64{start + 8*i, start + 8*i + 8})
	}
	for id := range w.free {
		r.freed = append(r.freed, [2]int64{int64(id) * ps, int64(id+1) * ps})
		r.freeIDs = append(r.freeIDs, id)
	}
	slices.Sort(r.freeIDs)
	for id := range w.seen {
		off := int64(id) * ps
		if id < 2 || off+ps > int64(len(file)) || binary.NativeEndian.Uint16(file[off+8:]) != branchPage {
			continue
		}
		for i := range int64(binary.NativeEndian.Uint16(file[off+10:])) {
			r.branches = append(r.branches, off+pageHeader+i*elemSize+8)
		}
	}
	slices.Sort(r.branches)
	require.NotEmpty(t, r.branches, "the records tree has branches")
	return r
}

// damageKinds are the ways TestFreedPagesNeverWin damages a file.
var damageKinds = [...]string{"free list entry", "freed page", "branch to a freed page"}

// damageFree returns a copy of file with damage of the given kind.
func damageFree(rnd *rand.Rand, file []byte, r regions, kind int) ([]byte, string) {
	d := bytes.Clone(file)
	if kind == 2 {
		at, id := r.branches[rnd.IntN(len(r.branches))], r.freeIDs[rnd.IntN(len(r.freeIDs))]
		binary.NativeEndian.PutUint64(d[at:], id)
		return d, fmt.Sprintf("the page id at byte %d set to free page %d", at, id)
	}
	regs := r.list
	if kind == 1 {
		regs = r.freed
	}
	reg := regs[rnd.IntN(len(regs))]
	off, bit := reg[0]+rnd.Int64N(reg[1]-reg[0]), rnd.IntN(8)
	d[off] ^= 1 << bit
	return d, fmt.Sprintf("bit %d of byte %d", bit, off)
}

// TestFreedPagesNeverWin damages a queue file whose freed pages hold older
// copies of its records and copies of records discarded or swept: one
// flipped bit of its free list (an entry or the count), or of a page the
// free list holds, or a page id in a branch of its records tree turned to
// a freed page's. Whatever Open and Salvage make of it, no record comes
// back that was discarded or swept, and none other than the tree last held
// it (a settled record returned pending, say): a record may only be lost.
//
// The default run is 90 cases; IDEM_SOAK=1 runs 3,000, and
// QUEUE_DAMAGE_CASES and QUEUE_DAMAGE_SEED set the number and the seed:
//
//	IDEM_SOAK=1 go test -run TestFreedPagesNeverWin -v ./queue
func TestFreedPagesNeverWin(t *testing.T) {
	cases := 90
	if os.Getenv("IDEM_SOAK") == "1" {
		cases = 3000
	}
	cases = envInt(t, "QUEUE_DAMAGE_CASES", cases)
	seed := uint64(envInt(t, "QUEUE_DAMAGE_SEED", 1))
	dir := t.TempDir()
	h := buildHistory(t, filepath.Join(dir, "history.db"), 600)
	regs := freeRegions(t, h.file)
	rnd := rand.New(rand.NewPCG(seed, seed))
	type tally struct{ cases, refused, salvaged, resurrected, changed, lost int }
	var tallies [len(damageKinds)]tally
	for i := range cases {
		kind := i % len(damageKinds)
		d, what := damageFree(rnd, h.file, regs, kind)
		name := fmt.Sprintf("case %d (%s: %s)", i, damageKinds[kind], what)
		path := filepath.Join(dir, fmt.Sprintf("case-%d.db", i))
		tl := &tallies[kind]
		tl.cases++

		require.NoError(t, os.WriteFile(path, d, 0o600))
		if q, err := Open(path, Options{KeepSettled: 1000 * time.Hour}); err == nil {
			list, err := q.List(context.Background(), 0, 0, len(h.truth)+10)
			require.NoError(t, err, name)
			require.NoError(t, q.Close())
			got := storedRecords(t, path)
			assert.Len(t, list, len(got), name)
			res, chg, _ := compareTruth(h, got)
			if res+chg > 0 {
				t.Logf("%s: Open: %d resurrected, %d changed", name, res, chg)
			}
			tl.resurrected, tl.changed = tl.resurrected+res, tl.changed+chg
		} else {
			require.ErrorIs(t, err, ErrDamaged, name)
			tl.refused++
		}

		// The damaged copy again, without the mark of the commit Open
		// made, which it lacks.
		require.NoError(t, os.WriteFile(path, d, 0o600))
		require.NoError(t, os.Remove(path+lockSuffix))
		rep, err := Salvage(path, Options{})
		require.NoError(t, err, name)
		if !rep.Sound() {
			tl.salvaged++
			res, chg, lost := compareTruth(h, storedRecords(t, path))
			if res+chg > 0 {
				t.Logf("%s: Salvage: %d resurrected, %d changed: %+v", name, res, chg, rep)
			}
			tl.resurrected, tl.changed, tl.lost = tl.resurrected+res, tl.changed+chg, tl.lost+lost
			require.NoError(t, os.Remove(rep.Kept))
		}
		require.NoError(t, os.Remove(path))
		os.Remove(path + lockSuffix)
	}
	for k, tl := range tallies {
		t.Logf("%s: %d cases over %d records (%d discarded or swept): Open refused %d, Salvage rewrote %d; %d records came back discarded or swept, %d changed, %d lost",
			damageKinds[k], tl.cases, len(h.truth), len(h.gone), tl.refused, tl.salvaged, tl.resurrected, tl.changed, tl.lost)
		assert.Zero(t, tl.resurrected, "%s: records discarded or swept that came back", damageKinds[k])
		assert.Zero(t, tl.changed, "%s: records that came back other than the tree held them", damageKinds[k])
	}
}

// compareTruth counts, in got (a file's records), those h says are gone,
// those that differ from the tree's copy, and the tree's records missing.
func compareTruth(h history, got map[ID][]byte) (resurrected, changed, lost int) {
	for id, v := range got {
		switch want, ok := h.truth[id]; {
		case !ok:
			resurrected++
		case !bytes.Equal(v, want):
			changed++
		}
	}
	for id := range h.truth {
		if _, ok := got[id]; !ok {
			lost++
		}
	}
	return resurrected, changed, lost
}

// TestSalvageWithoutTrace: in a file from before the gone ranges, a record
// the damage cut off the tree cannot be told from one discarded, so
// Salvage takes nothing from outside the tree: it loses what the damage
// cut off, and brings back nothing removed.
func TestSalvageWithoutTrace(t *testing.T) {
	dir := t.TempDir()
	h := buildHistory(t, filepath.Join(dir, "history.db"), 600)
	regs := freeRegions(t, h.file)
	// As a build from before the ranges leaves it: none, and no key
	// saying they are kept.
	path := filepath.Join(dir, "old.db")
	require.NoError(t, os.WriteFile(path, h.file, 0o600))
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		b, err := open(tx)
		require.NoError(t, err)
		for _, r := range b.goneRanges() {
			require.NoError(t, b.meta.Delete(goneKey(r.first)))
		}
		return b.meta.Delete(metaGoneKept)
	}))
	require.NoError(t, db.Close())
	old, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, len(h.file), len(old), "the same pages")

	rnd := rand.New(rand.NewPCG(1, 1))
	var salvaged, orphans, resurrected, changed int
	for i := range 20 {
		d, what := damageFree(rnd, old, regs, 2)
		require.NoError(t, os.WriteFile(path, d, 0o600))
		rep, err := Salvage(path, Options{})
		require.NoError(t, err, what)
		if rep.Sound() {
			continue
		}
		salvaged++
		orphans += rep.Orphans
		res, chg, _ := compareTruth(h, storedRecords(t, path))
		resurrected, changed = resurrected+res, changed+chg
		require.NoError(t, os.Remove(rep.Kept))
		t.Logf("case %d (%s): %d stale", i, what, rep.Stale)
	}
	require.Positive(t, salvaged)
	assert.Zero(t, orphans, "records taken from outside the tree")
	assert.Zero(t, resurrected)
	assert.Zero(t, changed)
}
