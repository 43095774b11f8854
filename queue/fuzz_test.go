package queue

import (
	"bytes"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/binenc"
)

// FuzzRecordDecode feeds arbitrary bytes to decodeRecord, as they are and
// resealed with a valid checksum (so that mutations reach the decoder behind
// the CRC). Decoding never panics; a decoded record encodes, with its cached
// intent bytes and with its intent marshalled afresh, to bytes that decode to
// the same record. Run it with
//
//	go test -run '^$' -fuzz '^FuzzRecordDecode$' -fuzztime 5m ./queue/
func FuzzRecordDecode(f *testing.F) {
	for _, r := range fzRecords(f) {
		data, err := r.encode()
		if err != nil {
			f.Fatal(err)
		}
		if _, err := decodeRecord(data); err != nil {
			f.Fatalf("seed record %d (%s) does not decode: %v", r.ID, r.State, err)
		}
		f.Add(data)
		f.Add(data[:len(data)-4]) // the resealed form is the valid one
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fzCheckRecord(t, data)
		fzCheckRecord(t, binenc.Seal(bytes.Clone(data)))
	})
}

func fzCheckRecord(t *testing.T, data []byte) {
	t.Helper()
	r, err := decodeRecord(data)
	if err != nil {
		if r != nil {
			t.Fatalf("decodeRecord returned a record and the error %v", err)
		}
		if !errors.Is(err, errCorrupt) {
			t.Fatalf("decodeRecord error %q does not wrap errCorrupt", err)
		}
		return
	}
	if r.Intent == nil && (!r.Damaged || !r.State.Settled()) {
		t.Fatal("decoded record has no intent, and is not a settled damaged one")
	}
	want := fzRecordFields(r)

	again, err := r.encode() // reuses the decoded intent bytes
	if err != nil {
		t.Fatalf("encode of a decoded record: %v", err)
	}
	r2, err := decodeRecord(again)
	if err != nil {
		t.Fatalf("decoded record %+v re-encodes to bytes that do not decode: %v", want, err)
	}
	if got := fzRecordFields(r2); !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip changed the record:\n got %+v\nwant %+v", got, want)
	}

	r2.intentBytes = nil // marshal the intent afresh, as a new record would
	fresh, err := r2.encode()
	if err != nil {
		t.Fatalf("encode with a fresh intent: %v", err)
	}
	r3, err := decodeRecord(fresh)
	if err != nil {
		t.Fatalf("record with a re-marshalled intent does not decode: %v", err)
	}
	if got := fzRecordFields(r3); !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip with a fresh intent changed the record:\n got %+v\nwant %+v", got, want)
	}
}

// fzFields is a Record's state in comparable form: an empty header and a
// nil one are the same.
type fzFields struct {
	ID                                                             ID
	State                                                          State
	Outcome                                                        idem.Outcome
	Attempts                                                       int
	NextAttempt, FirstSentAt, LastAttemptAt, EnqueuedAt, SettledAt int64
	InDoubt, LeaseSetFirstSent, Reauthorized, Damaged              bool
	LastClass                                                      idem.Class
	LastStatus                                                     int
	LastError, Reason                                              string
	ResubmittedAs                                                  ID
	HasResult, Truncated                                           bool
	ResultStatus                                                   int
	ResultHeader                                                   http.Header
	ResultBody                                                     []byte
	Method, URL, Key, Lane                                         string
	KeySupplied                                                    bool
	CreatedAt                                                      int64
	Header                                                         http.Header
	Body                                                           []byte
	Trace                                                          map[string]string
}

