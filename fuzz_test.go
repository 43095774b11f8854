package idem

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"reflect"
	rtmetrics "runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/binenc"
	"github.com/idem-go/idem/internal/methods"
)

// The fuzz targets below run their seed corpora (testdata/fuzz/<Name>) as
// ordinary tests; run one with, for example,
//
//	go test -run '^$' -fuzz '^FuzzIntentUnmarshal$' -fuzztime 5m .

// FuzzValidateKey checks validateKey against an independent statement of
// the rule, and that an accepted key makes an intent, reaches the request
// header unchanged in both formats and survives the binary form.
func FuzzValidateKey(f *testing.F) {
	f.Fuzz(func(t *testing.T, key string) {
		err := validateKey(key)
		if want := fzKeyRule(key); (err == nil) != want {
			t.Fatalf("validateKey(%q) = %v; want accepted = %v", key, err, want)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidKey) || !strings.HasPrefix(err.Error(), "idem: invalid idempotency key: ") {
				t.Fatalf("validateKey(%q) = %q; want an ErrInvalidKey saying what is wrong", key, err)
			}
			if _, nerr := NewIntent("POST", "https://api.example/pay", nil, WithKey(key)); !errors.Is(nerr, ErrInvalidKey) {
				t.Fatalf("NewIntent with invalid key %q: err = %v, want ErrInvalidKey", key, nerr)
			}
			return
		}
		in, err := NewIntent("POST", "https://api.example/pay", nil, WithKey(key))
		if err != nil {
			t.Fatalf("NewIntent with valid key %q: %v", key, err)
		}
		if in.Key() != key || !in.KeySupplied() {
			t.Fatalf("Key() = %q, KeySupplied() = %v; want %q, true", in.Key(), in.KeySupplied(), key)
		}
		for _, sf := range []bool{false, true} {
			c := &Client{KeySFString: sf}
			req, err := (&intentSender{c: c, in: in}).request(context.Background(), true)
			if err != nil {
				t.Fatalf("request with key %q: %v", key, err)
			}
			want := key
			if sf {
				want = `"` + key + `"`
			}
			if got := req.Header.Get(DefaultKeyHeader); got != want {
				t.Fatalf("key header = %q, want %q", got, want)
			}
		}
		data, err := in.MarshalBinary()
		if err != nil {
			t.Fatalf("MarshalBinary: %v", err)
		}
		var out Intent
		if err := out.UnmarshalBinary(data); err != nil {
			t.Fatalf("UnmarshalBinary of an intent with key %q: %v", key, err)
		}
		if out.Key() != key || !out.KeySupplied() {
			t.Fatalf("after the round trip Key() = %q, KeySupplied() = %v; want %q, true", out.Key(), out.KeySupplied(), key)
		}
	})
}

// fzKeyRule is the key rule as the documentation states it.
func fzKeyRule(k string) bool {
	if len(k) < 1 || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c < 0x21 || c > 0x7e || c == '"' || c == '\\' || c == ',' {
			return false
		}
	}
	return true
}

// FuzzIntentUnmarshal feeds arbitrary bytes to UnmarshalBinary, as they
// are and resealed with a valid checksum (so that mutations reach the
// decoder behind the CRC). Decoding never panics, allocates in proportion
// to the input, leaves the Intent empty on failure, and a decoded intent
// re-encodes to the same fields.
func FuzzIntentUnmarshal(f *testing.F) {
	for _, in := range fzIntents(f) {
		data, err := in.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		if err := new(Intent).UnmarshalBinary(data); err != nil {
			f.Fatalf("seed %s %s does not decode: %v", in.Method(), in.URL(), err)
		}
		f.Add(data)
		f.Add(data[:len(data)-4]) // the resealed form is the valid one
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fzCheckUnmarshal(t, data)
		fzCheckUnmarshal(t, binenc.Seal(bytes.Clone(data)))
	})
}

