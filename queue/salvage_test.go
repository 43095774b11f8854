package queue

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/idem-go/idem"
)

// fillQueue enqueues n keyed POSTs over four lanes into a new queue file at
// path, closes it, and returns the file's bytes and each record's stored
// bytes.
func fillQueue(t *testing.T, path string, n int) ([]byte, map[ID][]byte) {
	t.Helper()
	q, err := Open(path, Options{})
	require.NoError(t, err)
	ctx := context.Background()
	for i := range n {
		_, err := q.Enqueue(ctx, post(t, url, i, idem.WithKey(fmt.Sprintf("key-%d", i)), idem.WithLane(fmt.Sprintf("lane-%d", i%4))))
		require.NoError(t, err)
	}
	require.NoError(t, q.Close())
	stored := storedRecords(t, path)
	require.Len(t, stored, n)
	file, err := os.ReadFile(path)
	require.NoError(t, err)
	return file, stored
}

// storedRecords reads every record of the sound file at path through
// bbolt, checking that each is stored under its own ID.
func storedRecords(t *testing.T, path string) map[ID][]byte {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	require.NoError(t, err)
	defer db.Close()
	out := map[ID][]byte{}
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRecords).ForEach(func(k, v []byte) error {
			id := ID(binary.BigEndian.Uint64(k))
			if got, ok := storedID(v); ok && got != id {
				return fmt.Errorf("key %d holds record %d", id, got)
			}
			out[id] = bytes.Clone(v)
			return nil
		})
	}))
	return out
}

// walkSound walks file, a sound queue file, and returns the walker.
func walkSound(t *testing.T, file []byte) *walker {
	t.Helper()
	path := filepath.Join(t.TempDir(), "walk.db")
	require.NoError(t, os.WriteFile(path, file, 0o600))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	w, ok, err := newWalker(f)
	require.NoError(t, err)
	require.True(t, ok)
	w.walk()
	require.Zero(t, w.nIssues, "%v", w.issues)
	return w
}

// keyOffsets returns where in file, a sound queue file, the key of each
// record sits in a page of the tree (not a freed page).
func keyOffsets(t *testing.T, file []byte) map[ID]int64 {
	t.Helper()
	w := walkSound(t, file)
	ps := int64(w.meta.pageSize)
	out := map[ID]int64{}
	for id := range w.seen {
		off := int64(id) * ps
		if id < 2 || off+ps > int64(len(file)) {
			continue
		}
		p := file[off : off+ps]
		if binary.NativeEndian.Uint16(p[8:]) != leafPage {
			continue
		}
		for i := range int(binary.NativeEndian.Uint16(p[10:])) {
			at := pageHeader + i*elemSize
			pos, ks := int(binary.NativeEndian.Uint32(p[at+4:])), int(binary.NativeEndian.Uint32(p[at+8:]))
			if ks != 8 || at+pos+8 > len(p) || !bytes.HasPrefix(p[at+pos+8:], []byte(recordMagic)) {
				continue
			}
			out[ID(binary.BigEndian.Uint64(p[at+pos:]))] = off + int64(at+pos)
		}
	}
	return out
}

// TestFlippedKeyNeverWritten: one flipped bit in the key of one record of
// 300 leaves the key disagreeing with its record. Open refuses to write to
// the file (ErrDamaged) and leaves it as it is; it opens ReadOnly; Salvage
// recovers all 300 records byte for byte into a fresh file, which opens,
// and keeps the damaged file beside it.
func TestFlippedKeyNeverWritten(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "q.db")
	file, stored := fillQueue(t, path, 300)
	offs := keyOffsets(t, file)
	require.Len(t, offs, 300)
	for _, bit := range []uint{0, 9, 62} { // the next ID, a later one, and one far out of order
		t.Run(fmt.Sprintf("bit %d", bit), func(t *testing.T) {
			damaged := bytes.Clone(file)
			off := offs[150] + 7 - int64(bit/8)
			damaged[off] ^= 1 << (bit % 8)
			require.NoError(t, os.WriteFile(path, damaged, 0o600))

			_, err := Open(path, Options{LockTimeout: time.Second})
			require.ErrorIs(t, err, ErrDamaged, "a writer refuses the file")
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			require.True(t, bytes.Equal(damaged, got), "nothing was written to the damaged file")

			ro, err := Open(path, Options{ReadOnly: true})
			require.NoError(t, err, "it opens ReadOnly")
			c, err := ro.Counts(context.Background())
			require.NoError(t, err)
			assert.LessOrEqual(t, c[Pending], 300)
			require.NoError(t, ro.Close())

			rep, err := Salvage(path, Options{})
			require.NoError(t, err)
			assert.Equal(t, 300, rep.Recovered, "%+v", rep)
			assert.Zero(t, rep.Unreadable)
			assert.False(t, rep.Sound())
			kept, err := os.ReadFile(rep.Kept)
			require.NoError(t, err, "the damaged file is kept")
			assert.True(t, bytes.Equal(damaged, kept))
			assert.Equal(t, stored, storedRecords(t, path), "every record, byte for byte")

			q := reopen(t, path, Options{})
			c, err = q.Counts(context.Background())
			require.NoError(t, err)
			assert.Equal(t, 300, c[Pending])
			require.NoError(t, q.Close())
			again, err := Salvage(path, Options{})
			require.NoError(t, err)
			assert.True(t, again.Sound(), "a salvaged file is sound: %v", again.Problems)
			assert.Empty(t, again.Kept, "a sound file is left as it is")
			require.NoError(t, os.Remove(rep.Kept))
		})
	}
}

