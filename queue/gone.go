package queue

import (
	"bytes"
	"encoding/binary"
	"slices"
)

// A removed record leaves a trace. bbolt frees the pages a commit rewrites
// without clearing them, so a file holds older copies of its records on
// free pages, among them copies of records since discarded or swept. When
// damage cuts part of the tree off, Salvage looks for the records it lost
// on the pages outside the tree, and there a record the damage cut off
// looks just like one an operator discarded. The file's gone ranges tell
// them apart: every ID issued (up to the records bucket's sequence) that
// the records bucket no longer holds, as ranges of consecutive IDs in the
// meta bucket (key "gone" and the first ID, value the last). Removing a
// record (Discard, the sweep after KeepSettled) adds its ID in the same
// commit (markGone); Salvage copies no record they name.
//
// The ranges are the gaps between the records kept, so there are at most
// one more of them than records, however many were ever removed: they are
// bounded by the queue's limits and KeepSettled as the records are, and
// need no sweep of their own. Open checks them against the records and
// rewrites them when they disagree (traceGone): a file from before them,
// or written by a build that removed records without a trace. A key says
// the file keeps them, since a file from before them, never opened since,
// has none, which must not read as nothing removed: Salvage then takes
// nothing from outside the tree.

// metaGone prefixes the gone ranges' keys in the meta bucket. A build that
// knows nothing of them reads past them.
var metaGone = []byte("gone")

// metaGoneKept, in the meta bucket, says the file keeps the gone ranges.
var metaGoneKept = []byte("kept:gone")

// idRange is a range of IDs, first and last included.
type idRange struct{ first, last ID }

func goneKey(first ID) []byte {
	return binary.BigEndian.AppendUint64(append(make([]byte, 0, len(metaGone)+8), metaGone...), uint64(first))
}

// parseGone returns the range a meta bucket element k, v holds, if it is
// one.
func parseGone(k, v []byte) (idRange, bool) {
	if len(k) != len(metaGone)+8 || !bytes.HasPrefix(k, metaGone) || len(v) != 8 {
		return idRange{}, false
	}
	r := idRange{ID(binary.BigEndian.Uint64(k[len(metaGone):])), ID(binary.BigEndian.Uint64(v))}
	return r, r.first <= r.last
}

// markGone adds id, a record this transaction removed, to the gone
// ranges, merging it with the ranges next to it.
func (b buckets) markGone(id ID) error {
	r := idRange{id, id}
	c := b.meta.Cursor()
	k, v := c.Seek(goneKey(id))
	if k == nil {
		k, v = c.Last()
	} else if bytes.Equal(k, goneKey(id)) {
		return nil // gone already
	} else {
		k, v = c.Prev()
	}
	if before, ok := parseGone(k, v); ok && before.last+1 >= id {
		if before.last >= id {
			return nil
		}
		r.first = before.first
	}
	if v := b.meta.Get(goneKey(id + 1)); v != nil {
		if after, ok := parseGone(goneKey(id+1), v); ok {
			r.last = after.last
			if err := b.meta.Delete(goneKey(id + 1)); err != nil {
				return err
			}
		}
	}
	return b.meta.Put(goneKey(r.first), binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(r.last)))
}

// goneRanges returns the gone ranges stored, in order.
func (b buckets) goneRanges() []idRange {
	var out []idRange
	c := b.meta.Cursor()
	for k, v := c.Seek(metaGone); k != nil && bytes.HasPrefix(k, metaGone); k, v = c.Next() {
		if r, ok := parseGone(k, v); ok {
			out = append(out, r)
		}
	}
	return out
}

// gaps builds the gone ranges of a records bucket from its IDs, given in
// increasing order.
type gaps struct {
	prev   ID
	ranges []idRange
}

// next notes id, the next ID the records bucket holds.
func (g *gaps) next(id ID) {
	if id > g.prev+1 {
		g.ranges = append(g.ranges, idRange{g.prev + 1, id - 1})
	}
	g.prev = max(g.prev, id)
}

// upTo returns the ranges, the last ending at seq, the last ID issued.
func (g *gaps) upTo(seq uint64) []idRange {
	if ID(seq) > g.prev {
		return append(g.ranges, idRange{g.prev + 1, ID(seq)})
	}
	return g.ranges
}

// traceGone makes the gone ranges those of g, the records bucket's IDs, and
// the records bucket's sequence at least its last ID, so that no ID is
// issued twice. It writes only what differs: on a file whose ranges are
// right, nothing.
func (b buckets) traceGone(g *gaps) error {
	if seq := b.records.Sequence(); uint64(g.prev) > seq {
		if err := b.records.SetSequence(uint64(g.prev)); err != nil {
			return err
		}
	}
	if b.meta.Get(metaGoneKept) == nil {
		if err := putUint(b.meta, metaGoneKept, 1); err != nil {
			return err
		}
	}
	want := g.upTo(b.records.Sequence())
	have := b.goneRanges()
	if slices.Equal(want, have) {
		return nil
	}
	for _, r := range have {
		if err := b.meta.Delete(goneKey(r.first)); err != nil {
			return err
		}
	}
	for _, r := range want {
		if err := b.meta.Put(goneKey(r.first), binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(r.last))); err != nil {
			return err
		}
	}
	return nil
}

// goneSet answers whether an ID is in sorted, disjoint ranges.
type goneSet []idRange

func (s goneSet) has(id ID) bool {
	i, _ := slices.BinarySearchFunc(s, id, func(r idRange, id ID) int {
		switch {
		case r.last < id:
			return -1
		case r.first > id:
			return 1
		}
		return 0
	})
	return i < len(s) && s[i].first <= id && id <= s[i].last
}
