package powercut

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/queue"
)

// The property test: a queue on the power-cut file system, worked by
// enqueues, a drainer that settles and retries, discards and resubmits, with
// compactions and salvages now and then, and the power cut at a random
// change of it all, hundreds of times. After each cut the queue is reopened
// and must hold what it acknowledged:
//
//   - every Enqueue that returned is there, with its key;
//   - every record is where it was last seen, or further on its way
//     (pending may have settled; settled stays as it settled; its
//     attempts are never fewer than a reopen found);
//   - nothing is sent without its key, and no key for another record's body;
//   - no record whose Discard returned comes back, nor is sent again;
//   - a Resubmit happened whole or not at all;
//   - nothing is reported damaged: Open gives no ErrDamaged, no record is
//     quarantined. A cut is a clean loss of what was not synced, never damage.
//
// IDEM_SOAK=1 makes it a long run (powerCutsSoak); IDEM_POWERCUTS=N sets the
// number of cuts; IDEM_POWERCUT_SEED the seed, printed by every run.

const (
	powerCutsCI   = 300
	powerCutsSoak = 3000
	cutLanes      = 4
	// Every compactEvery-th round makes the file mostly free space, so that
	// the next Open compacts it under the cut; every salvageEvery-th plants
	// a commit mark ahead of the file and cuts the Salvage that accepts it.
	compactEvery = 25
	salvageEvery = 20
)

// cutModel is what the test knows the queue holds: what it acknowledged,
// by a call that returned or an event of a commit that returned.
type cutModel struct {
	mu sync.Mutex
	// recs are the records known to be in the queue, as last seen.
	recs map[queue.ID]*seen
	// discarded are the records whose Discard returned: gone for good.
	discarded map[queue.ID]string
	// undecided are the records whose Discard failed with the power going
	// off: its commit may have reached the disk all the same.
	undecided map[queue.ID]string
	// bodies maps a body's serial to the keys it was enqueued under: its
	// own and its resubmissions'. Every serial ever tried is here.
	bodies map[int][]string
	// keyOf maps each key to its body's serial.
	keyOf map[string]int
	// gone are keys that must not be sent again (Discard returned), and
	// violations what the transport saw wrong.
	gone       map[string]bool
	violations []string
	// sends are the attempts the server saw since the last check, whose
	// keys are checked against their bodies then: a Resubmit's key is
	// known only once it returns, and its copy may be sent before.
	sends     []send
	sendCount int
}

// send is one attempt the server saw.
type send struct {
	key    string
	serial int
}

// serialOf reads the serial a test body starts with: "serial=N ".
func serialOf(body []byte) (int, bool) {
	rest, ok := strings.CutPrefix(string(body[:min(len(body), 32)]), "serial=")
	if !ok {
		return 0, false
	}
	num, _, ok := strings.Cut(rest, " ")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(num)
	return n, err == nil
}

// seen is a record as the test last knew it.
type seen struct {
	key     string
	serial  int
	state   queue.State
	outcome idem.Outcome
	resubAs queue.ID
	// attempts is NumAttempts as a reopen found it: on the disk, so no
	// later reopen may find fewer.
	attempts int
}

func newCutModel() *cutModel {
	return &cutModel{
		recs: map[queue.ID]*seen{}, discarded: map[queue.ID]string{}, undecided: map[queue.ID]string{},
		bodies: map[int][]string{}, keyOf: map[string]int{}, gone: map[string]bool{},
	}
}

func (m *cutModel) violate(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.violations = append(m.violations, fmt.Sprintf(format, args...))
}

// cutServer answers the drainer's attempts without a network: most apply,
// some ask to retry, some refuse, so that records settle done and failed
// and retry; it checks each attempt's key against its body.
type cutServer struct {
	m   *cutModel
	mu  sync.Mutex
	rng *rand.Rand
}

