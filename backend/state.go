package backend

import (
	"fmt"
	"math"
	"time"
)

// StateKind is the kind of a registered state. The values are frozen: they
// are written into handles and savepoints.
type StateKind uint8

const (
	// KindValue holds one value per (key, namespace).
	KindValue StateKind = 1
	// KindList holds a list per (key, namespace); append never reads.
	KindList StateKind = 2
	// KindMap holds a map of user keys to values per (key, namespace),
	// iterated in bytewise order of the user keys.
	KindMap StateKind = 3
	// KindAggregate holds one number per (key, namespace), merged with the
	// state's AggregateFunc on every Add.
	KindAggregate StateKind = 4
	// KindTimers holds timers (key, namespace, timestamp), polled per
	// instance in timestamp order.
	KindTimers StateKind = 5
)

var stateKindNames = map[StateKind]string{
	KindValue: "value", KindList: "list", KindMap: "map", KindAggregate: "aggregate", KindTimers: "timers",
}

func (k StateKind) String() string {
	if s, ok := stateKindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// AggregateFunc is the built-in merge of an aggregate state. Frozen values.
type AggregateFunc uint8

const (
	AggNone  AggregateFunc = 0
	AggSum   AggregateFunc = 1
	AggMin   AggregateFunc = 2
	AggMax   AggregateFunc = 3
	AggCount AggregateFunc = 4 // counts Add calls; the added value is ignored
)

var aggNames = map[AggregateFunc]string{AggNone: "none", AggSum: "sum", AggMin: "min", AggMax: "max", AggCount: "count"}

func (f AggregateFunc) String() string {
	if s, ok := aggNames[f]; ok {
		return s
	}
	return fmt.Sprintf("agg(%d)", uint8(f))
}

// ParseAggregateFunc parses the name String returns.
func ParseAggregateFunc(s string) (AggregateFunc, error) {
	for k, n := range aggNames {
		if n == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown aggregate function %q", ErrInvalidArgument, s)
}

// NumberType is the type of the numbers of an aggregate state. Frozen values.
type NumberType uint8

const (
	NumInt64   NumberType = 1
	NumFloat64 NumberType = 2
)

func (t NumberType) String() string {
	switch t {
	case NumInt64:
		return "int64"
	case NumFloat64:
		return "float64"
	}
	return fmt.Sprintf("number(%d)", uint8(t))
}

// Number is an aggregate's value: an int64 or a float64, as its NumberType
// says. Only the field of that type is meaningful.
type Number struct {
	Type  NumberType
	Int   int64
	Float float64
}

// Int64 and Float64 build a Number.
func Int64(v int64) Number     { return Number{Type: NumInt64, Int: v} }
func Float64(v float64) Number { return Number{Type: NumFloat64, Float: v} }

func (n Number) String() string {
	if n.Type == NumFloat64 {
		return fmt.Sprint(n.Float)
	}
	return fmt.Sprint(n.Int)
}

// Merge combines acc (the stored value; ok=false when there is none) with the
// added value v under f. Sum of int64 wraps as Go's and Java's int64 do.
func (f AggregateFunc) Merge(acc Number, ok bool, v Number) Number {
	if f == AggCount {
		if !ok {
			return Number{Type: v.Type, Int: 1, Float: 1}
		}
		return Number{Type: acc.Type, Int: acc.Int + 1, Float: acc.Float + 1}
	}
	if !ok {
		return v
	}
	switch f {
	case AggSum:
		return Number{Type: v.Type, Int: acc.Int + v.Int, Float: acc.Float + v.Float}
	case AggMin:
		if v.Type == NumFloat64 {
			return Float64(math.Min(acc.Float, v.Float))
		}
		return Int64(min(acc.Int, v.Int))
	case AggMax:
		if v.Type == NumFloat64 {
			return Float64(math.Max(acc.Float, v.Float))
		}
		return Int64(max(acc.Int, v.Int))
	}
	return v
}

// TTLUpdate says which accesses refresh an entry's time to live. Frozen values.
type TTLUpdate uint8

const (
	// TTLOnCreateAndWrite refreshes the expiry on every write.
	TTLOnCreateAndWrite TTLUpdate = 0
	// TTLOnReadAndWrite also refreshes it on every read that returns the entry.
	TTLOnReadAndWrite TTLUpdate = 1
)

func (u TTLUpdate) String() string {
	if u == TTLOnReadAndWrite {
		return "on-read-and-write"
	}
	return "on-create-and-write"
}

// MaxStateNameLen bounds a state name; names are stored in every key.
const MaxStateNameLen = 128

// StateDescriptor registers one state of an instance.
type StateDescriptor struct {
	// Name identifies the state within the instance; 1..MaxStateNameLen bytes.
	Name string `json:"name"`
	// Kind is what the state holds.
	Kind StateKind `json:"kind"`
	// TTL is the time to live of an entry (per value, per list element, per
	// map entry, per aggregate, per timer is not allowed). Zero: no expiry.
	TTL time.Duration `json:"ttl,omitempty"`
	// TTLUpdate says which accesses refresh the expiry. Default on write.
	TTLUpdate TTLUpdate `json:"ttlUpdate,omitempty"`
	// Aggregate is the merge function of a KindAggregate state.
	Aggregate AggregateFunc `json:"aggregate,omitempty"`
	// Number is the number type of a KindAggregate state.
	Number NumberType `json:"number,omitempty"`
}

// Validate reports everything wrong with d at once.
func (d StateDescriptor) Validate() error {
	var problems []string
	if len(d.Name) == 0 || len(d.Name) > MaxStateNameLen {
		problems = append(problems, fmt.Sprintf("name %q must have 1..%d bytes", d.Name, MaxStateNameLen))
	}
	if _, ok := stateKindNames[d.Kind]; !ok {
		problems = append(problems, fmt.Sprintf("kind %s is unknown", d.Kind))
	}
	if d.TTL < 0 {
		problems = append(problems, fmt.Sprintf("ttl %s is negative", d.TTL))
	}
	if d.TTL > 0 && d.Kind == KindTimers {
		problems = append(problems, "timers cannot have a ttl")
	}
	if d.TTLUpdate > TTLOnReadAndWrite {
		problems = append(problems, fmt.Sprintf("ttl update policy %d is unknown", d.TTLUpdate))
	}
	if d.Kind == KindAggregate {
		if d.Aggregate == AggNone || d.Aggregate > AggCount {
			problems = append(problems, fmt.Sprintf("aggregate function %s is not sum, min, max or count", d.Aggregate))
		}
		if d.Number != NumInt64 && d.Number != NumFloat64 {
			problems = append(problems, fmt.Sprintf("number type %s is not int64 or float64", d.Number))
		}
	} else if d.Aggregate != AggNone || d.Number != 0 {
		problems = append(problems, "aggregate function and number type are only for aggregate states")
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w: state %q: %s", ErrInvalidArgument, d.Name, joinProblems(problems))
}

func joinProblems(p []string) string {
	s := p[0]
	for _, x := range p[1:] {
		s += "; " + x
	}
	return s
}

// Key addresses an entry: a key group, the key's serialized bytes and the
// namespace's serialized bytes (empty for the default namespace).
type Key struct {
	KeyGroup  int
	Key       []byte
	Namespace []byte
}

// MapEntry is one entry of a map state.
type MapEntry struct {
	UserKey []byte
	Value   []byte
}

// Timer is one registered timer.
type Timer struct {
	KeyGroup  int
	Key       []byte
	Namespace []byte
	Timestamp int64
}
