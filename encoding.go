package idem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem/internal/binenc"
)

// encodingVersion is the version of the binary form of an Intent. A change
// of layout takes a new version; UnmarshalBinary refuses versions it does not
// know rather than guess. Version 1 also held what had happened to the
// intent (FirstSentAt, a flag for an attempt in doubt), which its runner now
// keeps: UnmarshalBinary still reads it and drops those fields.
const encodingVersion = 2

// encodingMagic starts every encoded Intent.
const encodingMagic = "idem"

// Flags of an encoded Intent.
const (
	flagSupplied  = 1 << iota // the key was given with WithKey
	flagV1InDoubt             // version 1 only: an attempt was in doubt
)

// MarshalBinary encodes the intent for storage, so that a queue can persist
// it and send it after a restart with the same key. The form is versioned and
// ends in a CRC-32C of the rest.
//
// An intent made WithPolicy has no binary form: a policy may hold a func
// (Policy.Veto), which no encoding carries, and a queue, which stores
// intents in this form, shapes every record by its own Options.Policy.
// MarshalBinary refuses it with an error wrapping ErrInvalidIntent rather
// than drop the policy silently; queue.Enqueue and queue.NewRecord pass
// that error on.
func (in *Intent) MarshalBinary() ([]byte, error) {
	if in.policy != nil {
		return nil, fmt.Errorf("%w: an intent with WithPolicy cannot be queued: the queue's Options.Policy applies (nor encoded: a policy may hold a func)", ErrInvalidIntent)
	}
	n := len(encodingMagic) + 1 + 4*binary.MaxVarintLen64 + len(in.method) + len(in.url) +
		len(in.key) + len(in.lane) + 3*binary.MaxVarintLen64 + len(in.body) + 4
	for _, f := range in.header {
		n += 2*binary.MaxVarintLen64 + len(f.name)
		for _, v := range f.values {
			n += binary.MaxVarintLen64 + len(v)
		}
	}
	b := make([]byte, 0, n)
	b = append(b, encodingMagic...)
	b = append(b, encodingVersion)
	for _, s := range [...]string{in.method, in.url, in.key, in.lane} {
		b = binenc.Append(b, s)
	}
	var flags uint64
	if in.supplied {
		flags |= flagSupplied
	}
	b = binary.AppendUvarint(b, flags)
	b = binary.AppendVarint(b, binenc.Nanos(in.createdAt))
	b = binary.AppendUvarint(b, uint64(len(in.header)))
	for _, f := range in.header {
		b = binenc.AppendHeader(b, f.name, f.values)
	}
	b = binenc.Append(b, in.body)
	return binenc.Seal(b), nil
}

// UnmarshalBinary decodes data written by MarshalBinary into in, which must
// be a new, unused Intent. It validates everything NewIntent validates and
// refuses unknown versions, damaged data (the checksum) and trailing bytes;
// errors wrap ErrInvalidIntent or the validation error.
func (in *Intent) UnmarshalBinary(data []byte) error {
	if len(data) < len(encodingMagic)+1+4 || string(data[:len(encodingMagic)]) != encodingMagic {
		return fmt.Errorf("%w: encoding: not an encoded intent", ErrInvalidIntent)
	}
	v := data[len(encodingMagic)]
	if v != 1 && v != encodingVersion {
		return fmt.Errorf("%w: encoding: unknown version %d (this build reads 1 and %d)", ErrInvalidIntent, v, encodingVersion)
	}
	body, err := binenc.Unseal(data)
	if err != nil {
		return fmt.Errorf("%w: encoding: %v", ErrInvalidIntent, err)
	}
	d := binenc.Decoder{B: body[len(encodingMagic)+1:]}
	method, url, key, lane := d.String("method"), d.String("URL"), d.String("key"), d.String("lane")
	known := uint64(flagSupplied)
	if v == 1 {
		known |= flagV1InDoubt
	}
	flags := d.Uvarint(known, "flags")
	created := d.Time("CreatedAt")
	if v == 1 {
		if sent := d.Time("FirstSentAt"); binenc.Nanos(sent) < 0 {
			return fmt.Errorf("%w: encoding: FirstSentAt %v before 1970", ErrInvalidIntent, sent)
		}
	}
	header := d.Headers()
	payload := d.Bytes("body")
	if err := d.End(); err != nil {
		return fmt.Errorf("%w: encoding: %v", ErrInvalidIntent, err)
	}
	if flags&flagSupplied != 0 && key == "" {
		return fmt.Errorf("%w: encoding: supplied key flag without a key", ErrInvalidIntent)
	}
	if err := in.restore(method, url, key, lane, created, header, payload); err != nil {
		return err
	}
	in.supplied = flags&flagSupplied != 0
	return nil
}

// restore validates decoded fields as NewIntent would and sets them.
func (in *Intent) restore(method, url, key, lane string, created time.Time, header []binenc.Field, body []byte) error {
	if in.method != "" {
		return errors.New("idem: UnmarshalBinary into an Intent already in use")
	}
	opts := make([]IntentOption, 0, 2+len(header))
	if key != "" {
		opts = append(opts, WithKey(key))
	} else {
		opts = append(opts, WithoutKey())
	}
	opts = append(opts, WithLane(lane))
	for _, f := range header {
		opts = append(opts, withHeaderValues(f.Name, f.Values))
	}
	fresh, err := newIntent(method, url, body, created, opts)
	if err != nil {
		return err
	}
	in.method, in.url, in.u, in.key, in.lane = fresh.method, fresh.url, fresh.u, fresh.key, fresh.lane
	in.header, in.body, in.createdAt = fresh.header, fresh.body, fresh.createdAt
	return nil
}
