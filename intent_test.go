package idem

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/internal/binenc"
)

func TestNewIntentKeys(t *testing.T) {
	tests := []struct {
		method string
		opts   []IntentOption
		want   string // "generated", "" or the supplied key
	}{
		{"POST", nil, "generated"},
		{"PATCH", nil, "generated"},
		{"PUT", nil, "generated"},
		{"DELETE", nil, "generated"},
		{"GET", nil, ""},
		{"HEAD", nil, ""},
		{"OPTIONS", nil, ""},
		{"TRACE", nil, ""},
		{"QUERY", nil, ""},
		{"POST", []IntentOption{WithKey("order-42")}, "order-42"},
		{"POST", []IntentOption{WithoutKey()}, ""},
		{"PATCH", []IntentOption{WithKey("k"), WithoutKey()}, ""},
		{"PUT", []IntentOption{WithoutKey(), WithKey("k2")}, "k2"},
		{"GET", []IntentOption{WithoutKey()}, ""},
		{"DELETE", []IntentOption{WithKey("del-1")}, "del-1"},
	}
	for _, tt := range tests {
		t.Run(tt.method+"/"+tt.want, func(t *testing.T) {
			in, err := NewIntent(tt.method, "https://api.example/x", nil, tt.opts...)
			require.NoError(t, err)
			switch tt.want {
			case "generated":
				u, err := uuid.Parse(in.Key())
				require.NoError(t, err, "key %q", in.Key())
				assert.Equal(t, uuid.Version(4), u.Version())
				assert.NotEmpty(t, in.Key())
			default:
				assert.Equal(t, tt.want, in.Key())
			}
		})
	}
}

// TestNewIntentBodyAndKey: a generated key, made in one string with the
// body, is a version 4 UUID written as package uuid writes one, and leaves
// the body as given, with or without one.
func TestNewIntentBodyAndKey(t *testing.T) {
	seen := map[string]bool{}
	for _, body := range []string{"", "x", `{"amount":100}`, strings.Repeat("b", 1000)} {
		for range 20 {
			in, err := NewIntent("POST", "https://api.example/pay", []byte(body))
			require.NoError(t, err)
			assert.Equal(t, body, string(in.Body()))
			assert.Equal(t, body == "", in.Body() == nil, "Body is nil for no body")
			u, err := uuid.Parse(in.Key())
			require.NoError(t, err, "key %q", in.Key())
			assert.Equal(t, u.String(), in.Key())
			assert.Equal(t, uuid.Version(4), u.Version())
			assert.Equal(t, uuid.RFC4122, u.Variant())
			assert.False(t, seen[in.Key()], "key %q twice", in.Key())
			seen[in.Key()] = true
		}
	}
}

func TestNewIntentKeyIsFixed(t *testing.T) {
	a, err := NewIntent("POST", "https://api.example/pay", []byte(`{}`))
	require.NoError(t, err)
	b, err := NewIntent("POST", "https://api.example/pay", []byte(`{}`))
	require.NoError(t, err)
	assert.NotEqual(t, a.Key(), b.Key(), "two intents must not share a key")
	k := a.Key()
	c := &Client{}
	for range 3 { // every attempt presents the key fixed at creation
		req, err := (&intentSender{c: c, in: a}).request(context.Background(), true)
		require.NoError(t, err)
		assert.Equal(t, k, req.Header.Get(DefaultKeyHeader))
		assert.Equal(t, k, a.Key())
	}
}

func TestNewIntentCopiesInput(t *testing.T) {
	body := []byte("hello")
	in, err := NewIntent("POST", "http://h/x", body, WithHeader("X-Trace", "1"))
	require.NoError(t, err)
	body[0] = 'j'
	assert.Equal(t, "hello", string(in.Body()))
	got := in.Body()
	got[0] = 'y'
	assert.Equal(t, "hello", string(in.Body()), "Body must return a copy")
	h := in.Header()
	h.Set("X-Trace", "2")
	assert.Equal(t, "1", in.Header().Get("X-Trace"), "Header must return a copy")
	assert.Len(t, in.Body(), 5)
}