func (s *cutServer) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	key := req.Header.Get(idem.DefaultKeyHeader)
	serial, ok := serialOf(body)
	s.m.mu.Lock()
	s.m.sends = append(s.m.sends, send{key: key, serial: serial})
	switch {
	case key == "":
		s.m.violations = append(s.m.violations, fmt.Sprintf("a request without its key: %q", body[:min(len(body), 40)]))
	case !ok:
		s.m.violations = append(s.m.violations, fmt.Sprintf("a request whose body names no serial: %q", body[:min(len(body), 40)]))
	case s.m.gone[key]:
		s.m.violations = append(s.m.violations, fmt.Sprintf("key %s sent after its record's Discard returned", key))
	}
	s.m.mu.Unlock()
	s.mu.Lock()
	roll := s.rng.IntN(10)
	s.mu.Unlock()
	status := http.StatusCreated
	switch {
	case roll < 2:
		status = http.StatusServiceUnavailable
	case roll < 4:
		status = http.StatusBadRequest
	}
	return &http.Response{
		StatusCode: status, Status: http.StatusText(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(`{"ok":true}`)),
		Request: req, ContentLength: 11,
	}, nil
}

// cutRun is one test's state across its rounds.
type cutRun struct {
	t      *testing.T
	p      *Remote
	path   string
	m      *cutModel
	rng    *rand.Rand
	opts   queue.Options
	serial int
	// span is the number of changes a round makes when no cut stops it, so
	// that a cut can be armed anywhere in the next one.
	span int64
	// figures for the report
	cuts, cutInOpen, compactionCuts, compacted, salvages, torn, landedSome, settles int
	// log is what the last rounds did, shown when one fails.
	log []string
}

// logf notes what a round did.
func (r *cutRun) logf(format string, args ...any) {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	r.log = append(r.log, fmt.Sprintf(format, args...))
	if len(r.log) > 400 {
		r.log = r.log[len(r.log)-200:]
	}
}

func TestPowerCutsKeepWhatTheQueueAcknowledged(t *testing.T) {
	n := powerCutsCI
	if os.Getenv("IDEM_SOAK") == "1" {
		n = powerCutsSoak
	}
	if v := os.Getenv("IDEM_POWERCUTS"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(t, err, "IDEM_POWERCUTS")
	}
	seed := rand.Uint64()
	if v := os.Getenv("IDEM_POWERCUT_SEED"); v != "" {
		var err error
		seed, err = strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "IDEM_POWERCUT_SEED")
	}
	t.Logf("seed %d (IDEM_POWERCUT_SEED=%d reruns it), %d cuts", seed, seed, n)

	p := mountT(t)
	m := newCutModel()
	r := &cutRun{
		t: t, p: p, path: filepath.Join(p.Dir(), "q.db"), m: m,
		rng:  rand.New(rand.NewPCG(seed, 1)),
		span: 200,
	}
	srv := &cutServer{m: m, rng: rand.New(rand.NewPCG(seed, 2))}
	r.opts = queue.Options{
		Client:      &idem.Client{HTTPClient: &http.Client{Transport: srv}},
		Policy:      idem.Policy{BaseDelay: time.Millisecond, MaxDelay: 4 * time.Millisecond},
		LockTimeout: 10 * time.Second,
	}
	start := time.Now()
	for round := 0; r.cuts < n; round++ {
		r.round(round)
		if t.Failed() {
			t.Logf("the last rounds:\n%s", strings.Join(r.log, "\n"))
			t.Fatalf("round %d (seed %d) failed", round, seed)
		}
	}
	entries, err := os.ReadDir(p.Dir())
	require.NoError(t, err)
	t.Logf("queue file %d bytes, %d files beside it", r.size(), len(entries)-1)
	t.Logf("%d cuts in %v (%d during Open, %d compactions under a cut of which %d took the path, %d salvages under a cut, %d torn writes, %d cuts that landed some pending writes), %d sends, %d settles seen, %d records known, %d discarded",
		r.cuts, time.Since(start).Round(time.Millisecond), r.cutInOpen, r.compactionCuts, r.compacted, r.salvages, r.torn, r.landedSome,
		m.sendCount, r.settles, len(m.recs), len(m.discarded))
}