func fzCheckUnmarshal(t *testing.T, data []byte) {
	t.Helper()
	var in Intent
	before := fzHeapAlloc()
	err := in.UnmarshalBinary(data)
	// Generous: a decoded header map costs tens of bytes per input byte;
	// a hostile length prefix would cost gigabytes.
	if used, limit := fzHeapAlloc()-before, uint64(256*len(data)+1<<20); used > limit {
		t.Fatalf("UnmarshalBinary of %d bytes allocated %d bytes, limit %d", len(data), used, limit)
	}
	if err != nil {
		if !errors.Is(err, ErrInvalidIntent) && !errors.Is(err, ErrInvalidKey) &&
			!errors.Is(err, ErrSecretHeader) && !errors.Is(err, ErrBodyTooLarge) {
			t.Fatalf("UnmarshalBinary error %q wraps no documented sentinel", err)
		}
		if !strings.HasPrefix(err.Error(), "idem: ") {
			t.Fatalf("UnmarshalBinary error %q lacks the idem: prefix", err)
		}
		if in.Method() != "" || in.URL() != "" || in.Key() != "" || in.Header() != nil || in.Body() != nil {
			t.Fatalf("a failed UnmarshalBinary left fields set: %+v", fzFieldsOf(&in))
		}
		return
	}
	again, err := in.MarshalBinary()
	if err != nil {
		t.Fatalf("MarshalBinary of a decoded intent: %v", err)
	}
	var out Intent
	if err := out.UnmarshalBinary(again); err != nil {
		t.Fatalf("decoded intent %+v re-encodes to bytes that do not decode: %v", fzFieldsOf(&in), err)
	}
	if got, want := fzFieldsOf(&out), fzFieldsOf(&in); !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip changed the intent:\n got %+v\nwant %+v", got, want)
	}
}

// fzIntentFields is an Intent's state in comparable form.
type fzIntentFields struct {
	Method, URL, Key, Lane string
	KeySupplied            bool
	CreatedAt              int64
	Header                 http.Header
	Body                   []byte
}

func fzFieldsOf(in *Intent) fzIntentFields {
	return fzIntentFields{
		Method: in.Method(), URL: in.URL(), Key: in.Key(), Lane: in.Lane(), KeySupplied: in.KeySupplied(),
		CreatedAt: binenc.Nanos(in.CreatedAt()),
		Header:    in.Header(), Body: in.Body(),
	}
}

// fzHeapAlloc returns the bytes allocated on the heap so far.
func fzHeapAlloc() uint64 {
	s := []rtmetrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64()
}

// fzIntents are valid intents of every shape, with fixed times so that
// their encodings are stable.
func fzIntents(tb testing.TB) []*Intent {
	tb.Helper()
	created := time.Date(2026, 12, 2, 10, 0, 0, 123, time.UTC)
	specs := []struct {
		method, url string
		body        []byte
		opts        []IntentOption
	}{
		{"GET", "http://h/", nil, nil},
		{"POST", "https://api.example/payments?x=1", []byte(`{"amount":100}`), []IntentOption{
			WithKey("order-1"), WithLane("acct-7"), WithHeader("Content-Type", "application/json"),
			WithHeader("X-Trace", "a"), WithHeader("x-trace", "b"),
		}},
		{"PATCH", "http://127.0.0.1:8080/r/1", []byte("\x00\xff"), []IntentOption{WithoutKey()}},
		{"DELETE", "https://h/r/2", nil, []IntentOption{WithKey("!#$%&'()*+-./09:;<=>?@AZ[]^_`az{|}~"), WithHeader("If-Match", "")}},
		{MethodQuery, "https://h/search", []byte("q=1"), []IntentOption{WithLane(strings.Repeat("l", maxLaneLen))}},
		{"PUT", "https://h/r/3", nil, []IntentOption{WithKey(strings.Repeat("k", MaxKeyLen))}},
	}
	out := make([]*Intent, 0, len(specs))
	for i, s := range specs {
		in, err := newIntent(s.method, s.url, s.body, created, s.opts)
		if err != nil {
			tb.Fatalf("fuzz intent %d: %v", i, err)
		}
		out = append(out, in)
	}
	return out
}