// TestOpenSalvagesDamaged: with Options.SalvageDamaged, Open recovers a
// file whose structure is damaged and opens the fresh one, with every
// record; without it, it refuses the file.
func TestOpenSalvagesDamaged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	file, stored := fillQueue(t, path, 50)
	file[keyOffsets(t, file)[20]+7] ^= 0x40
	require.NoError(t, os.WriteFile(path, file, 0o600))
	_, err := Open(path, Options{})
	require.ErrorIs(t, err, ErrDamaged)

	var reports []SalvageReport
	q := reopen(t, path, Options{SalvageDamaged: func(r SalvageReport) { reports = append(reports, r) }})
	require.Len(t, reports, 1, "the report reaches the application")
	assert.Equal(t, 50, reports[0].Recovered)
	assert.FileExists(t, reports[0].Kept)
	c, err := q.Counts(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 50, c[Pending])
	require.NoError(t, q.Close())
	assert.Equal(t, stored, storedRecords(t, path))
}

// TestBoltPanicBecomesDamaged: a write into a page whose keys are out of
// order makes bbolt panic in its own commit. The panic reaches the caller
// as ErrDamaged, not as a crash, and the store writes nothing after it.
func TestBoltPanicBecomesDamaged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	file, stored := fillQueue(t, path, 300)
	damaged := bytes.Clone(file)
	damaged[keyOffsets(t, file)[1]+7] ^= 1 // key 1 reads 0
	require.NoError(t, os.WriteFile(path, damaged, 0o600))
	// Open refuses such a file; this store is made by hand, as Open's
	// check would be if it missed the damage.
	o, err := Options{}.withDefaults()
	require.NoError(t, err)
	db, err := openDB(path, o)
	require.NoError(t, err)
	st := &boltStore{path: path, opts: o}
	st.synced.L = &st.syncMu
	st.adopt(db)
	st.commits.committed = st.madeDurable
	var errs []error
	for id := ID(1); id <= 300 && (len(errs) == 0 || errs[len(errs)-1] == nil); id++ {
		// As a drainer's commits would: each record rewritten in turn.
		errs = append(errs, st.write(func(tx *bolt.Tx) error {
			b, err := open(tx)
			if err != nil {
				return err
			}
			return b.records.Put(idKey(id), stored[id])
		}))
	}
	last := errs[len(errs)-1]
	require.ErrorIs(t, last, ErrDamaged, "a panic inside bbolt becomes ErrDamaged")
	assert.Contains(t, last.Error(), "panicked")
	called := false
	err = st.write(func(*bolt.Tx) error { called = true; return nil })
	assert.ErrorIs(t, err, ErrDamaged, "the store writes nothing after it")
	assert.False(t, called, "not even a transaction")
	assert.NoError(t, st.view(func(*bolt.Tx) error { return nil }), "reads go on")
	require.NoError(t, st.db.Close(), "the file closes")
}

// debugf logs when QUEUE_DAMAGE_DEBUG is set.
func debugf(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("QUEUE_DAMAGE_DEBUG") != "" {
		t.Logf(format, args...)
	}
}

// envInt reads a positive integer from the environment, or returns def.
func envInt(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "%s", name)
	require.Positive(t, n, "%s", name)
	return n
}

// damageKind is one way of damaging a queue file.
type damageKind int

