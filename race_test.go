//go:build race

package idem

// raceEnabled reports whether the race detector is on: it makes
// allocations of its own, which TestSuccessAllocs must not count.
const raceEnabled = true
