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
// know rather than guess.
const encodingVersion = 1

// encodingMagic starts every encoded Intent.
const encodingMagic = "idem"

// Flags of an encoded Intent.
const (
	flagSupplied  = 1 << iota // the key was given with WithKey
	flagAmbiguous             // an attempt was ambiguous
	flagsKnown    = flagSupplied | flagAmbiguous
)

// MarshalBinary encodes the intent for storage, FirstSentAt included, so that
// a queue can persist it and send it after a restart with the same key. The
// form is versioned and ends in a CRC-32C of the rest.
func (in *Intent) MarshalBinary() ([]byte, error) {
	n := len(encodingMagic) + 1 + 4*binary.MaxVarintLen64 + len(in.method) + len(in.url) +
		len(in.key[0]) + len(in.lane) + 3*binary.MaxVarintLen64 + len(in.body) + 4
	for _, f := range in.header {
		n += 2*binary.MaxVarintLen64 + len(f.name)
		for _, v := range f.values {
			n += binary.MaxVarintLen64 + len(v)
		}
	}
	b := make([]byte, 0, n)
	b = append(b, encodingMagic...)
	b = append(b, encodingVersion)
	for _, s := range [...]string{in.method, in.url, in.key[0], in.lane} {
		b = binenc.Append(b, s)
	}
	var flags uint64
	if in.supplied {
		flags |= flagSupplied
	}
	if in.ambiguous.Load() {
		flags |= flagAmbiguous
	}
	b = binary.AppendUvarint(b, flags)
	b = binary.AppendVarint(b, binenc.Nanos(in.createdAt))
	b = binary.AppendVarint(b, in.firstSentAt.Load())
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
	if v := data[len(encodingMagic)]; v != encodingVersion {
		return fmt.Errorf("%w: encoding: unknown version %d (this build reads %d)", ErrInvalidIntent, v, encodingVersion)
	}
	body, err := binenc.Unseal(data)
	if err != nil {
		return fmt.Errorf("%w: encoding: %v", ErrInvalidIntent, err)
	}
	d := binenc.Decoder{B: body[len(encodingMagic)+1:]}
	method, url, key, lane := d.String("method"), d.String("URL"), d.String("key"), d.String("lane")
	flags := d.Uvarint(flagsKnown, "flags")
	created, firstSent := d.Time("CreatedAt"), d.Time("FirstSentAt")
	header := d.Headers()
	payload := d.Bytes("body")
	if err := d.End(); err != nil {
		return fmt.Errorf("%w: encoding: %v", ErrInvalidIntent, err)
	}
	if flags&flagSupplied != 0 && key == "" {
		return fmt.Errorf("%w: encoding: supplied key flag without a key", ErrInvalidIntent)
	}
	if err := in.restore(method, url, key, lane, created, firstSent, header, payload); err != nil {
		return err
	}
	in.supplied = flags&flagSupplied != 0
	in.ambiguous.Store(flags&flagAmbiguous != 0)
	return nil
}

// restore validates decoded fields as NewIntent would and sets them.
func (in *Intent) restore(method, url, key, lane string, created, firstSent time.Time, header []binenc.Field, body []byte) error {
	if in.method != "" {
		return errors.New("idem: UnmarshalBinary into an Intent already in use")
	}
	sent := binenc.Nanos(firstSent)
	if sent < 0 {
		return fmt.Errorf("%w: encoding: FirstSentAt %v before 1970", ErrInvalidIntent, firstSent)
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
	in.firstSentAt.Store(sent)
	return nil
}
