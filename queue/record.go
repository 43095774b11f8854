package queue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net/http"
	"strconv"
	"time"

	"github.com/idem-go/idem"
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
	// Failed records were refused by the server, or ran out of attempts; the
	// Outcome is NotApplied, or Unknown after an ambiguous attempt.
	Failed
	// Expired records were not sent again because the server may have
	// forgotten their key (the horizon) or the intent grew too old. The
	// Outcome is NotApplied, or Unknown after an ambiguous attempt.
	Expired
)

func (s State) String() string {
	switch s {
	case Pending:
		return "pending"
	case InFlight:
		return "in flight"
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
	// Truncated reports that Body was cut.
	Truncated bool
}

// Record is a queued intent and what is known of it.
type Record struct {
	// ID is the record's identifier.
	ID ID
	// Intent is the operation, with its key.
	Intent *idem.Intent
	// State is where the record is.
	State State
	// Outcome is what is known of the operation once the record is settled:
	// Applied, AlreadyApplied, NotApplied or Unknown. Unknown while pending.
	Outcome idem.Outcome
	// Attempts counts the attempts leased so far.
	Attempts int
	// NextAttempt is when the next attempt is due, for a pending record.
	NextAttempt time.Time
	// FirstSentAt is when an attempt first may have reached the server; the
	// zero Time if none has. The horizon counts from it.
	FirstSentAt time.Time
	// Ambiguous reports that an attempt was ambiguous: the server may have
	// acted.
	Ambiguous bool
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

	// leaseSetFirstSent reports that the current lease set FirstSentAt, so
	// a never-sent result may clear it again.
	leaseSetFirstSent bool
	// reauthorized reports that a 401 already led to one more attempt with
	// fresh credentials.
	reauthorized bool
	// intentBytes caches the encoded intent.
	intentBytes []byte
}

// recordVersion is the version of the binary form of a Record.
const recordVersion = 1

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
	flagAmbiguous = 1 << iota
	flagLeaseSetFirstSent
	flagReauthorized
	flagHasResult
	flagTruncated
)

// encode returns the binary form of r: versioned and sealed with a CRC-32C.
func (r *Record) encode() ([]byte, error) {
	if r.intentBytes == nil {
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
		{r.Ambiguous, flagAmbiguous}, {r.leaseSetFirstSent, flagLeaseSetFirstSent},
		{r.reauthorized, flagReauthorized}, {r.Result != nil, flagHasResult},
		{r.Result != nil && r.Result.Truncated, flagTruncated},
	} {
		if f.on {
			flags |= f.bit
		}
	}
	b := make([]byte, 0, 96+len(r.LastError)+len(r.Reason)+len(r.intentBytes)+resultSize(r.Result))
	b = append(b, recordMagic...)
	b = append(b, recordVersion, byte(r.State))
	b = binary.BigEndian.AppendUint64(b, uint64(nanos(r.SettledAt)))
	b = appendBytes(b, []byte(r.Intent.Lane()))
	b = binary.AppendUvarint(b, uint64(r.ID))
	b = binary.AppendUvarint(b, flags)
	b = binary.AppendUvarint(b, uint64(r.Outcome))
	b = binary.AppendUvarint(b, uint64(r.Attempts))
	for _, t := range [...]time.Time{r.NextAttempt, r.FirstSentAt, r.EnqueuedAt, r.LastAttemptAt} {
		b = binary.AppendVarint(b, nanos(t))
	}
	b = binary.AppendUvarint(b, uint64(r.LastClass))
	b = binary.AppendUvarint(b, uint64(r.LastStatus))
	b = appendBytes(b, []byte(r.LastError))
	b = appendBytes(b, []byte(r.Reason))
	b = binary.AppendUvarint(b, uint64(r.ResubmittedAs))
	if r.Result != nil {
		b = binary.AppendUvarint(b, uint64(r.Result.Status))
		b = appendHeader(b, r.Result.Header)
		b = appendBytes(b, r.Result.Body)
	}
	b = appendBytes(b, r.intentBytes)
	return sealed(b), nil
}

