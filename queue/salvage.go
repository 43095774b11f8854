package queue

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/idem-go/idem/internal/binenc"
)

// SalvageReport says what Salvage found and did.
type SalvageReport struct {
	// Recovered counts the records copied, byte for byte, into the fresh
	// file; 0 when the file was sound and left as it was.
	Recovered int
	// Unreadable counts the records found whose stored bytes do not decode
	// (a checksum that fails, a newer version); they are not copied.
	Unreadable int
	// Orphans counts the records copied from pages outside the tree: pages
	// the tree lost (a damaged page id in a branch), or that the tree
	// reaches and the free list holds too. Each is the newest copy found
	// of a record the tree does not hold, where the tree lost pages, and
	// that the file's trace of removed records does not name (see
	// Salvage).
	Orphans int
	// Stale counts the records found on such pages and not copied: the
	// tree holds a copy of them, or they were discarded or removed after
	// KeepSettled, or nothing shows the tree lost them.
	Stale int
	// Duplicates counts the records found twice in the tree, under two
	// keys or in two pages; the copy furthest on (settled, then in doubt,
	// then the later attempt) is kept.
	Duplicates int
	// LostCommits counts the commits the queue acknowledged that the file
	// lacks: bbolt opens it as an earlier commit left it, because its
	// newest meta page is damaged or it is an older copy (see the commit
	// mark in the package doc). Salvage copies what the file holds, which
	// accepts the loss.
	LostCommits int
	// Problems describes the first structural problems found (see
	// Salvage); empty for a sound file. NumProblems counts them all.
	Problems    []string
	NumProblems int
	// Kept is where the damaged file is kept, beside the fresh one; empty
	// when the file was sound and left as it was.
	Kept string
}

// Sound reports whether the file's structure was found sound, so that
// Salvage left it as it was.
func (r SalvageReport) Sound() bool { return r.NumProblems == 0 }

// keptSuffix starts the name, after the queue file's, that Salvage gives
// the damaged file it replaces; the time of the salvage follows.
const keptSuffix = ".damaged-"

// salvageSuffix starts the name, after the queue file's, of the fresh file
// a salvage writes before it takes the path; a random part follows. One
// left by a crash is removed by the next Open (see removeLeftovers).
const salvageSuffix = ".salvage"

// Salvage recovers the queue file at path when its structure is damaged,
// which Open refuses (ErrDamaged): it reads the file without bbolt, page by
// page, following its tree as the last commit left it, and copies every
// record that decodes (its checksum shows it intact) into a fresh file,
// byte for byte, with the supplied keys and the clock's mark. The fresh
// file takes the path; the damaged one is kept beside it, named path +
// ".damaged-" and the time. A record found twice is copied once; a record
// that does not decode is counted, not copied. A file whose structure is
// sound is left as it was: a damaged record in it is Open's to quarantine.
// A file that lacks commits the queue acknowledged (see the commit mark in
// the package doc) is not sound: Salvage copies what it holds, which
// accepts the loss (SalvageReport.LostCommits).
//
// The tree's copy of a record is the current one. A file also holds older
// copies, on the pages bbolt freed, and copies of records since discarded
// or removed after KeepSettled; those never come back. Only where the tree
// lost pages (a damaged branch, a page the free list holds too) does
// Salvage copy records from pages outside the tree, and only those the
// tree holds no copy of and the file's trace of removed records does not
// name, the newest copy of each (SalvageReport.Orphans, Stale).
//
// Salvage never writes to the damaged file and never adds a record: it may
// lose what the damage destroyed, and it copies the records as they were
// stored, so one left in flight returns to pending at the next Open, as
// after a crash. The fresh file issues no ID again. It takes the file's lock (Options.LockTimeout), so the
// queue must not be open; of Options only LockTimeout is read.
func Salvage(path string, opts Options) (SalvageReport, error) {
	opts.ReadOnly = false
	o, err := opts.withDefaults()
	if err != nil {
		return SalvageReport{}, err
	}
	lf, err := lock(path, o)
	if err != nil {
		return SalvageReport{}, err
	}
	defer lf.Close()
	return salvageLocked(path, o, lf)
}

// salvageLocked is Salvage once the file's lock file lf is locked.
func salvageLocked(path string, o Options, lf *os.File) (SalvageReport, error) {
	s, err := readSalvage(path, lf)
	if err != nil || s.rep.Sound() {
		return s.rep, err
	}
	if err := s.write(path, o, lf); err != nil {
		return s.rep, err
	}
	return s.rep, nil
}

// salvaged is what a salvage read.
type salvaged struct {
	rep      SalvageReport
	records  map[ID]salvagedRecord // the tree's, then those admitted from outside it
	inTree   map[ID]bool           // the IDs the tree holds, readable or not
	outside  map[ID]salvagedRecord // the furthest-on copy found outside the tree
	gone     goneSet               // the gone ranges (see markGone)
	goneKept bool                  // the file keeps them
	seq      uint64                // the records bucket's sequence
	hwm      int64                 // the clock's mark, in nanoseconds
}

