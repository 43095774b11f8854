package queue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/binenc"
	"github.com/idem-go/idem/internal/replay"
)

// ID identifies a record in a queue. IDs grow in enqueue order, which is the
// delivery order within a lane.
type ID uint64

func (id ID) String() string { return strconv.FormatUint(uint64(id), 10) }

// State is where a record is in its life.
type State uint8

// The states of a record: pending -> in flight -> done | failed | expired.
const (
	// Pending records wait for their next attempt.
	Pending State = iota + 1
	// InFlight records are leased: an attempt is under way. On Open, records
	// left in flight by a crash return to Pending.
	InFlight
	// Done records were applied (Outcome Applied or AlreadyApplied).
	Done
	// Failed records were refused by the server, could not be sent as they
	// are (idem.ErrInvalidRequest), or ran out of attempts; the
	// Outcome is NotApplied, or Unknown once an attempt left it in doubt
	// (ambiguous, a keyed 409, a resend by net/http). A record
	// found damaged is failed too, with Outcome Unknown (see
	// Record.Damaged).
	Failed
	// Expired records were not sent again because the server may have
	// forgotten their key (the horizon) or the intent grew too old. The
	// Outcome is NotApplied, or Unknown once an attempt left it in doubt
	// (ambiguous, a keyed 409, a resend by net/http).
	Expired
)

