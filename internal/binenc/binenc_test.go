package binenc

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRoundTrip(t *testing.T) {
	when := time.Unix(1700000000, 123)
	b := Append(nil, "method")
	b = Append(b, []byte{})
	b = binary.AppendUvarint(b, 7)
	b = binary.AppendVarint(b, Nanos(when))
	b = binary.AppendVarint(b, Nanos(time.Time{}))
	b = binary.AppendUvarint(b, 2)
	b = AppendHeader(b, "A", []string{"1", "2"})
	b = AppendHeader(b, "B", nil)
	b = Append(b, []byte("body"))
	data := Seal(b)

	body, err := Unseal(data)
	require.NoError(t, err)
	d := Decoder{B: body}
	assert.Equal(t, "method", d.String("method"))
	assert.Nil(t, d.Bytes("empty"))
	assert.Equal(t, uint64(7), d.Uvarint(7, "seven"))
	assert.True(t, when.Equal(d.Time("when")))
	assert.True(t, d.Time("zero").IsZero())
	assert.Equal(t, []Field{{"A", []string{"1", "2"}}, {"B", nil}}, d.Headers())
	assert.Equal(t, []byte("body"), d.Bytes("body"))
	require.NoError(t, d.End())
}

func TestUnsealRefusesDamage(t *testing.T) {
	data := Seal([]byte("payload"))
	for _, bad := range [][]byte{nil, {1, 2, 3}, data[:len(data)-1], append([]byte("x"), data[1:]...)} {
		_, err := Unseal(bad)
		assert.ErrorIs(t, err, ErrChecksum, "%q", bad)
	}
}

// TestDecoderErrors: each error names the field, the first one sticks, and
// no length or count beyond the data is believed.
func TestDecoderErrors(t *testing.T) {
	huge := binary.AppendUvarint(nil, 1<<40)
	for _, tt := range []struct {
		name string
		data []byte
		read func(*Decoder)
		want string
	}{
		{"over limit", binary.AppendUvarint(nil, 9), func(d *Decoder) { d.Uvarint(8, "flags") }, "flags 9 over its limit 8"},
		{"truncated integer", []byte{0x80}, func(d *Decoder) { d.Uvarint(8, "flags") }, "bad flags"},
		{"bad time", []byte{0x80}, func(d *Decoder) { d.Time("CreatedAt") }, "bad CreatedAt"},
		{"string past the end", huge, func(d *Decoder) { d.String("URL") }, "URL length 1099511627776 beyond the 0 bytes left"},
		{"header count past the end", huge, func(d *Decoder) { d.Headers() }, "header count"},
		{"value count past the end", append(Append([]byte{1}, "A"), huge...), func(d *Decoder) { d.Headers() }, "header value count"},
		{"trailing", []byte{1, 'a', 0}, func(d *Decoder) { d.String("s") }, "1 trailing bytes"},
		{"first error sticks", []byte{0x80}, func(d *Decoder) { d.Uvarint(1, "first"); d.String("second") }, "bad first"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := Decoder{B: tt.data}
			tt.read(&d)
			err := d.End()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}
