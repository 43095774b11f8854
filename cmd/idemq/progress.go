package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// reporter shows a drain's progress on stderr: a bar on a terminal, plain
// lines elsewhere (a log, a pipe), where a bar's redraws are noise. Notes
// come from the queue's Notify on its delivery goroutine; mu guards the
// writers and the bar.
type reporter struct {
	mu      sync.Mutex
	w       io.Writer // lines, escaped (a textWriter)
	raw     io.Writer // the bar, whose redraws are control bytes
	wantBar bool
	bar     *progressbar.ProgressBar // nil until start, and in plain mode
}

// newReporter returns a reporter writing lines to w and the bar to raw,
// the same stream unescaped; mode is auto, bar or plain.
func newReporter(w, raw io.Writer, mode string) *reporter {
	wantBar := mode == "bar"
	if f, ok := raw.(*os.File); ok && mode == "auto" {
		wantBar = term.IsTerminal(int(f.Fd()))
	}
	return &reporter{w: w, raw: raw, wantBar: wantBar}
}

// start begins the report of a drain of total records.
func (r *reporter) start(total int, line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.wantBar {
		fmt.Fprintf(r.w, "idemq: %s\n", line)
		return
	}
	r.bar = progressbar.NewOptions(total,
		progressbar.OptionSetWriter(r.raw),
		progressbar.OptionSetDescription("draining"),
		progressbar.OptionShowCount(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(r.raw) }),
	)
	r.bar.RenderBlank()
}

// set shows that n records settled.
func (r *reporter) set(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bar == nil {
		return
	}
	if n > r.bar.GetMax() {
		r.bar.ChangeMax(n)
	}
	r.bar.Set(n)
}

// note writes a line about something the drainer met, above the bar.
func (r *reporter) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bar != nil {
		r.bar.Clear()
	}
	fmt.Fprintf(r.w, "idemq: "+format+"\n", args...)
	if r.bar != nil {
		r.bar.RenderBlank()
	}
}

// finish ends the bar, leaving its last state on the screen.
func (r *reporter) finish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bar != nil && !r.bar.IsFinished() {
		r.bar.Exit()
		fmt.Fprintln(r.raw)
	}
}
