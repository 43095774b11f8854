// Package queue is a durable queue of idem intents in one bbolt file: what an
// edge device or a service uses to keep writes through outages, restarts and
// power loss, sending each exactly as idem.Client would, with the same key,
// however late.
//
// It sits where an outbox table sits beside a database: the application
// hands over the intent, the queue makes it durable and delivers it when the
// network allows.
//
// # Basics
//
// Open the file, start the drainer, enqueue:
//
//	q, err := queue.Open("/var/lib/app/intents.db", queue.Options{Client: client})
//	...
//	go q.Run(ctx)
//	id, err := q.Enqueue(ctx, intent) // durable when it returns
//	rec, err := q.Wait(ctx, id)       // or Options.Notify, or Get later
//
// Enqueue returns only after an fsync'd commit; concurrent producers share
// commits. A record then moves pending -> in flight -> done | failed |
// expired. Before each attempt a lease commit marks it in flight and records
// FirstSentAt, the instant the server may first have seen the key. The
// attempt is one idem.Client.Try: its verdict, idem's decision table's,
// settles the record or asks for a retry, which the queue's own schedule
// sets, with a backoff (or the server's Retry-After, if longer) that
// survives restarts: the wait after attempt n is a Client's after attempt n.
//
// Lanes order delivery: records of one lane (Intent.Lane, say a resource)
// go one at a time in enqueue order, and a lane whose head must wait blocks
// only itself; lanes drain in parallel. The drainer sends the head of every
// due lane at once, up to Options.Workers (64 by default); in the bbolt
// file the settles of different lanes share commits as concurrent enqueues
// do. The default lane is one FIFO.
//
// Open keeps the records in one bbolt file; New takes any other Store, such
// as package pgqueue's, which keeps them in PostgreSQL for several replicas.
// A Store answers a supplied key already held through KeyHeld, judges a
// Resubmit by the Queue's rule in the commit that stores the copy, and proves
// itself with the suite of package queuetest, which every store runs. The
// Queue holds no lock of its own while it waits for its store, so a slow
// store slows the calls that need it only. Each call's context reaches the
// store (the drainer's calls get Run's, without its cancellation, so that
// what an attempt did is recorded as Run stops): Enqueue, Discard and
// Resubmit return on their context as far as the store can give up a write
// (pgqueue can, mid-statement; a bbolt transaction cannot, so the bbolt
// store checks the context before it starts), and the reads (Get, List,
// Counts, OldestPending, Wait) return on theirs whatever the store does.
// Close waits for the store calls under way, not for their callers.
//
// # The horizon
//
// A server forgets a key some time after it first saw it (Options.Retention;
// Stripe keeps keys at least 24 hours). A resend after that is a new
// operation: a silent duplicate. Before every attempt the queue checks
// now + Policy.AttemptTimeout against FirstSentAt + Retention - Margin, and a record
// past it becomes expired, with Outcome Unknown if an attempt left the
// operation in doubt (an ambiguous attempt, a 409 under its key, a resend
// by net/http: it may have happened) or NotApplied. Expired records are
// surfaced (Notify, List, Wait), never sent again and never resent under a
// new key unless an operator calls Resubmit. Resubmit refuses a record whose
// outcome is Unknown (ErrUnknownOutcome), since a copy would apply it twice
// if an attempt was applied; ForceResubmit copies it once the operator has
// checked with the server. The store decides in the commit that stores the
// copy, so a Resubmit racing the drainer sees the record in flight or
// settled, never in between; idemq's resubmit and queueweb's route ask it,
// and check nothing themselves. A record that never reached the server has
// no such horizon; Options.MaxAge limits stale intents instead.
//
// The horizon is judged by the wall clock, and edge devices boot with wrong
// clocks: the queue keeps the latest time it has seen (the mark), and while
// the clock reads earlier than that by more than Options.ClockTolerance it
// sends nothing and reports EventClockHeld. One reading moves the mark by
// MaxClockStep (a day) at most, so a clock that read ahead by mistake holds
// sends for about a day once set right, not until the wrong time comes; a
// clock that is right after a long time off is never held for it, its mark
// catching up a step per attempt. An operator who knows the clock is right
// calls ResetClock, which sets the mark to the clock and reports
// EventClockReset for the log. A record first sent while the clock read
// ahead, later than the clock now reads, expires: its horizon cannot be
// judged.
//
// A TLS certificate refused only for its validity dates
// (idem.ErrCertificateDates: expired or not yet valid by this clock, as
// every certificate is to a clock that is wrong) is a clock question too:
// the record is not failed and the attempt is not counted; sends to that
// host are held and reported (EventClockHeld, naming the host and the
// certificate's dates) until the clock reads within those dates, or Wake or
// ResetClock; the hold is not kept in the file, so a restart tries the host
// once more. A certificate for another host, or from an unknown authority,
// still fails the record (idem.ErrInvalidRequest).
//
// # What is guaranteed
//
//   - An intent Enqueue accepted is in the file; it is settled or still
//     there after any crash, kill or power loss that leaves the disk honest
//     about fsync. A file that lost a commit the queue acknowledged is
//     refused, never opened as if nothing happened (see Damage).
//   - Every attempt of a record presents the intent's key; a record is sent
//     again after a crash (at-least-once delivery), which the key makes
//     exactly-once at a server that implements the protocol.
//   - No attempt starts past the horizon; no record is dropped silently.
//   - At most one record of a lane is in flight, after a crash too. A lane
//     draining steadily settles a record and leases the next in one commit
//     (up to 16 in a row): a kill leaves either both in the file or
//     neither, so what the next run finds in flight is the one record whose
//     attempt may have been sent, and it is resent with its key.
//
// # Tracing
//
// Options.Tracer links the drain of each record to the code that enqueued
// it, for a tracing system (package github.com/idem-go/idem/otel has one;
// this package imports none). Enqueue stores what the Tracer's Inject
// returns for its context, such as the producer's W3C traceparent, in
// Record.Trace, which survives restarts with the record; before each
// attempt the drainer calls StartDrain with the record, runs the attempt
// under the context it returns (the Client's hooks see it), and calls the
// end it returned once, with what the queue did next. Without a Tracer
// nothing is stored and nothing is called. A traced record is stored in a
// version of the binary form that builds before Record.Trace do not read:
// where the store is shared, as pgqueue's is, they leave it for a newer
// build (ErrNewerVersion); an older build opening a bbolt file would
// quarantine its traced records as damaged, so a file with traced records
// is not for going back.
//
// # Offline
//
// Offline is the device's state, not a record's. When three attempts in a
// row, of any lanes, fail before reaching the network (never sent: no
// route, a refused dial, DNS), the queue is offline (EventOffline): the
// first two count as their records' attempts, as any never-sent attempt
// does while the queue is online; from the third on, nothing counts. The
// drainer then sends one probe each Options.ProbeInterval, 1 s by default:
// the attempt of one due lane's head, for the whole queue, so at most one
// dial per origin per interval whatever the number of lanes. A probe that
// does not get through is given back to its record: no attempt counted,
// no backoff step, the record's next attempt time as it was, the record
// still its lane's head; only Record.LastClass and LastError show what it
// met. A probe that gets through is its record's attempt like any other,
// ends the outage (EventOnline), and makes every lane due at once, each
// head then sent by its own schedule: as it would have been had the outage
// not happened. So the first record goes out within about a probe interval
// of the API answering again, after an outage of any length, without Wake;
// an application that knows sooner calls Wake.
//
// The cost, at the default 1 s: an hour offline is 3,600 probes, each one
// dial (none reaches the network while the device has none) and two small
// commits, the probe's lease and its release: 7,200 commits an hour, each
// two fdatasyncs with the bbolt store. A longer Options.ProbeInterval
// spends fewer and comes back later, by up to one interval. A probe whose
// dial hangs rather than fails holds the next one until its attempt ends
// (Options.Policy.AttemptTimeout).
//
// # Caveats
//
// Exactly-once needs the server's side: a server that ignores the key, or
// forgets it sooner than Options.Retention says, can apply a resend twice.
// A record that was in flight at a crash is counted as in doubt, since
// nobody saw its attempt end. Offline (see below), a record's schedule
// stands still. A request that cannot be sent as it is (idem.ErrInvalidRequest: a
// TLS certificate that does not verify, for other than its dates, a header
// net/http refuses) fails its
// record at once, NotApplied unless in doubt, and counts neither way for
// offline detection, so one lane's bad requests cannot flip the queue
// offline while other lanes get through. A 401 gets one more attempt with fresh credentials from
// Client.Authorize, then its lane is held (EventLaneHeld) until Wake, with
// its records kept. Settled records are kept for Options.KeepSettled, then
// removed; a file that is mostly free space is compacted at Open.
//
// One Queue at a time opens a file. Open locks a lock file beside it, path +
// ".lock", for the Queue's whole life (flock on Unix, a handle without
// sharing on Windows; on Solaris and AIX only bbolt's own lock, which
// compaction lets go for a moment). The lock file stays when the queue
// closes: leave it, since removing it while a queue is open lets a second
// one in. Options.ReadOnly opens a file only to read it, as an operator's
// tool does: it takes the lock shared, so read-only Queues share a file with
// each other but not with one that writes, and it changes nothing in the
// file. A compaction writes a temporary file beside the queue file, named
// path + ".compact-" and a random part; Open removes those a crash left.
//
// Every record is stored with a CRC-32C, which Open checks. A record found
// damaged, by Open or when it is next in its lane and does not decode, is
// quarantined rather than left to stop its lane: it becomes failed, with
// Outcome Unknown (whether it was sent cannot be told), Record.Damaged set
// and a Reason starting "damaged: ", and is reported with EventSettled (by
// the first Run, for those Open found). It keeps its ID, and its intent only
// if the intent's own checksum shows it intact; Get and List return it,
// Discard removes it, Resubmit refuses it. A file bbolt cannot read is
// another matter: Open refuses it with ErrDamaged and does not write to it.
//
// # Damage
//
// Damage to the file's structure is never written over: a write into a
// damaged page damages the tree further. Before it writes, Open reads the
// pages themselves, without bbolt, and refuses the file with ErrDamaged,
// writing nothing, when a page is unreadable, keys are out of order, a key
// disagrees with its record's ID, or the free list disagrees with the tree.
// Such a file opens with Options.ReadOnly, to read what is readable, and
// Salvage recovers it: every record that reads intact is copied byte for
// byte into a fresh file that takes its path, the damaged file is kept
// beside it (path + ".damaged-" and the time), and a SalvageReport counts
// what was recovered and what could not be read. Salvage never adds a
// record nor changes one; a record found twice is copied once. (The idemq
// command's salvage does the same.) The tree's copy of a record wins: the
// older copies bbolt leaves on the pages it freed, and copies of records
// since discarded or removed, never come back, pending or otherwise.
// Removing a record leaves a trace in the file for that (its ID among the
// file's gone ranges, bounded by the records kept), and only where the
// tree lost pages does Salvage take a record from outside it: the newest
// copy of one the tree does not hold and the trace does not name. With Options.SalvageDamaged, Open
// salvages such a file itself, passes the report on, and opens the fresh
// file: for a device with no operator.
//
// bbolt keeps two meta pages and, when the newer one fails its checksum,
// opens the file as the commit before left it, without a word. After a
// power cut that tore the last commit's meta page that is right (that
// commit never returned), but after a commit that returned it loses an
// acknowledged Enqueue, sends a record already done again, or brings a
// discarded one back. So the queue keeps a mark of the last commit that
// returned outside the file, in its lock file (written after each commit,
// unsynced, so a power cut can leave it behind the file, never ahead), and
// Open refuses a file that lacks commits the mark shows acknowledged, with
// ErrDamaged naming how many; it opens ReadOnly, and Salvage (or
// Options.SalvageDamaged) copies what it holds and so accepts the loss
// (SalvageReport.LostCommits). A lock file removed takes the mark with it,
// and the check with it until the next commit.
//
// No panic from bbolt reaches the application: a panic reading a record,
// or inside bbolt's own commit, becomes ErrDamaged, and from then on the
// Queue writes nothing more to that file; close it and Salvage it.
//
// A commit that fails in bbolt before its meta page is written (a full
// disk, EIO on its pages) is rolled back whole: the call returns the error
// and the Queue goes on. One that fails after (the meta page's write or
// fdatasync answering EIO) is taken as PostgreSQL takes a failed fsync:
// bbolt would go on reading, and building on, a meta page the disk may not
// hold, so the failed call and every later one, reads too, return
// ErrDamaged ("a commit failed"); close the Queue and open it again, which
// reads what the file holds. No read sees a commit before its sync returns.
//
// A URL's query, fragment and user info, and an intent's key, may be
// secrets: the queue's errors name an intent by its method and its URL
// without them, as the root package's do, and a refused
// key by the ID of the record that holds it.
//
// Options.Notify runs on a goroutine of the Queue's own, one event at a
// time, in order; the drainer does not wait for it. Close waits for every
// event to be delivered, save a Notify call already under way, which may be
// Close's own caller: Notify may call Close.
//
// Discard is an operator's removal of a record that is not in flight: a
// Wait for it returns ErrDiscarded, since it will never settle.
//
// # A hook that panics
//
// The drainer's goroutines are the queue's, not the application's. A
// panic in a hook the drainer runs for a record does not end the process
// (which would run the hook again at its next start, in a crash loop):
// Options.Policy.Veto, Options.Tracer's StartDrain and the end it
// returns, and the Client's Authorize, OnSend, OnAttempt, Logger and
// HTTPClient (its RoundTripper, CheckRedirect, Jar). The queue never calls
// Client.OnOperation: a queue's attempt is a Client.Try. A hook that
// panics is a programmer's bug, not an answer about the operation, so the
// record is neither failed nor resent under another key: it goes back to
// pending with its key, its lane is held as after a second 401, and the
// other lanes go on. EventLaneHeld reports it, its Err wrapping
// ErrHookPanicked and naming the hook (of the Client's, those set that
// could have run), what it panicked with and where; the record's
// LastError says the same, unless the hook was the Tracer's end, which
// runs once the attempt is recorded. A panic within Client.Try may follow
// the request's going out, so the record then counts as in doubt, as after
// a crash; so does a success the queue could not record. Mend the hook,
// then Wake (or restart: the bbolt store does not keep holds in its file)
// sends the record again, under its key. A panic in the queue's own code
// (its store, its schedule) is not recovered, nor one in Options.Notify,
// which runs on a goroutine of its own; one within Client.Try counts as
// its hooks'.
package queue