// String returns s's name, in snake_case: "pending", "in_flight", "done",
// "failed" or "expired", the one spelling idem writes for a state in JSON,
// idemq's output and arguments, and OpenTelemetry attributes.
func (s State) String() string {
	switch s {
	case Pending:
		return "pending"
	case InFlight:
		return "in_flight"
	case Done:
		return "done"
	case Failed:
		return "failed"
	case Expired:
		return "expired"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Settled reports whether s is final: Done, Failed or Expired.
func (s State) Settled() bool { return s == Done || s == Failed || s == Expired }

// states lists the valid states in order.
func states() [5]State { return [5]State{Pending, InFlight, Done, Failed, Expired} }

// Response is the stored part of the answer that settled a record, so that
// an application that restarted can still learn what happened.
type Response struct {
	// Status is the HTTP status.
	Status int
	// Header holds the headers worth keeping: Content-Type, Location, ETag
	// and the replay headers.
	Header http.Header
	// Body is the body, cut at Options.MaxResultBody bytes.
	Body []byte
	// Truncated reports that Body was cut: longer than
	// Options.MaxResultBody, or its reading failed part way.
	Truncated bool
}

// Replayed reports whether the response says it is a replay of an answer
// the server stored under the key (an Idempotent-Replayed header, or one of
// its other spellings, set to true), as idem.Result.Replayed does.
func (r *Response) Replayed() bool { return replay.Replayed(r.Header) }

// Record is a queued intent and what is known of it.
type Record struct {
	// ID is the record's identifier.
	ID ID
	// Intent is the operation, with its key. It is nil only for a damaged
	// record whose intent could not be recovered (see Damaged).
	Intent *idem.Intent
	// State is where the record is.
	State State
	// Outcome is what is known of the operation once the record is settled:
	// Applied, AlreadyApplied, NotApplied or Unknown. Until then it is
	// idem.NoOutcome ("none"), never to be read as Unknown.
	Outcome idem.Outcome
	// NumAttempts counts the attempts leased so far.
	NumAttempts int
	// NextAttempt is when the next attempt is due, for a pending record.
	NextAttempt time.Time
	// FirstSentAt is when an attempt first may have reached the server; the
	// zero Time if none has. The horizon counts from it.
	FirstSentAt time.Time
	// InDoubt reports that an attempt left the operation in doubt (an
	// ambiguous one, a keyed 409, a resend by net/http): the server may
	// have acted, so only a success settles it.
	InDoubt bool
	// LastAttemptAt is when the latest attempt was leased.
	LastAttemptAt time.Time
	// LastClass, LastStatus and LastError describe the latest attempt.
	LastClass  idem.Class
	LastStatus int
	LastError  string
	// Reason says why the record settled as it did.
	Reason string
	// EnqueuedAt and SettledAt are when the record entered the queue and
	// when it settled (zero while not settled).
	EnqueuedAt, SettledAt time.Time
	// Result is the stored answer that settled the record, if one came.
	Result *Response
	// ResubmittedAs is the record an operator resubmitted this one as; 0 if
	// none.
	ResubmittedAs ID
	// Damaged reports that the stored record was found damaged, by Open or
	// by the drainer when it came to the head of its lane, and quarantined:
	// State is Failed, Outcome Unknown (whether it was sent cannot be
	// told), Reason starts with "damaged: " and says what was wrong,
	// SettledAt is when it was quarantined. Of what it held only ID is
	// kept, and Intent if the intent's own checksum shows it intact; the
	// rest is zero. It is never sent again nor resubmitted; Discard removes
	// it.
	Damaged bool
	// Trace is what Options.Tracer's Inject stored when the record was
	// enqueued, such as its producer's trace context (a W3C traceparent);
	// nil when none. It holds at most 8 entries, of names up to 64 bytes
	// and values up to 512 (see BoundTrace). A Resubmit's copy gets the
	// resubmitting call's, or keeps the original's; a damaged record keeps
	// none.
	Trace map[string]string

	// leaseSetFirstSent reports that the current lease set FirstSentAt, so
	// a never-sent result may clear it again.
	leaseSetFirstSent bool
	// reauthorized reports that a 401 already led to one more attempt with
	// fresh credentials.
	reauthorized bool
	// intentBytes caches the encoded intent.
	intentBytes []byte
}

// recordVersion is the newest version of the binary form of a Record, the
// one this build reads up to. Version 2 is version 1 with flagHasTrace set
// and the trace's entries after the intent. A record without Trace is
// written as version 1, byte for byte as before Trace, so that only a
// traced record needs a build that knows Trace: an older one sees version
// 2 as newer (ErrNewerVersion), and a store shared with it leaves the record
// for a newer process instead of quarantining it.
const recordVersion = 2

// recordVersionUntraced is the version of a record without Trace.
const recordVersionUntraced = 1

// recordMagic starts every encoded record.
const recordMagic = "iq"

// An encoded record starts with what Open's scan and List need, at fixed
// offsets, so that they read it without decoding the rest: the state byte,
// SettledAt (8 bytes, big-endian nanoseconds, 0 if unsettled), then the lane
// (length-prefixed).
const (
	stateOffset   = len(recordMagic) + 1
	settledOffset = stateOffset + 1
	laneOffset    = settledOffset + 8
)

const (
	flagInDoubt = 1 << iota
	flagLeaseSetFirstSent
	flagReauthorized
	flagHasResult
	flagTruncated
	// flagDamaged marks a quarantined record (Record.Damaged); its
	// intent field is empty when the intent could not be recovered, and
	// its lane then empty too. Added to version 1 before any release: no
	// file written without it exists.
	flagDamaged
	// flagHasTrace marks a record with a Trace, whose entries follow the
	// intent. A record written before Trace has no such flag and reads as
	// it did, with a nil Trace.
	flagHasTrace
)

// encode returns the binary form of r: versioned and sealed with a CRC-32C.
func (r *Record) encode() ([]byte, error) {
	if r.intentBytes == nil && r.Intent != nil {
		b, err := r.Intent.MarshalBinary()
		if err != nil {
			return nil, err
		}
		r.intentBytes = b
	}
	var flags uint64
	for _, f := range [...]struct {
		on  bool
		bit uint64
	}{
		{r.InDoubt, flagInDoubt}, {r.leaseSetFirstSent, flagLeaseSetFirstSent},
		{r.reauthorized, flagReauthorized}, {r.Result != nil, flagHasResult},
		{r.Result != nil && r.Result.Truncated, flagTruncated}, {r.Damaged, flagDamaged},
		{len(r.Trace) > 0, flagHasTrace},
	} {
		if f.on {
			flags |= f.bit
		}
	}
	b := make([]byte, 0, 96+len(r.LastError)+len(r.Reason)+len(r.intentBytes)+resultSize(r.Result)+traceSize(r.Trace))
	b = append(b, recordMagic...)
	version := byte(recordVersionUntraced)
	if len(r.Trace) > 0 {
		version = recordVersion
	}
	b = append(b, version, byte(r.State))
	b = binary.BigEndian.AppendUint64(b, uint64(binenc.Nanos(r.SettledAt)))
	b = binenc.Append(b, r.lane())
	b = binary.AppendUvarint(b, uint64(r.ID))
	b = binary.AppendUvarint(b, flags)
	b = binary.AppendUvarint(b, uint64(r.Outcome))
	b = binary.AppendUvarint(b, uint64(r.NumAttempts))
	for _, t := range [...]time.Time{r.NextAttempt, r.FirstSentAt, r.EnqueuedAt, r.LastAttemptAt} {
		b = binary.AppendVarint(b, binenc.Nanos(t))
	}
	b = binary.AppendUvarint(b, uint64(r.LastClass))
	b = binary.AppendUvarint(b, uint64(r.LastStatus))
	b = binenc.Append(b, r.LastError)
	b = binenc.Append(b, r.Reason)
	b = binary.AppendUvarint(b, uint64(r.ResubmittedAs))
	if r.Result != nil {
		b = binary.AppendUvarint(b, uint64(r.Result.Status))
		b = binary.AppendUvarint(b, uint64(len(r.Result.Header)))
		for k, vs := range r.Result.Header {
			b = binenc.AppendHeader(b, k, vs)
		}
		b = binenc.Append(b, r.Result.Body)
	}
	b = binenc.Append(b, r.intentBytes)
	if len(r.Trace) > 0 {
		var err error
		if b, err = appendTrace(b, r.Trace); err != nil {
			return nil, err
		}
	}
	return binenc.Seal(b), nil
}

func traceSize(t map[string]string) int {
	n := 0
	for k, v := range t {
		n += 4 + len(k) + len(v)
	}
	return n
}

func resultSize(r *Response) int {
	if r == nil {
		return 0
	}
	n := 16 + len(r.Body)
	for k, vs := range r.Header {
		n += 8 + len(k)
		for _, v := range vs {
			n += 4 + len(v)
		}
	}
	return n
}

// MarshalBinary returns the binary form of r that a Store keeps: versioned,
// sealed with a CRC-32C, and holding all the record knows, the drainer's
// own marks included.
func (r *Record) MarshalBinary() ([]byte, error) { return r.encode() }

// UnmarshalBinary sets r from data written by MarshalBinary. Damaged data,
// or data of an unknown version, gives an error wrapping ErrDamaged and
// leaves r as it was.
func (r *Record) UnmarshalBinary(data []byte) error {
	d, err := decodeRecord(data)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrDamaged, err)
	}
	*r = *d
	return nil
}

