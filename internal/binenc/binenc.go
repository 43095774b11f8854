// Package binenc holds what idem's two binary forms, an encoded Intent and a
// queue record, share: length-prefixed fields, times as Unix nanoseconds,
// headers, a CRC-32C seal, and a Decoder that keeps its first error and
// bounds every length and count by the bytes left, so that hostile data
// can neither panic it nor make it allocate beyond the data's size.
package binenc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Seal appends the CRC-32C of b to it.
func Seal(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// ErrChecksum is returned by Unseal for data whose seal does not match.
var ErrChecksum = errors.New("checksum mismatch, the data is damaged")

// Unseal checks the seal Seal appended and returns the data before it.
func Unseal(data []byte) ([]byte, error) {
	if len(data) < 4 {
		return nil, ErrChecksum
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, ErrChecksum
	}
	return body, nil
}

// Append appends s with its length before it.
func Append[S ~string | ~[]byte](b []byte, s S) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// AppendHeader appends one header: its name, the count of its values, and
// the values. The count of headers comes before the first.
func AppendHeader(b []byte, name string, values []string) []byte {
	b = Append(b, name)
	b = binary.AppendUvarint(b, uint64(len(values)))
	for _, v := range values {
		b = Append(b, v)
	}
	return b
}

// Nanos returns t as Unix nanoseconds; the zero Time is 0.
func Nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// FromNanos is the inverse of Nanos.
func FromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// Field is one decoded header.
type Field struct {
	Name   string
	Values []string
}

// Decoder reads fields from B in order. After the first error every read
// returns a zero value and Err keeps that error, which names the field.
type Decoder struct {
	B   []byte
	Err error
}

// Uvarint reads an unsigned integer no greater than max.
func (d *Decoder) Uvarint(max uint64, what string) uint64 {
	v := d.uvarint(what)
	if d.Err == nil && v > max {
		d.Err = fmt.Errorf("%s %d over its limit %d", what, v, max)
		return 0
	}
	return v
}

// Count reads a length or count of what follows: each item takes at least a
// byte, so it is no greater than the bytes left.
func (d *Decoder) Count(what string) uint64 {
	v := d.uvarint(what)
	if d.Err == nil && v > uint64(len(d.B)) {
		d.Err = fmt.Errorf("%s %d beyond the %d bytes left", what, v, len(d.B))
		return 0
	}
	return v
}

func (d *Decoder) uvarint(what string) uint64 {
	if d.Err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.B)
	if n <= 0 {
		d.Err = fmt.Errorf("bad %s", what)
		return 0
	}
	d.B = d.B[n:]
	return v
}

// Time reads a time written as Nanos with binary.AppendVarint.
func (d *Decoder) Time(what string) time.Time {
	if d.Err != nil {
		return time.Time{}
	}
	v, n := binary.Varint(d.B)
	if n <= 0 {
		d.Err = fmt.Errorf("bad %s", what)
		return time.Time{}
	}
	d.B = d.B[n:]
	return FromNanos(v)
}

// String reads a field written by Append.
func (d *Decoder) String(what string) string {
	n := d.Count(what + " length")
	if d.Err != nil {
		return ""
	}
	s := string(d.B[:n])
	d.B = d.B[n:]
	return s
}

// Bytes reads a field written by Append, copied; nil when empty.
func (d *Decoder) Bytes(what string) []byte {
	n := d.Count(what + " length")
	if d.Err != nil || n == 0 {
		return nil
	}
	out := append([]byte(nil), d.B[:n]...)
	d.B = d.B[n:]
	return out
}

// Headers reads a count of headers, then each as AppendHeader wrote it.
func (d *Decoder) Headers() []Field {
	n := d.Count("header count")
	if d.Err != nil || n == 0 {
		return nil
	}
	h := make([]Field, 0, n)
	for range n {
		f := Field{Name: d.String("header name")}
		nv := d.Count("header value count")
		for range nv {
			f.Values = append(f.Values, d.String("header value"))
		}
		if d.Err != nil {
			return nil
		}
		h = append(h, f)
	}
	return h
}

// End returns the first error, or an error if bytes are left over.
func (d *Decoder) End() error {
	if d.Err == nil && len(d.B) != 0 {
		d.Err = fmt.Errorf("%d trailing bytes", len(d.B))
	}
	return d.Err
}