type salvagedRecord struct {
	r    *Record
	data []byte // as stored
}

// readSalvage walks the file at path (see walker) and collects its
// records; lf is its lock file, which holds the commit mark.
func readSalvage(path string, lf *os.File) (s *salvaged, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("queue: salvage: %w", err)
	}
	defer f.Close()
	w, ok, err := newWalker(f)
	if err != nil {
		return nil, fmt.Errorf("queue: salvage: %w", err)
	}
	if !ok {
		return nil, fmt.Errorf("%w: %s: no valid bbolt meta page: nothing to salvage", ErrDamaged, path)
	}
	s = &salvaged{records: map[ID]salvagedRecord{}, inTree: map[ID]bool{}, outside: map[ID]salvagedRecord{}}
	w.onRecord = func(k, v []byte, inTree bool) {
		if inTree {
			s.record(w, k, v)
		} else {
			s.outsider(k, v)
		}
	}
	var schema uint64
	w.onMeta = func(k, v []byte) {
		if r, ok := parseGone(k, v); ok {
			s.gone = append(s.gone, r) // in key order, so sorted
			return
		}
		switch {
		case len(v) != 8:
		case string(k) == string(metaGoneKept):
			s.goneKept = true
		case string(k) == string(metaHWM):
			s.hwm = max(s.hwm, int64(binary.BigEndian.Uint64(v)))
		case string(k) == string(metaSchema):
			schema = binary.BigEndian.Uint64(v)
		}
	}
	defer func() {
		// The walk checks every bound; a panic would be a bug in it, and
		// what was read so far is still worth saving.
		if p := recover(); p != nil {
			w.problem("the walk stopped: %v", p)
		}
		s.rep.Problems, s.rep.NumProblems = w.issues, w.nIssues
	}()
	if n := lostCommits(lf, w.meta.txid); n > 0 {
		s.rep.LostCommits = int(n)
		w.problem("%d acknowledged commit%s lost: the file's last commit is %d, the queue acknowledged %d", n, plural(n), w.meta.txid, w.meta.txid+n)
	}
	w.walk()
	w.orphans(s.outsider)
	s.admit(w)
	if schema != schemaVersion && len(s.records)+s.rep.Unreadable > 0 {
		w.problem("layout version %d, want %d", schema, schemaVersion) // Open refuses it
	}
	return s, nil
}

// record collects the record stored under key k as v, in the tree.
func (s *salvaged) record(w *walker, k, v []byte) {
	if len(k) != 8 {
		w.problem("records: key %x is not an ID", k)
	} else {
		s.inTree[ID(binary.BigEndian.Uint64(k))] = true
	}
	r, err := decodeRecord(v)
	if err != nil {
		s.rep.Unreadable++
		return
	}
	s.inTree[r.ID] = true
	if len(k) == 8 && ID(binary.BigEndian.Uint64(k)) != r.ID {
		w.problem("records: key %x holds record %d", k, r.ID) // the record's checksum covers its ID; the key's nothing
	}
	old, dup := s.records[r.ID]
	if dup {
		s.rep.Duplicates++
		if !furtherOn(r, old.r) {
			return
		}
	}
	s.records[r.ID] = salvagedRecord{r: r, data: v}
}

// outsider collects the record stored under key k as v on a page outside
// the tree: a page the tree lost, or one both free and in the tree. Such a
// copy may be older than the record's last, or of a record since removed;
// only admit decides whether it is copied.
func (s *salvaged) outsider(k, v []byte) {
	r, err := decodeRecord(v)
	if err != nil || len(k) != 8 || ID(binary.BigEndian.Uint64(k)) != r.ID {
		return
	}
	if old, ok := s.outside[r.ID]; !ok || furtherOn(r, old.r) {
		s.outside[r.ID] = salvagedRecord{r: r, data: v}
	}
}

// admit adds to the records the copies found outside the tree that are
// the newest evidence of a record: the tree holds no copy of it, readable
// or not (the tree's is the newer); the tree lost pages where its ID
// belongs; the gone ranges, kept by the file and read whole, do not name
// it (it was not discarded nor swept); and it was issued (the records
// bucket's sequence). Of several such copies the furthest on is taken. A copy that
// fails any of these is counted Stale: with no trace of removals to go
// by, none is admitted, since a record cut off the tree cannot be told from
// one an operator discarded.
func (s *salvaged) admit(w *walker) {
	trace := s.goneKept && w.whole(bucketMeta)
	if rec := w.buckets[string(bucketRecords)]; rec != nil {
		s.seq = rec.seq
	}
	for id, sr := range s.outside {
		switch {
		case s.inTree[id], !trace, s.gone.has(id), s.seq > 0 && uint64(id) > s.seq, !w.unsureAt(bucketRecords, idKey(id)):
			s.rep.Stale++
		default:
			s.records[id] = sr
			s.rep.Orphans++
		}
	}
	for _, sr := range s.records {
		for _, t := range [...]time.Time{sr.r.EnqueuedAt, sr.r.LastAttemptAt, sr.r.SettledAt} {
			s.hwm = max(s.hwm, binenc.Nanos(t))
		}
	}
}