// round opens the queue, checks it against the model, works it until the
// armed cut, and cuts.
func (r *cutRun) round(round int) {
	t := r.t
	r.logf("round %d", round)
	switch {
	case round > 0 && round%compactEvery == 0:
		r.bloat()
	case round > 0 && round%salvageEvery == 0:
		r.salvageUnderCut()
		return
	}
	// Some rounds cut the Open itself: its recovery and compaction write.
	if r.rng.IntN(8) == 0 || (round > 0 && round%compactEvery == 0) {
		span := int64(40)
		if round%compactEvery == 0 {
			span = 400 // a compaction writes some megabytes
		}
		size := r.size()
		r.p.Arm(1 + r.rng.Int64N(span))
		q, err := queue.Open(r.path, r.opts)
		r.logf("open under a cut (size %d): %v", size, err)
		if err == nil {
			// The Open finished before the cut: cut now.
			r.p.PowerOff()
			_ = q.Close()
		} else {
			require.True(t, r.p.IsOff(), "Open failed with the power on: %v", err)
			require.NotErrorIs(t, err, queue.ErrDamaged, "Open under a cut reported damage")
			r.cutInOpen++
		}
		r.cut()
		if round%compactEvery == 0 {
			r.compactionCuts++
			if r.size() < size/2 {
				r.compacted++
			}
		}
	}
	q := r.open()
	r.logf("opened, size %d", r.size())
	r.check(q)
	r.p.Arm(1 + r.rng.Int64N(r.span))
	before := r.p.Changes()
	r.work(q)
	if !r.p.IsOff() {
		r.span = max(50, (r.span+r.p.Changes()-before)/2)
	}
	r.p.PowerOff()
	_ = q.Close() // fails to write, with the power off; the cut follows
	r.cut()
}

// cut cuts the power by a random plan.
func (r *cutRun) cut() {
	plan := Plan{Rand: r.rng, Tear: r.rng.IntN(2) == 0}
	if r.rng.IntN(3) == 0 {
		plan.Land = r.rng.Float64()
	}
	rep := r.p.Cut(plan)
	r.logf("cut: %v (land %.2f)", rep, plan.Land)
	r.cuts++
	if rep.Torn {
		r.torn++
	}
	if rep.Landed > 0 {
		r.landedSome++
	}
}

// open opens the queue after a cut: it must open, and report no damage.
func (r *cutRun) open() *queue.Queue {
	q, err := queue.Open(r.path, r.opts)
	require.NoError(r.t, err, "Open after a clean cut")
	r.noLeftovers()
	return q
}

// noLeftovers checks that an Open left beside the queue only its lock file
// and the damaged files salvages keep: a compaction's or a salvage's
// temporary file, which a cut may leave, is removed.
func (r *cutRun) noLeftovers() {
	entries, err := os.ReadDir(r.p.Dir())
	require.NoError(r.t, err)
	base := filepath.Base(r.path)
	for _, e := range entries {
		if name := e.Name(); name != base && name != base+".lock" && !strings.HasPrefix(name, base+".damaged-") {
			r.t.Errorf("%s left beside the queue after Open", name)
		}
	}
}

// list returns every record in q.
func list(t *testing.T, q *queue.Queue) map[queue.ID]*queue.Record {
	ctx := context.Background()
	all := map[queue.ID]*queue.Record{}
	for _, s := range []queue.State{queue.Pending, queue.InFlight, queue.Done, queue.Failed, queue.Expired} {
		var after queue.ID
		for {
			recs, err := q.List(ctx, s, after, 500)
			require.NoError(t, err)
			for _, rec := range recs {
				all[rec.ID] = rec
				after = rec.ID
			}
			if len(recs) < 500 {
				break
			}
		}
	}
	return all
}