func TestNewIntentCreatedAt(t *testing.T) {
	before := time.Now()
	in, err := NewIntent("POST", "http://h/x", nil)
	require.NoError(t, err)
	after := time.Now()
	assert.False(t, in.CreatedAt().Before(before) || in.CreatedAt().After(after),
		"CreatedAt %v not within [%v, %v]", in.CreatedAt(), before, after)
}

func TestNewIntentRejects(t *testing.T) {
	long := strings.Repeat("k", MaxKeyLen+1)
	tests := []struct {
		name    string
		method  string
		url     string
		body    []byte
		opts    []IntentOption
		wantErr error
		wantMsg string
	}{
		{"empty method", "", "http://h/", nil, nil, ErrInvalidIntent, `unsupported method ""`},
		{"unknown method", "FROB", "http://h/", nil, nil, ErrInvalidIntent, `unsupported method "FROB"`},
		{"lowercase method", "post", "http://h/", nil, nil, ErrInvalidIntent, `use "POST"`},
		{"connect", "CONNECT", "http://h/", nil, nil, ErrInvalidIntent, "CONNECT"},
		{"empty url", "GET", "", nil, nil, ErrInvalidIntent, "empty URL"},
		{"relative url", "GET", "/x", nil, nil, ErrInvalidIntent, "scheme"},
		{"ftp", "GET", "ftp://h/x", nil, nil, ErrInvalidIntent, "scheme"},
		{"no host", "GET", "http:///x", nil, nil, ErrInvalidIntent, "no host"},
		{"bad url", "GET", "http://h/%zz", nil, nil, ErrInvalidIntent, "URL"},
		{"user info", "GET", "https://bob:s3cret@h/x", nil, nil, ErrInvalidIntent, "user info"},
		{"body too large", "POST", "http://h/", make([]byte, MaxBodyBytes+1), nil, ErrBodyTooLarge, "limit"},
		{"empty key", "POST", "http://h/", nil, []IntentOption{WithKey("")}, ErrInvalidKey, "empty"},
		{"long key", "POST", "http://h/", nil, []IntentOption{WithKey(long)}, ErrInvalidKey, "256 bytes"},
		{"space in key", "POST", "http://h/", nil, []IntentOption{WithKey("a b")}, ErrInvalidKey, "offset 1"},
		{"quote in key", "POST", "http://h/", nil, []IntentOption{WithKey(`a"b`)}, ErrInvalidKey, "not allowed"},
		{"comma in key", "POST", "http://h/", nil, []IntentOption{WithKey("a,b")}, ErrInvalidKey, "not allowed"},
		{"non-ascii key", "POST", "http://h/", nil, []IntentOption{WithKey("clé")}, ErrInvalidKey, "visible ASCII"},
		{"key on GET", "GET", "http://h/", nil, []IntentOption{WithKey("k")}, ErrInvalidIntent, "safe method"},
		{"authorization", "POST", "http://h/", nil, []IntentOption{WithHeader("authorization", "Bearer x")}, ErrSecretHeader, "Authorization"},
		{"cookie", "POST", "http://h/", nil, []IntentOption{WithHeader("Cookie", "a=b")}, ErrSecretHeader, "Cookie"},
		{"proxy auth", "POST", "http://h/", nil, []IntentOption{WithHeader("Proxy-Authorization", "x")}, ErrSecretHeader, "Proxy-Authorization"},
		{"key header", "POST", "http://h/", nil, []IntentOption{WithHeader("Idempotency-Key", "x")}, ErrInvalidIntent, "use WithKey"},
		{"host header", "POST", "http://h/", nil, []IntentOption{WithHeader("Host", "x")}, ErrInvalidIntent, "managed"},
		{"bad header name", "POST", "http://h/", nil, []IntentOption{WithHeader("X Y", "x")}, ErrInvalidIntent, "token"},
		{"control in value", "POST", "http://h/", nil, []IntentOption{WithHeader("X-A", "a\r\nb")}, ErrInvalidIntent, "control"},
		{"long lane", "POST", "http://h/", nil, []IntentOption{WithLane(strings.Repeat("l", 256))}, ErrInvalidIntent, "lane"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, err := NewIntent(tt.method, tt.url, tt.body, tt.opts...)
			require.Error(t, err)
			assert.Nil(t, in)
			assert.ErrorIs(t, err, tt.wantErr)
			assert.Contains(t, err.Error(), tt.wantMsg)
			assert.True(t, strings.HasPrefix(err.Error(), "idem: "), "message %q lacks the idem: prefix", err)
			assert.NotContains(t, err.Error(), "s3cret", "an error must not echo a password")
		})
	}
}