const (
	flipKey  damageKind = iota // one bit of a record's key, in a page of the tree
	flipAny                    // one bit anywhere in the file
	burstAny                   // 1 to 64 random bytes anywhere in the file
	numDamage
)

func (k damageKind) String() string {
	return [...]string{"key bit", "any bit", "burst"}[k]
}

// damage returns a damaged copy of file.
func damage(rnd *rand.Rand, kind damageKind, file []byte, keys []int64) []byte {
	d := bytes.Clone(file)
	switch kind {
	case flipKey:
		d[keys[rnd.IntN(len(keys))]+int64(rnd.IntN(8))] ^= 1 << rnd.IntN(8)
	case flipAny:
		d[rnd.IntN(len(d))] ^= 1 << rnd.IntN(8)
	case burstAny:
		at := rnd.IntN(len(d))
		for i := range min(1+rnd.IntN(64), len(d)-at) {
			d[at+i] = byte(rnd.Uint32())
		}
	}
	return d
}

// TestDamageProperty damages a real queue file of N records in random
// ways (a bit of a record's key, a bit anywhere, a burst anywhere) and
// checks, for each case: no panic escapes; Open works or gives ErrDamaged,
// and a queue that opens drains, enqueues and reopens without one;
// Salvage (of a fresh damaged copy) leaves a file whose every readable
// record is byte-equal to what was enqueued, none twice, none added, and
// which opens. It logs how many records the damage cost.
//
// The default run is a few hundred cases; QUEUE_DAMAGE_CASES sets the
// number, QUEUE_DAMAGE_N the records (default 100), QUEUE_DAMAGE_SEED the
// seed, QUEUE_DAMAGE_KIND=1 limits the cases to one kind (0 key bit, 1 any
// bit, 2 burst), and QUEUE_DAMAGE_DEBUG=1 logs each case that lost more
// than one record:
//
//	QUEUE_DAMAGE_CASES=1000 QUEUE_DAMAGE_N=300 QUEUE_DAMAGE_KIND=1 go test -run TestDamageProperty -v ./queue
func TestDamageProperty(t *testing.T) {
	cases := envInt(t, "QUEUE_DAMAGE_CASES", 240)
	n := envInt(t, "QUEUE_DAMAGE_N", 100)
	seed := uint64(envInt(t, "QUEUE_DAMAGE_SEED", 1))
	kind := damageKind(-1)
	if v := os.Getenv("QUEUE_DAMAGE_KIND"); v != "" {
		k, err := strconv.Atoi(v)
		require.NoError(t, err)
		kind = damageKind(k)
	}
	dir := t.TempDir()
	file, stored := fillQueue(t, filepath.Join(dir, "pristine.db"), n)
	var keys []int64
	for _, off := range keyOffsets(t, file) {
		keys = append(keys, off)
	}
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request, body string, seen int) { w.WriteHeader(http.StatusCreated) })
	rnd := rand.New(rand.NewPCG(seed, seed))

	type tally struct{ cases, damagedOpen, salvaged, lostCases, lost int }
	tallies := make([]tally, numDamage)
	for i := range cases {
		k := kind
		if k < 0 {
			k = damageKind(i % int(numDamage))
		}
		d := damage(rnd, k, file, keys)
		path := filepath.Join(dir, fmt.Sprintf("case-%d.db", i))
		name := fmt.Sprintf("case %d (%s)", i, k)
		tl := &tallies[k]
		tl.cases++
		if openDamaged(t, name, path, d, srv.URL, n) {
			tl.damagedOpen++
		}
		recovered, didSalvage := salvageDamaged(t, name, path, d, stored)
		if didSalvage {
			tl.salvaged++
		}
		if lost := n - recovered; lost > 1 {
			debugf(t, "%s: lost %d (salvaged %v)", name, lost, didSalvage)
		}
		if lost := n - recovered; lost > 0 {
			tl.lostCases++
			tl.lost += lost
		}
		if t.Failed() {
			return
		}
	}
	for k, tl := range tallies {
		if tl.cases > 0 {
			t.Logf("%s: %d cases of %d records: Open gave ErrDamaged in %d, Salvage rewrote %d; %d cases lost records, %d records lost in all",
				damageKind(k), tl.cases, n, tl.damagedOpen, tl.salvaged, tl.lostCases, tl.lost)
		}
	}
}