// check compares the reopened queue with the model, then takes what it
// holds as the model: what a reopened queue holds is on the disk.
func (r *cutRun) check(q *queue.Queue) {
	t := r.t
	m := r.m
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, v := range m.violations {
		t.Errorf("before the cut: %s", v)
	}
	m.violations = nil
	all := list(t, q)
	for id, w := range m.recs {
		got := all[id]
		if key, ok := m.undecided[id]; ok && got == nil {
			m.discarded[id] = key
			continue
		}
		if got == nil {
			t.Errorf("record %d (%s, last seen %s) lost", id, w.key, w.state)
			continue
		}
		if got.Intent == nil || got.Intent.Key() != w.key {
			t.Errorf("record %d: key %v, want %s", id, got.Intent, w.key)
		}
		if w.state.Settled() && (got.State != w.state || got.Outcome != w.outcome) {
			t.Errorf("record %d was seen %s/%s, is %s/%s", id, w.state, w.outcome, got.State, got.Outcome)
		}
		if got.NumAttempts < w.attempts {
			t.Errorf("record %d had %d attempts, has %d", id, w.attempts, got.NumAttempts)
		}
		if got.State == queue.InFlight {
			t.Errorf("record %d in flight after Open", id)
		}
		if w.resubAs != 0 && got.ResubmittedAs != w.resubAs {
			t.Errorf("record %d was resubmitted as %d, is as %d", id, w.resubAs, got.ResubmittedAs)
		}
	}
	for id, rec := range all {
		if rec.Damaged {
			t.Errorf("record %d reported damaged after a clean cut: %s", id, rec.Reason)
		}
		if key, ok := m.discarded[id]; ok {
			t.Errorf("record %d (%s) came back after its Discard returned", id, key)
			continue
		}
		if rec.Intent == nil {
			continue
		}
		key := rec.Intent.Key()
		serial, ok := m.keyOf[key]
		if !ok {
			// A Resubmit that did not return may have made a copy: its
			// original names it, and it has the original's body.
			body, _ := serialOf(rec.Intent.Body())
			if !r.namedCopy(all, id, body) {
				t.Errorf("record %d has key %s, never enqueued nor resubmitted", id, key)
				continue
			}
			serial = body
			m.keyOf[key] = serial
			m.bodies[serial] = append(m.bodies[serial], key)
		}
		if body, _ := serialOf(rec.Intent.Body()); body != serial {
			t.Errorf("record %d has key %s of serial %d with the body of serial %d", id, key, serial, body)
		}
		if rec.ResubmittedAs != 0 {
			if next := all[rec.ResubmittedAs]; next == nil && m.discarded[rec.ResubmittedAs] == "" {
				t.Errorf("record %d resubmitted as %d, which is not there: half a Resubmit", id, rec.ResubmittedAs)
			}
		}
		m.recs[id] = &seen{key: key, serial: serial, state: rec.State, outcome: rec.Outcome, resubAs: rec.ResubmittedAs, attempts: rec.NumAttempts}
	}
	// A copy made by Resubmit has a key of its own for its original's body:
	// its original must name it.
	named := map[queue.ID]bool{}
	for _, rec := range all {
		named[rec.ResubmittedAs] = true
	}
	for id, rec := range all {
		if rec.Intent == nil {
			continue
		}
		if keys := m.bodies[m.keyOf[rec.Intent.Key()]]; len(keys) > 0 && keys[0] != rec.Intent.Key() && !named[id] {
			// The original may have been discarded since: then nothing names it.
			if !r.originalDiscarded(rec.Intent.Key()) {
				t.Errorf("record %d is a resubmitted copy that no record names: half a Resubmit", id)
			}
		}
	}
	for id := range m.recs {
		if all[id] == nil {
			delete(m.recs, id)
		}
	}
	for _, sd := range m.sends {
		if serial, ok := m.keyOf[sd.key]; !ok || serial != sd.serial {
			t.Errorf("key %s sent with the body of serial %d, its own is %d (known %v)", sd.key, sd.serial, serial, ok)
		}
	}
	m.sendCount += len(m.sends)
	m.sends = nil
	clear(m.undecided)
}

// namedCopy reports whether record id, of body serial, is named by another
// record of the same body as its resubmission.
func (r *cutRun) namedCopy(all map[queue.ID]*queue.Record, id queue.ID, serial int) bool {
	for _, rec := range all {
		if rec.ResubmittedAs == id && rec.Intent != nil {
			if s, _ := serialOf(rec.Intent.Body()); s == serial {
				return true
			}
		}
	}
	return false
}

// originalDiscarded reports whether a discarded record had the body that
// key was made for. Called with m.mu held.
func (r *cutRun) originalDiscarded(key string) bool {
	serial := r.m.keyOf[key]
	for _, k := range r.m.discarded {
		if r.m.keyOf[k] == serial && k != key {
			return true
		}
	}
	return false
}

// enqueue enqueues a new intent; the model knows its key before the call,
// so that a record it leaves behind after a cut is recognised.
func (r *cutRun) enqueue(ctx context.Context, q *queue.Queue, size int) {
	r.serial++
	body := fmt.Appendf(nil, "serial=%d ", r.serial)
	if size > len(body) {
		body = append(body, make([]byte, size-len(body))...)
	}
	in, err := idem.NewIntent("POST", "https://api.example/pay", body, idem.WithLane(strconv.Itoa(r.rng.IntN(cutLanes))))
	require.NoError(r.t, err)
	r.m.mu.Lock()
	r.m.bodies[r.serial] = []string{in.Key()}
	r.m.keyOf[in.Key()] = r.serial
	r.m.mu.Unlock()
	id, err := q.Enqueue(ctx, in)
	r.logf("enqueue serial %d: %d %v", r.serial, id, err)
	if err != nil {
		require.True(r.t, r.p.IsOff(), "Enqueue failed with the power on: %v", err)
		return
	}
	r.m.mu.Lock()
	r.m.recs[id] = &seen{key: in.Key(), serial: r.serial, state: queue.Pending}
	r.m.mu.Unlock()
}

