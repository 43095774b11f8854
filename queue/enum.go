package queue

import (
	"fmt"
	"math"
	"reflect"
	"sync"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/binenc"
)

// A record stores enum values (State, idem.Outcome, idem.Class) as numbers.
// Which numbers are valid is the enum's own to say, not a bound written here
// that a new value outgrows: a value is valid when its String names it. Each
// enum's String falls back to "Type(n)" for a value it does not know, and
// the root package's tests hold String to every value it declares.

// enum is a small enumerated type with a String method.
type enum interface {
	~uint8
	fmt.Stringer
}

// named reports which values of E its String names.
func named[E enum]() *[math.MaxUint8 + 1]bool {
	var known [math.MaxUint8 + 1]bool
	for i := range known {
		v := E(i)
		known[i] = v.String() != fmt.Sprintf("%s(%d)", reflect.TypeOf(v).Name(), i)
	}
	return &known
}

// The valid values of each enum a record stores, computed once: String
// allocates, and every record read checks them.
var (
	knownStates   = sync.OnceValue(named[State])
	knownOutcomes = sync.OnceValue(named[idem.Outcome])
	knownClasses  = sync.OnceValue(named[idem.Class])
)

// decodeEnum reads a value of E that known names; any other is damage.
func decodeEnum[E enum](d *binenc.Decoder, known *[math.MaxUint8 + 1]bool, what string) E {
	v := d.Uvarint(math.MaxUint64, what)
	if d.Err != nil {
		return 0
	}
	if v > math.MaxUint8 || !known[v] {
		d.Err = fmt.Errorf("unknown %s %d", what, v)
		return 0
	}
	return E(v)
}

func validState(s State) bool { return knownStates()[s] }