// openDamaged writes d at path and opens it for writing: it must open or
// give ErrDamaged; a queue that opens must drain, enqueue and reopen with
// no other error and no more records than n+1. It reports whether Open
// gave ErrDamaged.
func openDamaged(t *testing.T, name, path string, d []byte, srvURL string, n int) (refused bool) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("%s: panic: %v", name, p)
		}
	}()
	require.NoError(t, os.WriteFile(path, d, 0o600))
	defer os.Remove(path)
	defer os.Remove(path + lockSuffix)
	q, err := Open(path, Options{idle: time.Millisecond, rand: func() float64 { return 0.5 }, Client: &idem.Client{}, Workers: 8})
	if err != nil {
		if !errors.Is(err, ErrDamaged) {
			t.Errorf("%s: Open: %v, want nil or ErrDamaged", name, err)
		}
		return true
	}
	ok := func(what string, err error) {
		if err != nil && !errors.Is(err, ErrDamaged) && !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: %s: %v", name, what, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- q.Run(ctx) }()
	id, err := q.Enqueue(ctx, post(t, srvURL, n+1, idem.WithKey("new"), idem.WithLane("new")))
	ok("Enqueue", err)
	if err == nil {
		_, err = q.Wait(ctx, id)
		ok("Wait for the new record", err)
	}
	for id := ID(1); id <= 4; id++ { // the heads of the four lanes: the drainer reads them first
		r, err := q.Get(context.Background(), id)
		ok("Get", err)
		if err == nil && r.Intent != nil {
			r.Intent = nil
		}
	}
	list, err := q.List(context.Background(), 0, 0, n+10)
	ok("List", err)
	if len(list) > n+1 {
		t.Errorf("%s: %d records listed, %d enqueued", name, len(list), n+1)
	}
	require.NoError(t, q.Close())
	cancel()
	if err := <-done; err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrDamaged) {
		t.Errorf("%s: Run: %v", name, err)
	}
	q, err = Open(path, Options{})
	if err != nil {
		ok("reopen", err)
		return false
	}
	c, err := q.Counts(context.Background())
	ok("Counts", err)
	total := 0
	for _, v := range c {
		total += v
	}
	if total > n+1 {
		t.Errorf("%s: %d records after reopen, %d enqueued", name, total, n+1)
	}
	require.NoError(t, q.Close())
	return false
}

// salvageDamaged writes d at path, salvages it, and checks the file left:
// every record that reads is byte-equal to what was enqueued, under its own
// ID, once. It returns how many records are intact, and whether Salvage
// rewrote the file.
func salvageDamaged(t *testing.T, name, path string, d []byte, stored map[ID][]byte) (intact int, salvaged bool) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("%s: panic: %v", name, p)
		}
	}()
	require.NoError(t, os.WriteFile(path, d, 0o600))
	defer os.Remove(path)
	defer os.Remove(path + lockSuffix)
	rep, err := Salvage(path, Options{})
	if rep.Kept != "" {
		defer os.Remove(rep.Kept)
	}
	if err != nil {
		if !errors.Is(err, ErrDamaged) {
			t.Errorf("%s: Salvage: %v, want nil or ErrDamaged", name, err)
		}
		debugf(t, "%s: Salvage: %v", name, err)
		return 0, false // no meta page to go by
	}
	if rep.Sound() {
		// Left as it was: a record whose bytes are damaged is Open's to
		// quarantine; the others are intact.
		q, err := Open(path, Options{})
		if err != nil {
			assert.ErrorIs(t, err, ErrDamaged, "%s: Open of a file Salvage found sound", name)
			debugf(t, "%s: Open of a sound file: %v", name, err)
			return 0, false
		}
		require.NoError(t, q.Close())
	}
	for id, v := range storedRecords(t, path) {
		want, ok := stored[id]
		switch {
		case !ok:
			if _, decodes := storedID(v); decodes {
				t.Errorf("%s: record %d was never enqueued", name, id)
			}
		case bytes.Equal(v, want):
			intact++
		case !rep.Sound():
			t.Errorf("%s: salvaged record %d differs from what was enqueued", name, id)
		}
	}
	if !rep.Sound() {
		if n := len(stored) - intact; n > 1 {
			debugf(t, "%s: lost %d: %+v", name, n, rep)
		}
		assert.Equal(t, intact, rep.Recovered, "%s: %+v", name, rep)
		q, err := Open(path, Options{})
		require.NoError(t, err, "%s: Open of the salvaged file", name)
		require.NoError(t, q.Close())
	}
	return intact, !rep.Sound()
}