// pick returns a known record in one of states, 0 if none.
func (r *cutRun) pick(states ...queue.State) queue.ID {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	var ids []queue.ID
	for id, w := range r.m.recs {
		for _, s := range states {
			if w.state == s {
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 {
		return 0
	}
	slices.Sort(ids) // map order is random: sorted, a seed reruns the same picks
	return ids[r.rng.IntN(len(ids))]
}

// work runs the drainer and a random sequence of operations until they are
// done or the power goes off.
func (r *cutRun) work(q *queue.Queue) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	off := r.p.Off()
	go func() {
		select {
		case <-off:
			cancel()
		case <-ctx.Done():
		}
	}()
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		_ = q.Run(ctx)
	}()
	defer func() { <-drained }()
	defer cancel()

	ops := 1 + r.rng.IntN(12)
	for range ops {
		if r.p.IsOff() {
			return
		}
		switch k := r.rng.IntN(10); {
		case k < 5:
			r.enqueue(ctx, q, 16+r.rng.IntN(3000))
		case k < 7:
			id := r.pick(queue.Pending, queue.Done, queue.Failed, queue.Expired)
			if id == 0 {
				continue
			}
			r.m.mu.Lock()
			key := r.m.recs[id].key
			r.m.mu.Unlock()
			err := q.Discard(ctx, id)
			r.logf("discard %d: %v", id, err)
			switch {
			case err == nil:
				r.m.mu.Lock()
				delete(r.m.recs, id)
				r.m.discarded[id] = key
				r.m.gone[key] = true
				r.m.mu.Unlock()
			case errors.Is(err, queue.ErrInFlight):
			default:
				require.True(r.t, r.p.IsOff(), "Discard failed with the power on: %v", err)
				r.m.mu.Lock()
				r.m.undecided[id] = key
				r.m.mu.Unlock()
			}
		case k < 9:
			id := r.pick(queue.Failed)
			if id == 0 {
				continue
			}
			r.resubmit(ctx, q, id)
		default:
			r.waitSome(ctx, q)
		}
	}
	r.waitSome(ctx, q)
}

// resubmit resubmits failed record id. Its new key is not known before the
// call: a copy left behind by a cut is recognised by its body.
func (r *cutRun) resubmit(ctx context.Context, q *queue.Queue, id queue.ID) {
	newID, err := q.ForceResubmit(ctx, id)
	r.logf("resubmit %d: %d %v", id, newID, err)
	if err != nil {
		if !errors.Is(err, queue.ErrNotResubmittable) {
			require.True(r.t, r.p.IsOff(), "Resubmit failed with the power on: %v", err)
		}
		return
	}
	rec, err := q.Get(ctx, newID)
	if err != nil {
		require.True(r.t, r.p.IsOff(), "Get failed with the power on: %v", err)
		return
	}
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	old := r.m.recs[id]
	if old == nil {
		return
	}
	old.resubAs = newID
	key := rec.Intent.Key()
	r.m.keyOf[key] = old.serial
	r.m.bodies[old.serial] = append(r.m.bodies[old.serial], key)
	r.m.recs[newID] = &seen{key: key, serial: old.serial, state: queue.Pending}
}

// waitSome waits until every record known pending has settled, or the power
// goes off, and takes each settle as acknowledged.
func (r *cutRun) waitSome(ctx context.Context, q *queue.Queue) {
	r.m.mu.Lock()
	var ids []queue.ID
	for id, w := range r.m.recs {
		if !w.state.Settled() {
			ids = append(ids, id)
		}
	}
	r.m.mu.Unlock()
	for _, id := range ids {
		rec, err := q.Wait(ctx, id)
		if err != nil {
			if r.p.IsOff() {
				return
			}
			if errors.Is(err, queue.ErrDiscarded) {
				continue
			}
			require.NoError(r.t, err, "Wait with the power on")
		}
		// A record Wait returned is acknowledged, even as the power goes:
		// the queue reads no commit whose sync has not returned.
		r.m.mu.Lock()
		if w := r.m.recs[id]; w != nil {
			w.state, w.outcome = rec.State, rec.Outcome
		}
		r.log = append(r.log, fmt.Sprintf("settled %d %s", id, rec.State))
		r.m.mu.Unlock()
		r.settles++
	}
}

// The commit mark, as queue/commitmark.go writes it in the lock file: the
// test plants one ahead of the file to make Salvage do its work.
const markMagic = "iqcm"

func writeMarkAhead(t *testing.T, lock string, txid uint64) {
	b := binary.BigEndian.AppendUint64([]byte(markMagic), txid)
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
	f, err := os.OpenFile(lock, os.O_RDWR|os.O_CREATE, 0o600)
	require.NoError(t, err)
	_, err = f.WriteAt(b, 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
}

// salvageUnderCut makes the file lack commits the queue acknowledged (a
// mark ahead of it), so that Open refuses it and Salvage copies it into a
// fresh file, and cuts the power during that Salvage. After the cut, the
// file at the path is the old one (Open still refuses it: the test's damage,
// not the cut's; a Salvage with the power on then takes it) or the salvaged
// one, which must hold every record.
func (r *cutRun) salvageUnderCut() {
	t := r.t
	writeMarkAhead(t, r.path+".lock", 1<<40)
	_, err := queue.Open(r.path, r.opts)
	require.ErrorIs(t, err, queue.ErrDamaged, "a file behind its mark")
	r.p.Arm(1 + r.rng.Int64N(30))
	_, err = queue.Salvage(r.path, r.opts)
	if err != nil {
		require.True(t, r.p.IsOff(), "Salvage failed with the power on: %v", err)
	}
	r.salvages++
	r.cut()
	q, err := queue.Open(r.path, r.opts)
	if errors.Is(err, queue.ErrDamaged) {
		rep, serr := queue.Salvage(r.path, r.opts)
		require.NoError(t, serr, "Salvage with the power on")
		require.NotZero(t, rep.LostCommits, "the planted mark")
		q, err = queue.Open(r.path, r.opts)
	}
	require.NoError(t, err, "Open after a salvage and a cut")
	r.noLeftovers()
	r.check(q)
	require.NoError(t, q.Close())
	r.cleanDamaged()
}

// cleanDamaged removes the damaged files salvages keep, as an operator
// would, so that the directory does not grow.
func (r *cutRun) cleanDamaged() {
	entries, err := os.ReadDir(r.p.Dir())
	require.NoError(r.t, err)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".damaged-") {
			require.NoError(r.t, os.Remove(filepath.Join(r.p.Dir(), e.Name())))
		}
	}
	// A removal reaches the disk with the directory's sync: without it
	// a cut brings the files back, and they pile up.
	syncDir(r.t, r.p.Dir())
}