func TestNewIntentNilOptionIgnored(t *testing.T) {
	in, err := NewIntent("POST", "http://h/", nil, nil, WithLane("a"))
	require.NoError(t, err)
	assert.Equal(t, "a", in.Lane())
}

func TestValidateKeyBounds(t *testing.T) {
	assert.NoError(t, validateKey(strings.Repeat("k", MaxKeyLen)))
	assert.NoError(t, validateKey("!#$%&'()*+-./09:;<=>?@AZ[]^_`az{|}~"))
	assert.ErrorIs(t, validateKey("\x7f"), ErrInvalidKey)
}

func TestDerive(t *testing.T) {
	in, err := NewIntent("POST", "http://h/orders", nil, WithKey("order-7"))
	require.NoError(t, err)
	charge := DeriveKey(in.Key(), "charge")
	assert.Equal(t, charge, DeriveKey("order-7", "charge"), "derive must be deterministic")
	assert.NotEqual(t, charge, DeriveKey(in.Key(), "ship"))
	assert.NotEqual(t, DeriveKey("a:b", "c"), DeriveKey("a", "b:c"))
	assert.NoError(t, validateKey(charge))
	u, err := uuid.Parse(charge)
	require.NoError(t, err)
	assert.Equal(t, uuid.Version(5), u.Version())
	// The namespace is part of the wire contract: a change would give a
	// resumed phase a new downstream key.
	assert.Equal(t, "8717821f-774a-555f-b1c9-02260029efc1", DeriveKey("order-7", "charge"))
}

func TestMarshalRoundTrip(t *testing.T) {
	in, err := NewIntent("POST", "https://api.example/pay?x=1", []byte(`{"amount":100}`),
		WithKey("k-1"), WithLane("acct-9"), WithHeader("Content-Type", "application/json"),
		WithHeader("X-Multi", "a"), WithHeader("X-Multi", "b"))
	require.NoError(t, err)

	data, err := in.MarshalBinary()
	require.NoError(t, err)
	var out Intent
	require.NoError(t, out.UnmarshalBinary(data))

	assert.Equal(t, in.Method(), out.Method())
	assert.Equal(t, in.URL(), out.URL())
	assert.Equal(t, in.Key(), out.Key())
	assert.Equal(t, in.Lane(), out.Lane())
	assert.Equal(t, in.Body(), out.Body())
	assert.Equal(t, in.Header(), out.Header())
	assert.True(t, in.CreatedAt().Equal(out.CreatedAt()), "CreatedAt %v != %v", out.CreatedAt(), in.CreatedAt())

	again, err := out.MarshalBinary()
	require.NoError(t, err)
	var twice Intent
	require.NoError(t, twice.UnmarshalBinary(again))
	assert.Equal(t, out.Key(), twice.Key())
}

func TestMarshalRoundTripMinimal(t *testing.T) {
	in, err := NewIntent("POST", "http://h/", nil, WithoutKey())
	require.NoError(t, err)
	data, err := in.MarshalBinary()
	require.NoError(t, err)
	var out Intent
	require.NoError(t, out.UnmarshalBinary(data))
	assert.Equal(t, "", out.Key())
	assert.Nil(t, out.Body())
	assert.Nil(t, out.Header())
}

