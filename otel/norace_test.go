//go:build !race

package idemotel

// raceEnabled reports whether the race detector is on: it makes
// allocations of its own, which TestAttemptHookAllocs must not count.
const raceEnabled = false