// syncDir syncs directory dir.
func syncDir(t *testing.T, dir string) {
	d, err := os.Open(dir)
	require.NoError(t, err)
	require.NoError(t, d.Sync())
	require.NoError(t, d.Close())
}

// bloat makes the file mostly free space, so that the next Open compacts
// it: large records enqueued and settled, then discarded, all acknowledged
// with the power on.
func (r *cutRun) bloat() {
	t := r.t
	q := r.open()
	r.check(q)
	ctx := context.Background()
	var ids []queue.ID
	for range 40 {
		r.serial++
		body := append(fmt.Appendf(nil, "serial=%d ", r.serial), make([]byte, 128<<10)...)
		in, err := idem.NewIntent("POST", "https://api.example/pay", body, idem.WithLane("bloat"))
		require.NoError(t, err)
		r.m.mu.Lock()
		r.m.bodies[r.serial] = []string{in.Key()}
		r.m.keyOf[in.Key()] = r.serial
		r.m.mu.Unlock()
		id, err := q.Enqueue(ctx, in)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	for _, id := range ids {
		rec, err := q.Get(ctx, id)
		require.NoError(t, err)
		require.NoError(t, q.Discard(ctx, id))
		r.m.mu.Lock()
		r.m.discarded[id] = rec.Intent.Key()
		r.m.gone[rec.Intent.Key()] = true
		r.m.mu.Unlock()
	}
	require.NoError(t, q.Close())
	// Close synced the file; the directory too, for a cut to keep the
	// bloated file.
	syncDir(t, r.p.Dir())
}

// size is the queue file's size, 0 if there is none.
func (r *cutRun) size() int64 {
	fi, err := os.Stat(r.path)
	if err != nil {
		return 0
	}
	return fi.Size()
}