func TestUnmarshalRejects(t *testing.T) {
	in, err := NewIntent("POST", "http://h/x", []byte("body"), WithKey("k"))
	require.NoError(t, err)
	good, err := in.MarshalBinary()
	require.NoError(t, err)

	reseal := func(b []byte) []byte { // recompute the checksum after a deliberate edit
		b = append([]byte(nil), b[:len(b)-4]...)
		return binenc.Seal(b)
	}
	edit := func(f func([]byte) []byte) []byte { return f(append([]byte(nil), good...)) }

	tests := []struct {
		name string
		data []byte
		msg  string
	}{
		{"empty", nil, "not an encoded intent"},
		{"wrong magic", edit(func(b []byte) []byte { b[0] = 'x'; return b }), "not an encoded intent"},
		{"unknown version", edit(func(b []byte) []byte { b[4] = 3; return reseal(b) }), "unknown version 3"},
		{"version zero", edit(func(b []byte) []byte { b[4] = 0; return reseal(b) }), "unknown version 0"},
		{"flipped byte", edit(func(b []byte) []byte { b[10] ^= 0xff; return b }), "checksum"},
		{"truncated", good[:len(good)-5], "checksum"},
		{"trailing", reseal(append(append([]byte(nil), good[:len(good)-4]...), 0, 0, 0, 0, 1)), "trailing"},
		{"lowercase method", edit(func(b []byte) []byte {
			return reseal(bytes.Replace(b, []byte("POST"), []byte("post"), 1))
		}), "case-sensitive"},
		{"key on GET", reseal(mustEncode(t, func() *Intent {
			g, _ := NewIntent("POST", "http://h/x", nil)
			g.method = "GET" // craft the invalid state directly
			return g
		}())), "safe method"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out Intent
			err := out.UnmarshalBinary(tt.data)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidIntent)
			assert.Contains(t, err.Error(), tt.msg)
			assert.Equal(t, "", out.Method(), "a failed decode must leave the intent empty")
		})
	}
}

func TestUnmarshalIntoUsedIntent(t *testing.T) {
	in, err := NewIntent("POST", "http://h/x", nil)
	require.NoError(t, err)
	data, err := in.MarshalBinary()
	require.NoError(t, err)
	err = in.UnmarshalBinary(data)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "already in use")
}

func mustEncode(t *testing.T, in *Intent) []byte {
	t.Helper()
	b, err := in.MarshalBinary()
	require.NoError(t, err)
	return b
}

func TestIntentHeaderNilWhenNone(t *testing.T) {
	in, err := NewIntent("POST", "http://h/", nil)
	require.NoError(t, err)
	assert.Equal(t, http.Header(nil), in.Header())
}

func TestKeySupplied(t *testing.T) {
	gen, err := NewIntent("POST", "http://h/", nil)
	require.NoError(t, err)
	sup, err := NewIntent("POST", "http://h/", nil, WithKey("k"))
	require.NoError(t, err)
	none, err := NewIntent("POST", "http://h/", nil, WithoutKey())
	require.NoError(t, err)
	assert.False(t, gen.KeySupplied())
	assert.True(t, sup.KeySupplied())
	assert.False(t, none.KeySupplied())
	for _, in := range []*Intent{gen, sup, none} {
		data, err := in.MarshalBinary()
		require.NoError(t, err)
		var out Intent
		require.NoError(t, out.UnmarshalBinary(data))
		assert.Equal(t, in.KeySupplied(), out.KeySupplied(), "KeySupplied survives encoding")
	}
}

// TestUnmarshalHugeHeaders: a stored intent with more header bytes than an
// Intent may hold is refused, in time linear in its size.
func TestUnmarshalHugeHeaders(t *testing.T) {
	in, err := NewIntent("POST", "http://h/", nil)
	require.NoError(t, err)
	name := strings.Repeat("n", 200)
	one := []field{{name: name, values: make([]string, 32000)}} // crafted past NewIntent's checks
	var many []field
	for i := range 20000 {
		many = append(many, field{name: fmt.Sprintf("X-H-%d", i), values: []string{"v"}})
	}
	for _, h := range [][]field{one, many} {
		in.header = h
		data, err := in.MarshalBinary()
		require.NoError(t, err)
		var out Intent
		err = out.UnmarshalBinary(data)
		assert.ErrorIs(t, err, ErrInvalidIntent)
		assert.ErrorContains(t, err, "headers take over")
	}
}

