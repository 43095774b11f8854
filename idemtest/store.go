package idemtest

import (
	"crypto/sha256"
	"net/http"
	"time"
)

// recordState is where a key's record stands.
type recordState int

const (
	stateClaimed recordState = iota + 1
	stateCompleted
)

// response is an answer as the server means it: what is stored for replay
// and what is written unless a fault replaces it.
type response struct {
	status int
	// header holds the fields a wrapped handler set, nil on the fixed
	// routes; contentType, when set, overrides its Content-Type.
	header      http.Header
	body        []byte
	contentType string
	replayed    bool
}

// record is the server's memory of one key. Its fields are guarded by
// layer.mu.
type record struct {
	fingerprint [sha256.Size]byte
	state       recordState
	// owner changes on every claim and takeover; completion checks it so an
	// overtaken request cannot apply its effect (a fencing token).
	owner      uint64
	leaseUntil time.Time
	resp       response // set when completed; body never mutated after
	// created is when the key was first claimed: the server's first sight
	// of it, from which Options.Retention counts. A takeover keeps it.
	created time.Time
}

// claimKind is what a claim found.
type claimKind int

const (
	// claimOwned: this request owns execution.
	claimOwned claimKind = iota + 1
	// claimReplay: the key completed; resp holds the stored answer.
	claimReplay
	// claimBusy: another request holds a live claim.
	claimBusy
	// claimMismatch: the key was used with another fingerprint.
	claimMismatch
)

// claim is the result of claimLocked.
type claim struct {
	kind  claimKind
	owner uint64   // when kind is claimOwned
	resp  response // when kind is claimReplay
}

// claimLocked applies the claim step of the protocol to key at time now.
// The caller holds s.mu, which makes check and insert one atomic step.
func (s *layer) claimLocked(key string, fp [sha256.Size]byte, now time.Time) claim {
	rec, ok := s.records[key]
	if ok && rec.state == stateCompleted && !now.Before(rec.created.Add(s.opts.Retention)) {
		// Forgotten: from here on the key is a new request, which is how a
		// client that resends past the horizon causes a duplicate.
		delete(s.records, key)
		ok = false
	}
	if !ok {
		s.nextOwner++
		s.records[key] = &record{
			fingerprint: fp,
			state:       stateClaimed,
			owner:       s.nextOwner,
			leaseUntil:  now.Add(s.opts.Lease),
			created:     now,
		}
		return claim{kind: claimOwned, owner: s.nextOwner}
	}
	// The fingerprint is checked first: a different payload is a client
	// bug whatever state the record is in, and the draft answers it 422.
	if rec.fingerprint != fp {
		s.stats.Mismatches++
		return claim{kind: claimMismatch}
	}
	switch {
	case rec.state == stateCompleted:
		s.stats.Replays++
		resp := rec.resp
		resp.replayed = true
		return claim{kind: claimReplay, resp: resp}
	case now.Before(rec.leaseUntil):
		s.stats.Conflicts++
		return claim{kind: claimBusy}
	default:
		// The owner is presumed dead; the new owner token fences it out.
		s.nextOwner++
		rec.owner = s.nextOwner
		rec.leaseUntil = now.Add(s.opts.Lease)
		return claim{kind: claimOwned, owner: s.nextOwner}
	}
}

// completeLocked runs effect and completes key's record in one step, but
// only if the record still carries owner; otherwise the effect is not run
// and ok is false. The caller holds s.mu.
//
// An expired lease alone does not fence: if nobody took the claim over,
// the original owner is still the only executor and may finish.
func (s *layer) completeLocked(key string, owner uint64, effect func() response) (resp response, ok bool) {
	if !s.ownsLocked(key, owner) {
		s.stats.Fenced++
		return response{}, false
	}
	resp = effect()
	rec := s.records[key]
	rec.state = stateCompleted
	rec.resp = resp
	return resp, true
}

// releaseLocked deletes key's claim if owner still holds it, so that a
// retry after a failure before the effect executes. The caller holds s.mu.
func (s *layer) releaseLocked(key string, owner uint64) {
	if !s.ownsLocked(key, owner) {
		return
	}
	delete(s.records, key)
	s.stats.Released++
}

// effectLocked counts one business effect of a fixed route, by key and by
// payload, and returns its global sequence number. The caller holds s.mu.
func (s *layer) effectLocked(key string, body []byte) int {
	s.effectsByPayload[sha256.Sum256(body)]++
	return s.countEffectLocked(key)
}

// countEffectLocked counts one effect, under key when it is not "", and
// returns its global sequence number. The caller holds s.mu.
func (s *layer) countEffectLocked(key string) int {
	s.stats.Effects++
	if key != "" {
		s.effectsByKey[key]++
	}
	return s.stats.Effects
}

// ownsLocked reports whether owner still holds key's claim. The caller
// holds s.mu.
func (s *layer) ownsLocked(key string, owner uint64) bool {
	rec, ok := s.records[key]
	return ok && rec.state == stateClaimed && rec.owner == owner
}
