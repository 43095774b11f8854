package queue

import (
	"strings"
	"time"

	"github.com/idem-go/idem"
)

// A damaged record, one whose stored bytes do not decode, would stop its
// lane: the drainer can neither send it nor skip it without a trace. So it is
// quarantined: stored again as a failed record, outcome unknown, marked
// Damaged, and reported with EventSettled. Open checks every record's
// checksum and header (checkRecord); the drainer quarantines a head that
// does not decode all the same, damaged since Open or past the checksum.

// quarantined returns what is stored in place of data, the bytes of record id
// that failed to decode with err: a failed record, outcome unknown, that
// keeps nothing of data but an intact intent.
func quarantined(id ID, data []byte, err error, now time.Time) *Record {
	what := strings.TrimPrefix(err.Error(), ErrDamaged.Error()+": ")
	what = strings.TrimPrefix(what, errCorrupt.Error()+": ")
	return &Record{
		ID: id, State: Failed, Outcome: idem.Unknown, Damaged: true, SettledAt: now,
		Reason: "damaged: " + what, Intent: salvageIntent(data),
	}
}

// Quarantined returns what a Store keeps in place of record id, whose
// stored bytes data failed to decode with cause (an error wrapping
// ErrDamaged): a failed record, outcome unknown, marked Damaged, settled at
// now, keeping nothing of data but its intent if the intent's own checksum
// shows it intact. The Store reports it from Head, so that the Queue
// reports it as settled, and the lane moves on. A cause wrapping
// ErrNewerVersion is no damage: a store shared with newer builds leaves
// that record as it is.
func Quarantined(id ID, data []byte, cause error, now time.Time) *Record {
	return quarantined(id, data, cause, now)
}

// salvageIntent returns the intent of data, a record that does not decode,
// if its intent field can still be found and the intent's own checksum
// shows it intact; nil otherwise.
func salvageIntent(data []byte) *idem.Intent {
	if len(data) < laneOffset+1+4 {
		return nil
	}
	r, _, err := decodeFields(data[:len(data)-4])
	if err != nil || len(r.intentBytes) == 0 {
		return nil
	}
	in := new(idem.Intent)
	if in.UnmarshalBinary(r.intentBytes) != nil {
		return nil
	}
	return in
}
