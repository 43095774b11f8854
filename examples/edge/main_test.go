package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRun plays the story with its defaults: the readings queued through the
// outage and the restart are each applied once, and the first reading, sent
// once before the outage, expires at its horizon with outcome unknown and is
// not sent again.
func TestRun(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(nil, &out, &errOut)
	t.Log("\n" + out.String())
	require.Empty(t, errOut.String())
	assert.Equal(t, 0, code, "exit code")

	got := summary(t, out.String())
	want := map[string]int{
		"readings": 13, "applied": 13, "duplicates": 0, "lost": 0, "misreported": 0,
		"unknown": 1, "expired": 1, "unsettled": 0, "late": 0,
	}
	assert.Equal(t, want, got, "last line")

	text := out.String()
	assert.Contains(t, text, "started again on the same file: 13 readings pending, 0 settled")
	assert.Contains(t, text, "queue: r-00 expired, unknown: past the horizon")
	// r-00: expired, one request seen by the server (before the outage), one
	// effect; every other reading done, with one effect.
	assert.Regexp(t, `(?m)^r-00\s+door\s+expired, unknown\s+\d+\s+1\s+1$`, text)
	assert.Len(t, regexp.MustCompile(`(?m)^r-\d\d\s+\w+\s+done, applied( \(replayed\))?\s+\d+\s+\d+\s+1$`).FindAllString(text, -1), 12, "readings done")
	// r-05 and r-10 had their answers dropped: the server's store answers
	// their resends. Another reading may be answered so too, if an attempt
	// of it outlived the 250 ms attempt timeout on a busy machine.
	for _, r := range []string{"r-05", "r-10"} {
		assert.Regexp(t, `(?m)^`+r+`\s+\w+\s+done, applied \(replayed\)`, text, "%s answered from the server's store after a dropped answer", r)
	}
}

// TestProblems checks that each failure the command exits 1 for is named.
func TestProblems(t *testing.T) {
	good := report{readings: 13, applied: 13, unknown: 1, expired: 1, horizonExpired: true}
	tests := []struct {
		name string
		r    report
		want string
	}{
		{"good", good, ""},
		{"duplicate", func() report { r := good; r.duplicates = 1; return r }(), "1 readings applied more than once"},
		{"misreport", func() report { r := good; r.misreported = 2; return r }(), "2 readings misreported"},
		{"unsettled", func() report { r := good; r.unsettled = 1; return r }(), "1 readings neither settled nor reported"},
		{"late", func() report { r := good; r.late = 1; return r }(), "1 requests sent past their key's horizon"},
		{"no horizon", func() report { r := good; r.horizonExpired = false; return r }(), "the first reading did not expire: the run did not show the horizon"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := strings.Join(tt.r.problems(), "; ")
			assert.Equal(t, tt.want, got, "problems()")
		})
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-readings", "0"},
		{"-margin", "3s"},
		{"-margin", "0s"},
		{"-retention", "400ms", "-margin", "100ms"},
		{"-retention", "2m"},
		{"extra"},
		{"-nope"},
	} {
		var out, errOut bytes.Buffer
		assert.Equal(t, 2, run(args, &out, &errOut), "run(%q)", args)
		assert.NotEmpty(t, errOut.String(), "run(%q) must say what was wrong", args)
	}
}

// summary reads the last line back, field by field.
func summary(t *testing.T, out string) map[string]int {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	require.Regexp(t, `^edge:( \w+=\d+)+$`, last, "last line")
	got := map[string]int{}
	for _, m := range regexp.MustCompile(`(\w+)=(\d+)`).FindAllStringSubmatch(last, -1) {
		v, err := strconv.Atoi(m[2])
		require.NoError(t, err)
		got[m[1]] = v
	}
	return got
}
