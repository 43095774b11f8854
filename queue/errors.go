package queue

import "errors"

// Sentinel errors. Match them with errors.Is.
var (
	// ErrQueueFull is returned by Enqueue when the intent would take the
	// queue past Options.MaxItems or Options.MaxBytes of unsettled records.
	ErrQueueFull = errors.New("queue: full")
	// ErrNeedsKey is returned by Enqueue for an intent whose method is not
	// idempotent (POST, PATCH) and that has no key: after an ambiguous
	// attempt nothing could make a resend safe.
	ErrNeedsKey = errors.New("queue: not idempotent and no key")
	// ErrKeyInUse is returned by Enqueue when a record with the same key
	// holds another operation (method, URL or body differ).
	ErrKeyInUse = errors.New("queue: key already queued for another operation")
	// ErrNotFound is returned when no record has the given ID.
	ErrNotFound = errors.New("queue: no such record")
	// ErrDiscarded is returned by Wait when the record it waits for is
	// removed by Discard before it settles.
	ErrDiscarded = errors.New("queue: record discarded")
	// ErrInFlight is returned by Discard for a record whose attempt is
	// under way.
	ErrInFlight = errors.New("queue: record in flight")
	// ErrNotResubmittable is returned by Resubmit and ForceResubmit for a
	// record that is not expired or failed, was resubmitted already, or was
	// found damaged.
	ErrNotResubmittable = errors.New("queue: record cannot be resubmitted")
	// ErrUnknownOutcome is returned by Resubmit for a record whose outcome
	// is Unknown: an attempt may have been applied, and a copy under a new
	// key would apply it again. Only the server can tell; ForceResubmit
	// copies such a record once it shows the operation was not applied.
	ErrUnknownOutcome = errors.New("queue: outcome unknown")
	// ErrClosed is returned by every method once Close was called.
	ErrClosed = errors.New("queue: closed")
	// ErrRunning is returned by Run while another Run drains the queue.
	ErrRunning = errors.New("queue: already running")
	// ErrLocked is returned by Open when another process holds the file.
	ErrLocked = errors.New("queue: file locked by another process")
	// ErrReadOnly is returned by Enqueue, Run, Wait, Discard, Resubmit,
	// ForceResubmit and ResetClock on a Queue opened with Options.ReadOnly.
	ErrReadOnly = errors.New("queue: opened read-only")
	// ErrDamaged is returned by Open, and by reads, when the file or a
	// record in it is damaged, or the file lacks commits the queue
	// acknowledged; and by every call after a commit failed once its meta
	// page was written (see the package doc's Damage). Open never writes to
	// a file it cannot read; a damaged record in a readable file it
	// quarantines instead (see Record.Damaged).
	ErrDamaged = errors.New("queue: file damaged")
	// ErrNewerVersion is wrapped, beside ErrDamaged, by the error of a
	// record whose binary form is of a version newer than this build
	// reads. A store shared by processes of several builds, as in a
	// rolling upgrade, must leave such a record for a newer process
	// rather than quarantine it.
	ErrNewerVersion = errors.New("queue: record of a newer version")
	// ErrHookPanicked is wrapped by the error of an EventLaneHeld whose
	// lane was held because a hook the drainer ran for its head panicked
	// (see the package doc's "A hook that panics"); the record's LastError
	// says the same.
	ErrHookPanicked = errors.New("queue: a hook panicked")
	// ErrInvalidOptions is returned by Open for inconsistent Options.
	ErrInvalidOptions = errors.New("queue: invalid options")
)