// furtherOn reports whether a is further on in its life than b, two copies
// of one record. Settled comes after unsettled; a settled record changes
// only to note its Resubmit. An unsettled record's doubt is never cleared,
// nor, but by the never-sent result of the lease that set it, its
// FirstSentAt; then comes the later lease, and a lease's result after the
// lease (pending after in flight). Where the clock went back the order of
// leases is only as good as the clock, and the copy kept on a tie is the
// one in doubt, which is the safe side.
func furtherOn(a, b *Record) bool {
	switch {
	case a.State.Settled() != b.State.Settled():
		return a.State.Settled()
	case a.State.Settled() && (a.ResubmittedAs != 0) != (b.ResubmittedAs != 0):
		return a.ResubmittedAs != 0
	case a.State.Settled():
		return a.SettledAt.After(b.SettledAt)
	case a.InDoubt != b.InDoubt:
		return a.InDoubt
	case a.FirstSentAt.IsZero() != b.FirstSentAt.IsZero():
		return !a.FirstSentAt.IsZero()
	case !a.LastAttemptAt.Equal(b.LastAttemptAt):
		return a.LastAttemptAt.After(b.LastAttemptAt)
	case a.State != b.State:
		return a.State == Pending
	}
	return a.NumAttempts > b.NumAttempts
}

// write writes the records into a fresh file, then puts it in path's place
// and keeps the damaged file beside it; lf is the lock file, whose commit
// mark it resets for the fresh file.
func (s *salvaged) write(path string, o Options, lf *os.File) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+salvageSuffix+"-*")
	if err != nil {
		return fmt.Errorf("queue: salvage: %w", err)
	}
	tmp := f.Name()
	f.Close()
	if err := s.fill(tmp, o); err != nil {
		os.Remove(tmp)
		return err
	}
	kept := path + keptSuffix + o.now().UTC().Format("20060102T150405.000000000Z")
	// A link (or a copy) keeps the damaged file and the rename replaces it
	// at once: a crash between them leaves the damaged file at path, never
	// no file, which the next Open would take for a new, empty queue.
	if err := keep(path, kept); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("queue: salvage: keep the damaged file: %w", err)
	}
	if err := resetMark(lf); err != nil {
		os.Remove(tmp)
		os.Remove(kept)
		return fmt.Errorf("queue: salvage: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		os.Remove(kept)
		return fmt.Errorf("queue: salvage: %w", err)
	}
	syncDir(path)
	s.rep.Kept, s.rep.Recovered = kept, len(s.records)
	return nil
}

// keep makes kept a name of the file at path: a hard link, or a copy where
// the file system has none.
func keep(path, kept string) error {
	if os.Link(path, kept) == nil {
		return nil
	}
	src, err := os.Open(path)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(kept, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, src)
	if err == nil {
		err = dst.Sync()
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(kept)
	}
	return err
}

// fill writes the records, their supplied keys, the layout version, the
// clock's mark, the records' sequence and their gone ranges into the new
// file at path, in one commit.
func (s *salvaged) fill(path string, o Options) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: o.LockTimeout, OpenFile: o.openFile})
	if err != nil {
		return fmt.Errorf("queue: salvage: %w", err)
	}
	ids := make([]ID, 0, len(s.records))
	for id := range s.records {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	// No ID is issued again: not a record's, nor a removed one's.
	seq := s.seq
	if n := len(ids); n > 0 {
		seq = max(seq, uint64(ids[n-1]))
	}
	if n := len(s.gone); n > 0 {
		seq = max(seq, uint64(s.gone[n-1].last))
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := open(tx)
		if err != nil {
			return err
		}
		if err := putUint(b.meta, metaSchema, schemaVersion); err != nil {
			return err
		}
		if err := putUint(b.meta, metaHWM, uint64(s.hwm)); err != nil {
			return err
		}
		var kept gaps
		for _, id := range ids {
			sr := s.records[id]
			if err := b.records.Put(idKey(id), sr.data); err != nil {
				return err
			}
			kept.next(id)
			if in := sr.r.Intent; in != nil && in.KeySupplied() {
				if err := b.keys.Put([]byte(in.Key()), idKey(id)); err != nil {
					return err
				}
			}
		}
		if err := b.records.SetSequence(seq); err != nil {
			return err
		}
		return b.traceGone(&kept)
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("queue: salvage: write the fresh file: %w", err)
	}
	return nil
}