// errCorrupt is wrapped by every decoding error.
var errCorrupt = errors.New("damaged record")

// decodeRecord parses the binary form of a record. It refuses unknown
// versions, damaged data and invalid intents; it never panics.
func decodeRecord(data []byte) (*Record, error) {
	if len(data) < laneOffset+1+4 || string(data[:len(recordMagic)]) != recordMagic {
		return nil, fmt.Errorf("%w: not a queue record", errCorrupt)
	}
	if v := data[len(recordMagic)]; v > recordVersion {
		return nil, fmt.Errorf("%w: %w: unknown record version %d (this build reads %d)", errCorrupt, ErrNewerVersion, v, recordVersion)
	} else if v < recordVersionUntraced {
		return nil, fmt.Errorf("%w: unknown record version %d (this build reads %d)", errCorrupt, v, recordVersion)
	}
	body, err := binenc.Unseal(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errCorrupt, err)
	}
	r, lane, err := decodeFields(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errCorrupt, err)
	}
	if !validState(r.State) {
		return nil, fmt.Errorf("%w: unknown state %d", errCorrupt, r.State)
	}
	if r.State.Settled() == r.SettledAt.IsZero() {
		return nil, fmt.Errorf("%w: state %s with settled time %v", errCorrupt, r.State, r.SettledAt)
	}
	if r.Damaged && !r.State.Settled() { // quarantined records are never sent
		return nil, fmt.Errorf("%w: damaged record in state %s", errCorrupt, r.State)
	}
	if r.Damaged && len(r.intentBytes) == 0 {
		if lane != "" {
			return nil, fmt.Errorf("%w: damaged record without intent in lane %q", errCorrupt, lane)
		}
		return r, nil
	}
	in := new(idem.Intent)
	if err := in.UnmarshalBinary(r.intentBytes); err != nil {
		return nil, fmt.Errorf("%w: %v", errCorrupt, err)
	}
	if in.Lane() != lane {
		return nil, fmt.Errorf("%w: lane %q in the header, %q in the intent", errCorrupt, lane, in.Lane())
	}
	r.Intent = in
	return r, nil
}

