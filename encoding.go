package idem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"
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
		b = appendString(b, s)
	}
	var flags uint64
	if in.supplied {
		flags |= flagSupplied
	}
	if in.ambiguous.Load() {
		flags |= flagAmbiguous
	}
	b = binary.AppendUvarint(b, flags)
	b = binary.AppendVarint(b, unixNano(in.createdAt))
	b = binary.AppendVarint(b, in.firstSentAt.Load())
	b = binary.AppendUvarint(b, uint64(len(in.header)))
	for _, f := range in.header {
		b = appendString(b, f.name)
		b = binary.AppendUvarint(b, uint64(len(f.values)))
		for _, v := range f.values {
			b = appendString(b, v)
		}
	}
	b = appendString(b, string(in.body))
	return appendCRC(b), nil
}

// appendCRC seals b with its CRC-32C.
func appendCRC(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli()))
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
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, castagnoli()) != sum {
		return fmt.Errorf("%w: encoding: checksum mismatch, the data is damaged", ErrInvalidIntent)
	}
	d := decoder{b: body[len(encodingMagic)+1:]}
	method, url, key, lane := d.string(), d.string(), d.string(), d.string()
	flags := d.uvarint(flagsKnown, "flags")
	created, firstSent := d.varint(), d.varint()
	header := d.header()
	payload := d.string()
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return fmt.Errorf("%w: encoding: %v", ErrInvalidIntent, d.err)
	}
	if flags&flagSupplied != 0 && key == "" {
		return fmt.Errorf("%w: encoding: supplied key flag without a key", ErrInvalidIntent)
	}
	if err := in.restore(method, url, key, lane, created, firstSent, header, []byte(payload)); err != nil {
		return err
	}
	in.supplied = flags&flagSupplied != 0
	in.ambiguous.Store(flags&flagAmbiguous != 0)
	return nil
}

// restore validates decoded fields as NewIntent would and sets them.
func (in *Intent) restore(method, url, key, lane string, created, firstSent int64, header []field, body []byte) error {
	opts := make([]IntentOption, 0, 2+len(header))
	if key != "" {
		opts = append(opts, WithKey(key))
	} else {
		opts = append(opts, WithoutKey())
	}
	opts = append(opts, WithLane(lane))
	for _, f := range header {
		opts = append(opts, withHeaderValues(f.name, f.values))
	}
	fresh, err := newIntent(method, url, body, timeFromNano(created), opts)
	if err != nil {
		return err
	}
	if firstSent < 0 {
		return fmt.Errorf("%w: encoding: negative FirstSentAt", ErrInvalidIntent)
	}
	if in.method != "" {
		return errors.New("idem: UnmarshalBinary into an Intent already in use")
	}
	in.method, in.url, in.u, in.key, in.lane = fresh.method, fresh.url, fresh.u, fresh.key, fresh.lane
	in.header, in.body, in.createdAt = fresh.header, fresh.body, fresh.createdAt
	in.firstSentAt.Store(firstSent)
	return nil
}

func castagnoli() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) }

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func timeFromNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// decoder reads the fields of an encoded Intent, keeping the first error.
type decoder struct {
	b   []byte
	err error
}

// uvarint reads an unsigned integer no greater than limit; a limit of -1
// means the bytes left after it, for lengths and counts of what follows.
func (d *decoder) uvarint(limit int64, what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("bad %s", what)
		return 0
	}
	d.b = d.b[n:]
	if limit < 0 {
		limit = int64(len(d.b))
	}
	if v > uint64(limit) {
		d.err = fmt.Errorf("%s %d over limit %d", what, v, limit)
		return 0
	}
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errors.New("bad time")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	n := d.uvarint(-1, "length")
	if d.err != nil {
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) header() []field {
	// Each name and value takes at least one byte, which bounds the counts
	// by the data left and keeps a hostile count from allocating.
	names := d.uvarint(-1, "header count")
	if d.err != nil || names == 0 {
		return nil
	}
	h := make([]field, 0, names)
	for range names {
		f := field{name: d.string()}
		nv := d.uvarint(-1, "value count")
		for range nv {
			f.values = append(f.values, d.string())
		}
		h = append(h, f)
		if d.err != nil {
			return nil
		}
	}
	return h
}
