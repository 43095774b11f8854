//go:build !linux

package latproxy

import "time"

// sleeper waits on the runtime's timers, which may fire a millisecond or
// more late.
type sleeper struct{}

func newSleeper() *sleeper { return &sleeper{} }

func (*sleeper) sleep(d time.Duration) { time.Sleep(d) }

func (*sleeper) close() {}