func fzRecordFields(r *Record) fzFields {
	f := fzFields{
		ID: r.ID, State: r.State, Outcome: r.Outcome, Attempts: r.NumAttempts,
		NextAttempt: binenc.Nanos(r.NextAttempt), FirstSentAt: binenc.Nanos(r.FirstSentAt), LastAttemptAt: binenc.Nanos(r.LastAttemptAt),
		EnqueuedAt: binenc.Nanos(r.EnqueuedAt), SettledAt: binenc.Nanos(r.SettledAt),
		InDoubt: r.InDoubt, LeaseSetFirstSent: r.leaseSetFirstSent, Reauthorized: r.reauthorized, Damaged: r.Damaged,
		LastClass: r.LastClass, LastStatus: r.LastStatus, LastError: r.LastError, Reason: r.Reason,
		ResubmittedAs: r.ResubmittedAs, Trace: r.Trace,
	}
	if res := r.Result; res != nil {
		f.HasResult, f.Truncated, f.ResultStatus, f.ResultBody = true, res.Truncated, res.Status, res.Body
		if len(res.Header) > 0 {
			f.ResultHeader = res.Header
		}
	}
	in := r.Intent
	if in == nil {
		return f
	}
	f.Method, f.URL, f.Key, f.Lane, f.KeySupplied = in.Method(), in.URL(), in.Key(), in.Lane(), in.KeySupplied()
	f.CreatedAt = binenc.Nanos(in.CreatedAt())
	f.Header, f.Body = in.Header(), in.Body()
	return f
}

// fzRecords are valid records of several shapes and states.
func fzRecords(tb testing.TB) []*Record {
	tb.Helper()
	base := time.Unix(1_800_000_000, 0)
	mk := func(method, url string, body []byte, opts ...idem.IntentOption) *idem.Intent {
		in, err := idem.NewIntent(method, url, body, opts...)
		if err != nil {
			tb.Fatal(err)
		}
		return in
	}
	pending := &Record{
		ID: 1, State: Pending, Outcome: idem.Unknown, NextAttempt: base, EnqueuedAt: base,
		Intent: mk("POST", "https://api.example/pay", []byte(`{"amount":1}`), idem.WithKey("k-1"), idem.WithLane("acct")),
	}
	inFlight := &Record{
		ID: 2, State: InFlight, NumAttempts: 1, FirstSentAt: base, LastAttemptAt: base, leaseSetFirstSent: true,
		Intent: mk("PUT", "http://127.0.0.1:8080/r/1", nil, idem.WithoutKey(), idem.WithHeader("If-Match", `"e1"`)),
	}
	done := &Record{
		ID: 3, State: Done, Outcome: idem.Applied, NumAttempts: 2, InDoubt: true, reauthorized: true,
		LastClass: idem.ClassApplied, LastStatus: 201, SettledAt: base.Add(time.Minute),
		Result: &Response{Status: 201, Header: http.Header{"Location": {"/pay/1"}, "Idempotent-Replayed": {"true"}}, Body: []byte(`{"id":1}`)},
		Intent: mk("POST", "https://api.example/pay", []byte("x"), idem.WithKey("k-3")),
	}
	failed := &Record{
		ID: 4, State: Failed, Outcome: idem.Unknown, NumAttempts: 3, InDoubt: true, LastClass: idem.ClassRejected,
		LastStatus: 412, LastError: "boom", Reason: "precondition failed (412)", ResubmittedAs: 9, SettledAt: base.Add(time.Hour),
		Result: &Response{Status: 412, Body: []byte(strings.Repeat("e", 64)), Truncated: true},
		Intent: mk("DELETE", "https://h/r/2", nil, idem.WithKey("k-4")),
	}
	expired := &Record{
		ID: 5, State: Expired, Outcome: idem.NotApplied, Reason: "horizon", SettledAt: base.Add(24 * time.Hour),
		Intent: mk("GET", "https://h/r?q=1", nil),
	}
	damaged := &Record{
		ID: 6, State: Failed, Outcome: idem.Unknown, Damaged: true, Reason: "damaged: checksum mismatch", SettledAt: base,
	}
	salvaged := &Record{
		ID: 7, State: Failed, Outcome: idem.Unknown, Damaged: true, Reason: "damaged: unknown state 9", SettledAt: base,
		Intent: mk("POST", "https://h/p", []byte("x"), idem.WithKey("k-7"), idem.WithLane("l")),
	}
	traced := &Record{
		ID: 8, State: Pending, NextAttempt: base, EnqueuedAt: base,
		Trace:  map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "congo=t61rcWkgMzE"},
		Intent: mk("POST", "https://api.example/pay", []byte(`{"amount":2}`), idem.WithKey("k-8"), idem.WithLane("acct")),
	}
	return []*Record{pending, inFlight, done, failed, expired, damaged, salvaged, traced}
}