// sealed appends the CRC-32C of b to it.
func sealed(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
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

// errCorrupt is wrapped by every decoding error.
var errCorrupt = errors.New("damaged record")

// decodeRecord parses the binary form of a record. It refuses unknown
// versions, damaged data and invalid intents; it never panics.
func decodeRecord(data []byte) (*Record, error) {
	if len(data) < laneOffset+1+4 || string(data[:len(recordMagic)]) != recordMagic {
		return nil, fmt.Errorf("%w: not a queue record", errCorrupt)
	}
	if v := data[len(recordMagic)]; v != recordVersion {
		return nil, fmt.Errorf("%w: unknown record version %d (this build reads %d)", errCorrupt, v, recordVersion)
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", errCorrupt)
	}
	r := &Record{State: State(data[stateOffset])}
	if !validState(r.State) {
		return nil, fmt.Errorf("%w: unknown state %d", errCorrupt, r.State)
	}
	r.SettledAt = fromNanos(int64(binary.BigEndian.Uint64(data[settledOffset:])))
	d := reader{b: body[laneOffset:]}
	lane := string(d.bytes())
	r.ID = ID(d.uvarint())
	flags := d.uvarint()
	r.Outcome = idem.Outcome(d.uvarint())
	r.Attempts = int(d.uvarint())
	r.NextAttempt, r.FirstSentAt, r.EnqueuedAt, r.LastAttemptAt = d.time(), d.time(), d.time(), d.time()
	r.LastClass = idem.Class(d.uvarint())
	r.LastStatus = int(d.uvarint())
	r.LastError, r.Reason = string(d.bytes()), string(d.bytes())
	r.ResubmittedAs = ID(d.uvarint())
	r.Ambiguous = flags&flagAmbiguous != 0
	r.leaseSetFirstSent = flags&flagLeaseSetFirstSent != 0
	r.reauthorized = flags&flagReauthorized != 0
	if flags&flagHasResult != 0 {
		res := &Response{Status: int(d.uvarint()), Truncated: flags&flagTruncated != 0}
		res.Header = d.header()
		res.Body = d.bytes()
		r.Result = res
	}
	r.intentBytes = d.bytes()
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: %v", errCorrupt, d.err)
	}
	if r.Outcome > idem.NotApplied || r.LastClass > idem.ClassRejected || r.Attempts < 0 {
		return nil, fmt.Errorf("%w: field out of range", errCorrupt)
	}
	in := new(idem.Intent)
	if err := in.UnmarshalBinary(r.intentBytes); err != nil {
		return nil, fmt.Errorf("%w: %v", errCorrupt, err)
	}
	if in.Lane() != lane {
		return nil, fmt.Errorf("%w: lane %q in the header, %q in the intent", errCorrupt, lane, in.Lane())
	}
	if r.State.Settled() == r.SettledAt.IsZero() {
		return nil, fmt.Errorf("%w: state %s with settled time %v", errCorrupt, r.State, r.SettledAt)
	}
	r.Intent = in
	return r, nil
}

// peek reads the fixed header of an encoded record: its state, the
// nanoseconds of SettledAt, and its lane. It does not check the checksum;
// decodeRecord does, when the record is read.
func peek(data []byte) (State, int64, string, error) {
	if len(data) < laneOffset+1 || string(data[:len(recordMagic)]) != recordMagic || data[len(recordMagic)] != recordVersion {
		return 0, 0, "", fmt.Errorf("%w: not a queue record of version %d", errCorrupt, recordVersion)
	}
	s := State(data[stateOffset])
	if !validState(s) {
		return 0, 0, "", fmt.Errorf("%w: unknown state %d", errCorrupt, s)
	}
	d := reader{b: data[laneOffset:]}
	lane := d.bytes()
	if d.err != nil {
		return 0, 0, "", fmt.Errorf("%w: %v", errCorrupt, d.err)
	}
	return s, int64(binary.BigEndian.Uint64(data[settledOffset:])), string(lane), nil
}

func validState(s State) bool { return s >= Pending && s <= Expired }

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func appendBytes(b, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendHeader(b []byte, h http.Header) []byte {
	b = binary.AppendUvarint(b, uint64(len(h)))
	for k, vs := range h {
		b = appendBytes(b, []byte(k))
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendBytes(b, []byte(v))
		}
	}
	return b
}

// reader decodes fields, keeping the first error; lengths and counts are
// bounded by the bytes left, so hostile input cannot make it allocate.
type reader struct {
	b   []byte
	err error
}

func (d *reader) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errors.New("bad integer")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *reader) time() time.Time {
	if d.err != nil {
		return time.Time{}
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errors.New("bad time")
		return time.Time{}
	}
	d.b = d.b[n:]
	return fromNanos(v)
}

func (d *reader) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = fmt.Errorf("length %d beyond the %d bytes left", n, len(d.b))
		return nil
	}
	if n == 0 {
		return nil
	}
	out := append([]byte(nil), d.b[:n]...)
	d.b = d.b[n:]
	return out
}

func (d *reader) header() http.Header {
	n := d.uvarint()
	if d.err != nil || n == 0 {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = errors.New("header count beyond the data")
		return nil
	}
	h := make(http.Header, n)
	for range n {
		k := string(d.bytes())
		nv := d.uvarint()
		if d.err == nil && nv > uint64(len(d.b)) {
			d.err = errors.New("value count beyond the data")
		}
		if d.err != nil {
			return nil
		}
		for range nv {
			h[k] = append(h[k], string(d.bytes()))
		}
	}
	return h
}