// TestIntentHeaderMerge: names differing in case are one header, values keep
// their order, past the point where the intent indexes its headers too, and
// the headers survive encoding and reach the request.
func TestIntentHeaderMerge(t *testing.T) {
	for _, n := range []int{1, maxScan + 4} {
		opts := []IntentOption{WithHeader("x-a", "1")}
		for i := range n {
			opts = append(opts, WithHeader(fmt.Sprintf("x-f%d", i), "v"))
		}
		opts = append(opts, WithHeader("X-A", "2"), withHeaderValues("X-a", []string{"3", "4"}))
		in, err := NewIntent("POST", "http://h/x", nil, opts...)
		require.NoError(t, err)
		want := http.Header{"X-A": {"1", "2", "3", "4"}}
		for i := range n {
			want[http.CanonicalHeaderKey(fmt.Sprintf("x-f%d", i))] = []string{"v"}
		}
		assert.Equal(t, want, in.Header(), "%d other headers", n)

		data, err := in.MarshalBinary()
		require.NoError(t, err)
		var out Intent
		require.NoError(t, out.UnmarshalBinary(data))
		assert.Equal(t, want, out.Header(), "%d other headers, decoded", n)

		req, err := (&intentSender{c: &Client{}, in: &out}).request(context.Background(), true)
		require.NoError(t, err)
		for k, vs := range want {
			assert.Equal(t, vs, req.Header[k], k)
		}
		req.Header["X-A"] = append(req.Header["X-A"], "5")
		assert.Equal(t, []string{"1", "2", "3", "4"}, out.Header()["X-A"], "a request's append must not reach the intent")
		key := out.Key()
		req.Header[DefaultKeyHeader] = append(req.Header[DefaultKeyHeader], "other")
		req.Header[DefaultKeyHeader][0] = "changed"
		assert.Equal(t, key, out.Key(), "a request's key header must not reach the intent")
	}
}

// encodeV1 writes in as version 1 did, with the history it then held: flags
// (supplied, in doubt) and FirstSentAt.
func encodeV1(in *Intent, inDoubt bool, firstSent int64) []byte {
	b := append([]byte(encodingMagic), 1)
	for _, s := range [...]string{in.method, in.url, in.key, in.lane} {
		b = binenc.Append(b, s)
	}
	var flags uint64
	if in.supplied {
		flags |= flagSupplied
	}
	if inDoubt {
		flags |= flagV1InDoubt
	}
	b = binary.AppendUvarint(b, flags)
	b = binary.AppendVarint(b, binenc.Nanos(in.createdAt))
	b = binary.AppendVarint(b, firstSent)
	b = binary.AppendUvarint(b, uint64(len(in.header)))
	for _, f := range in.header {
		b = binenc.AppendHeader(b, f.name, f.values)
	}
	b = binenc.Append(b, in.body)
	return binenc.Seal(b)
}

// TestUnmarshalVersion1: intents a queue stored before the history left the
// Intent still decode, to the same intent; what version 1 kept of the
// history is dropped, and a bad FirstSentAt is still refused.
func TestUnmarshalVersion1(t *testing.T) {
	in, err := NewIntent("POST", "https://api.example/pay", []byte(`{"a":1}`),
		WithKey("k-1"), WithLane("lane-Zq"), WithHeader("Content-Type", "application/json"))
	require.NoError(t, err)
	for _, inDoubt := range []bool{false, true} {
		var out Intent
		require.NoError(t, out.UnmarshalBinary(encodeV1(in, inDoubt, time.Now().UnixNano())))
		assert.Equal(t, fzFieldsOf(in), fzFieldsOf(&out))
		again, err := out.MarshalBinary()
		require.NoError(t, err)
		assert.Equal(t, byte(encodingVersion), again[len(encodingMagic)], "written as the current version")
	}
	var bad Intent
	assert.ErrorContains(t, bad.UnmarshalBinary(encodeV1(in, false, -5)), "before 1970")

	current, err := in.MarshalBinary()
	require.NoError(t, err)
	current[len(encodingMagic)] = 2
	flags := bytes.Index(current, []byte("lane-Zq")) + len("lane-Zq") // the flags follow the lane
	current[flags] |= flagV1InDoubt
	var strict Intent
	assert.ErrorContains(t, strict.UnmarshalBinary(binenc.Seal(current[:len(current)-4])), "flags",
		"version 2 has no in-doubt flag")
}