// decodeFields parses the fields of body, a record without its seal, and
// returns the lane its header names. It checks the encoding, not the values:
// r.Intent is unset, r.intentBytes holds the intent's encoding.
func decodeFields(body []byte) (r *Record, lane string, err error) {
	r = &Record{State: State(body[stateOffset])}
	r.SettledAt = binenc.FromNanos(int64(binary.BigEndian.Uint64(body[settledOffset:])))
	d := binenc.Decoder{B: body[laneOffset:]}
	lane = d.String("lane")
	r.ID = ID(d.Uvarint(math.MaxUint64, "ID"))
	flags := d.Uvarint(math.MaxUint64, "flags")
	r.Outcome = decodeEnum[idem.Outcome](&d, knownOutcomes(), "outcome")
	r.NumAttempts = int(d.Uvarint(math.MaxInt32, "attempts"))
	r.NextAttempt, r.FirstSentAt = d.Time("NextAttempt"), d.Time("FirstSentAt")
	r.EnqueuedAt, r.LastAttemptAt = d.Time("EnqueuedAt"), d.Time("LastAttemptAt")
	r.LastClass = decodeEnum[idem.Class](&d, knownClasses(), "class")
	r.LastStatus = int(d.Uvarint(999, "status"))
	r.LastError, r.Reason = d.String("last error"), d.String("reason")
	r.ResubmittedAs = ID(d.Uvarint(math.MaxUint64, "resubmitted ID"))
	r.InDoubt = flags&flagInDoubt != 0
	r.leaseSetFirstSent = flags&flagLeaseSetFirstSent != 0
	r.reauthorized = flags&flagReauthorized != 0
	r.Damaged = flags&flagDamaged != 0
	if flags&flagHasResult != 0 {
		res := &Response{Status: int(d.Uvarint(999, "result status")), Truncated: flags&flagTruncated != 0}
		for _, f := range d.Headers() {
			if res.Header == nil {
				res.Header = make(http.Header)
			}
			res.Header[f.Name] = append(res.Header[f.Name], f.Values...)
		}
		res.Body = d.Bytes("result body")
		r.Result = res
	}
	r.intentBytes = d.Bytes("intent")
	switch traced := flags&flagHasTrace != 0; {
	case traced != (body[len(recordMagic)] == recordVersion): // as encode writes them
		return nil, "", fmt.Errorf("trace flag %v in a record of version %d", traced, body[len(recordMagic)])
	case traced:
		r.Trace = decodeTrace(&d)
	}
	if err := d.End(); err != nil {
		return nil, "", err
	}
	return r, lane, nil
}

// lane returns the name of r's lane; "" for a damaged record without intent.
func (r *Record) lane() string {
	if r.Intent == nil {
		return ""
	}
	return r.Intent.Lane()
}

// checkRecord verifies data, the stored bytes of record id, as Open does for
// every record: the checksum, the version, and the header fields Open's
// scan uses. It returns the state, the nanoseconds of SettledAt and the
// lane. It costs a CRC and no allocation but the lane's; decodeRecord checks
// the rest when the record is read.
func checkRecord(data []byte, id ID) (State, int64, string, error) {
	if len(data) < laneOffset+1+4 || string(data[:len(recordMagic)]) != recordMagic {
		return 0, 0, "", fmt.Errorf("%w: not a queue record", errCorrupt)
	}
	if v := data[len(recordMagic)]; v < recordVersionUntraced || v > recordVersion {
		return 0, 0, "", fmt.Errorf("%w: unknown record version %d (this build reads %d)", errCorrupt, v, recordVersion)
	}
	body, err := binenc.Unseal(data)
	if err != nil {
		return 0, 0, "", fmt.Errorf("%w: %v", errCorrupt, err)
	}
	s := State(body[stateOffset])
	if !validState(s) {
		return 0, 0, "", fmt.Errorf("%w: unknown state %d", errCorrupt, s)
	}
	settledAt := int64(binary.BigEndian.Uint64(body[settledOffset:]))
	if s.Settled() == (settledAt == 0) {
		return 0, 0, "", fmt.Errorf("%w: state %s with settled time %d", errCorrupt, s, settledAt)
	}
	d := binenc.Decoder{B: body[laneOffset:]}
	lane := d.String("lane")
	got := ID(d.Uvarint(math.MaxUint64, "ID"))
	switch {
	case d.Err != nil:
		return 0, 0, "", fmt.Errorf("%w: %v", errCorrupt, d.Err)
	case got != id:
		return 0, 0, "", fmt.Errorf("%w: %w: holds ID %d", errCorrupt, errWrongKey, got)
	}
	return s, settledAt, lane, nil
}