// FuzzClassify checks classify and decide over fuzzed facts against the
// invariants the decision table states.
func FuzzClassify(f *testing.F) {
	f.Fuzz(func(t *testing.T, method string, status int, hasKey bool, conns int, wroteHeaders, wroteRequest, gotResponse, withErr, earlierInDoubt bool, policy uint8, hint string, replayed uint8) {
		fc := facts{
			Method: method, HasKey: hasKey, Status: status,
			Wire: Wire{Conns: conns, WroteHeaders: wroteHeaders, WroteRequest: wroteRequest, GotResponse: gotResponse,
				Resent: conns > 1 && wroteHeaders},
			EarlierInDoubt: earlierInDoubt, DeletePolicy: DeletePolicy(policy),
		}
		if withErr {
			fc.Err = errors.New("read: connection reset by peer")
		} else {
			fc.Header = http.Header{}
			if hint != "" {
				fc.Header.Set("Stripe-Should-Retry", hint)
			}
			if i := int(replayed % 4); i > 0 {
				fc.Header.Set(replayHeaders[i-1], "true")
			}
		}
		headerBefore := fc.Header.Clone()
		c := classify(fc)
		d := decide(fc)
		if d2 := decide(fc); !reflect.DeepEqual(d, d2) {
			t.Fatalf("decide is not deterministic: %+v then %+v", d, d2)
		}
		if !reflect.DeepEqual(fc.Header, headerBefore) {
			t.Fatalf("decide changed the response header")
		}
		if d.Class != c {
			t.Fatalf("decide(...).Class = %v, classify = %v", d.Class, c)
		}
		if c < ClassApplied || c > ClassInvalid {
			t.Fatalf("classify = %v, not a valid class", c)
		}
		hintTrue := !withErr && strings.EqualFold(strings.TrimSpace(hint), "true")

		switch d.Action {
		case ActionDone:
			if !d.Outcome.Succeeded() || d.Reason != "" || d.Cause != nil {
				t.Fatalf("done with %+v", d)
			}
		case ActionRetry:
			if d.Reason != "" || d.Cause != nil {
				t.Fatalf("retry with a stop reason: %+v", d)
			}
		case ActionStop:
			if d.Reason == "" || d.Outcome.Succeeded() {
				t.Fatalf("stop without a reason, or with success: %+v", d)
			}
		default:
			t.Fatalf("Action = %v, not a valid action", d.Action)
		}
		if withErr && !wroteHeaders && c != ClassNeverSent {
			t.Fatalf("an error before the headers were written is %v, want never sent", c)
		}
		if withErr && wroteHeaders && c != ClassAmbiguous {
			t.Fatalf("an error after the headers were written is %v, want ambiguous", c)
		}
		if !withErr && status >= 200 && status <= 299 && (c != ClassApplied || d.Action != ActionDone || d.Outcome != Applied) {
			t.Fatalf("%d is %+v, want applied and done", status, d)
		}
		if c == ClassAmbiguous && !hasKey && !methods.Idempotent(method) && d.Action == ActionRetry && !hintTrue {
			t.Fatalf("%q without key, ambiguous, retried without the server's say-so: %+v", method, d)
		}
		moved := !withErr && (status == http.StatusMovedPermanently || status == http.StatusFound) // stops with ErrRedirected
		if c == ClassAmbiguous && !hasKey && !methods.Idempotent(method) && !hintTrue && !moved && !errors.Is(d.Cause, ErrNoKey) {
			t.Fatalf("%q without key, ambiguous: cause %v, want ErrNoKey", method, d.Cause)
		}
		if c == ClassKeyReused && (d.Action != ActionStop || !errors.Is(d.Cause, ErrKeyReused)) {
			t.Fatalf("key reused: %+v, want a stop with ErrKeyReused", d)
		}
		// In doubt: an ambiguous attempt, now or earlier, a resend by
		// net/http after the headers went out, or a keyed 409.
		doubt := c == ClassAmbiguous || earlierInDoubt || fc.Wire.Resent || (!withErr && hasKey && status == 409)
		if doubt && !fzSucceeded(c) && (d.Outcome != Unknown || !d.InDoubt && !earlierInDoubt) {
			t.Fatalf("class %v, earlier ambiguous %v, resent %v: %+v, want unknown", c, earlierInDoubt, fc.Wire.Resent, d)
		}
		if !doubt && !fzSucceeded(c) && (d.Outcome != NotApplied || d.InDoubt) {
			t.Fatalf("class %v with nothing in doubt: %+v, want not applied", c, d)
		}
		if c == ClassAlreadyApplied && (method != http.MethodDelete || (status != 404 && status != 410)) {
			t.Fatalf("%s %d is already applied; only a DELETE's 404 or 410 can be", method, status)
		}
		if strings.EqualFold(strings.TrimSpace(hint), "false") && !withErr && d.Action == ActionRetry {
			t.Fatalf("retry although the server said false: %+v", d)
		}
		if replayed%4 > 0 && !withErr && d.Action == ActionRetry {
			t.Fatalf("retry of a replayed answer (%s), which the server would give again: %+v", replayHeaders[replayed%4-1], d)
		}
	})
}

func fzSucceeded(c Class) bool { return c == ClassApplied || c == ClassAlreadyApplied }
