package main

import (
	"slices"
	"testing"
	"time"

	"github.com/idem-go/idem/queue"
)

func TestParseStates(t *testing.T) {
	tests := []struct {
		in   []string
		want []queue.State
		err  bool
	}{
		{nil, nil, false},
		{[]string{"pending"}, []queue.State{queue.Pending}, false},
		{[]string{"Failed", " expired", "failed"}, []queue.State{queue.Failed, queue.Expired}, false},
		{[]string{"in-flight"}, nil, true},
		{[]string{"in_flight"}, []queue.State{queue.InFlight}, false},
		{[]string{"inflight"}, nil, true},
		{[]string{"lost"}, nil, true},
	}
	for _, tt := range tests {
		got, err := parseStates(tt.in)
		if (err != nil) != tt.err || !slices.Equal(got, tt.want) {
			t.Errorf("parseStates(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestFmtAge(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want string
	}{
		{-time.Second, "0s"},
		{1499 * time.Millisecond, "1s"},
		{3*time.Minute + 12*time.Second, "3m12s"},
		{2*time.Hour + 5*time.Minute, "2h5m"},
		{76 * time.Hour, "3d4h"},
	}
	for _, tt := range tests {
		if got := fmtAge(tt.in); got != tt.want {
			t.Errorf("fmtAge(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
