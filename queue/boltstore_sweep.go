package queue

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/idem-go/idem/internal/binenc"
)

// sweepBatch bounds the records one sweep transaction removes, so that a
// large backlog does not hold the writer for long.
const sweepBatch = 1000

// compactSuffix starts the name, after the queue file's, of the temporary
// file a compaction writes; a random part follows.
const compactSuffix = ".compact"

// Compaction thresholds: a file over compactMinSize whose free pages are
// more than compactFreeShare of it is rewritten at Open.
const (
	compactMinSize   = 4 << 20
	compactFreeShare = 0.5
)

// Sweep is sweep for the running drainer, which races Close.
func (st *boltStore) Sweep(ctx context.Context, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return st.guard(func() error {
		_, err := st.sweep(now)
		return err
	})
}

// sweep removes settled records that settled KeepSettled or more ago, and
// returns how many.
func (st *boltStore) sweep(now time.Time) (int, error) {
	cutoff := binenc.Nanos(now.Add(-st.opts.KeepSettled))
	total := 0
	for {
		st.mu.Lock()
		var due []settledEntry
		for _, e := range st.idx.settled {
			if e.at > cutoff || len(due) == sweepBatch {
				break
			}
			due = append(due, e)
		}
		st.mu.Unlock()
		if len(due) == 0 {
			return total, nil
		}
		var removed []State
		err := st.write(func(tx *bolt.Tx) error {
			removed = removed[:0]
			b, err := open(tx)
			if err != nil {
				return err
			}
			for _, e := range due {
				r, _, err := b.get(e.id)
				if err != nil {
					return err
				}
				if r == nil || !r.State.Settled() {
					continue
				}
				if err := b.remove(r); err != nil {
					return err
				}
				removed = append(removed, r.State)
			}
			return nil
		})
		if err != nil {
			return total, err
		}
		st.mu.Lock()
		for _, s := range removed {
			st.idx.counts[s]-- // settled: in no lane, not counted as active
		}
		// One pass drops the batch's entries, and those whose record went
		// another way (discarded), so none is taken again.
		st.idx.dropSettled(due)
		st.mu.Unlock()
		total += len(removed)
	}
}

// maybeCompact rewrites the file when most of it is free space: bbolt
// reuses free pages but never gives them back. The copy is written beside
// the file, synced, and renamed over it, so a crash leaves either file
// whole.
func (st *boltStore) maybeCompact() error {
	fi, err := os.Stat(st.path)
	if err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	if fi.Size() < compactMinSize {
		return nil
	}
	free := int64(st.db.Stats().FreePageN) * int64(st.db.Info().PageSize)
	if float64(free) < compactFreeShare*float64(fi.Size()) {
		return nil
	}
	return st.compact()
}

func (st *boltStore) compact() error {
	f, err := os.CreateTemp(filepath.Dir(st.path), filepath.Base(st.path)+compactSuffix+"-*")
	if err != nil {
		return fmt.Errorf("queue: compact: %w", err)
	}
	tmp := f.Name()
	f.Close()
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{OpenFile: st.opts.openFile})
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("queue: compact: %w", err)
	}
	if err := compactSafely(dst, st.db); err != nil {
		dst.Close()
		os.Remove(tmp)
		return fmt.Errorf("queue: compact: %w", err)
	}
	if err := dst.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("queue: compact: %w", err)
	}
	if err := st.db.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("queue: compact: %w", err)
	}
	// bbolt's lock on the file is let go until openDB: the lock file keeps
	// other openers out meanwhile. The copy starts its transaction IDs
	// again, so the commit mark is reset before it takes the path; a reset
	// whose file stays is merely behind.
	if err := resetMark(st.lock); err != nil || os.Rename(tmp, st.path) != nil {
		os.Remove(tmp)
		db, oerr := openDB(st.path, st.opts)
		if oerr != nil {
			return oerr
		}
		st.adopt(db)
		return nil // compaction is an optimisation; the old file is intact
	}
	syncDir(st.path)
	db, err := openDB(st.path, st.opts)
	if err != nil {
		return err
	}
	st.adopt(db)
	return nil
}

// compactSafely is bolt.Compact, with a panic inside bbolt, which a page
// that the structure check passed but bbolt finds damaged can cause, turned
// into ErrDamaged.
func compactSafely(dst, src *bolt.DB) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %s: reading panicked: %v", ErrDamaged, src.Path(), p)
		}
	}()
	return bolt.Compact(dst, src, 16<<20)
}

// removeLeftovers removes the temporary files of compactions and salvages
// a crash or a power cut interrupted (a salvage's fresh file is as large as
// the queue's, and one is left at every salvage cut short). Open calls it
// holding the lock file, and every compaction and salvage runs under that
// lock, so none of them is another opener's work in progress.
func removeLeftovers(path string) {
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		return
	}
	base := filepath.Base(path)
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !(strings.HasPrefix(name, base+compactSuffix) || strings.HasPrefix(name, base+salvageSuffix+"-")) {
			continue
		}
		os.Remove(filepath.Join(filepath.Dir(path), name))
	}
}
