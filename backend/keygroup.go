package backend

import "fmt"

// DefaultMaxParallelism is the number of key groups of an instance whose
// options leave MaxParallelism at zero. It matches Flink's lower bound.
const DefaultMaxParallelism = 128

// MaxMaxParallelism is the largest number of key groups a job may have. It
// matches Flink's upper bound (1 << 15) and lets a key group fit in the two
// big-endian bytes that prefix every stored key.
const MaxMaxParallelism = 1 << 15

// KeyGroupRange is an inclusive range [Start, End] of key groups. The empty
// range has End < Start; EmptyKeyGroupRange is its canonical form.
type KeyGroupRange struct {
	Start int `json:"start"`
	End   int `json:"end"`
}

// EmptyKeyGroupRange is the canonical empty range.
var EmptyKeyGroupRange = KeyGroupRange{Start: 0, End: -1}

// Len is the number of key groups in the range.
func (r KeyGroupRange) Len() int {
	if r.End < r.Start {
		return 0
	}
	return r.End - r.Start + 1
}

// Empty reports whether the range holds no key group.
func (r KeyGroupRange) Empty() bool { return r.End < r.Start }

// Contains reports whether keyGroup lies in the range.
func (r KeyGroupRange) Contains(keyGroup int) bool {
	return keyGroup >= r.Start && keyGroup <= r.End
}

// Intersect returns the key groups both ranges hold (possibly empty).
func (r KeyGroupRange) Intersect(o KeyGroupRange) KeyGroupRange {
	s, e := max(r.Start, o.Start), min(r.End, o.End)
	if e < s {
		return EmptyKeyGroupRange
	}
	return KeyGroupRange{Start: s, End: e}
}

// Covers reports whether every key group of o lies in r.
func (r KeyGroupRange) Covers(o KeyGroupRange) bool {
	return o.Empty() || (r.Start <= o.Start && o.End <= r.End)
}

func (r KeyGroupRange) String() string {
	if r.Empty() {
		return "[]"
	}
	return fmt.Sprintf("[%d,%d]", r.Start, r.End)
}

// Validate checks that r is a non-empty range inside [0, maxParallelism).
func (r KeyGroupRange) Validate(maxParallelism int) error {
	if err := ValidateMaxParallelism(maxParallelism); err != nil {
		return err
	}
	if r.Empty() || r.Start < 0 || r.End >= maxParallelism {
		return fmt.Errorf("%w: key-group range %s is not a non-empty range inside [0,%d]",
			ErrInvalidArgument, r, maxParallelism-1)
	}
	return nil
}

// ValidateMaxParallelism checks that maxParallelism is in [1, MaxMaxParallelism].
func ValidateMaxParallelism(maxParallelism int) error {
	if maxParallelism < 1 || maxParallelism > MaxMaxParallelism {
		return fmt.Errorf("%w: maxParallelism %d is outside [1,%d]",
			ErrInvalidArgument, maxParallelism, MaxMaxParallelism)
	}
	return nil
}

// KeyGroupForHash returns the key group of a key whose 32-bit hash is hash
// (for a Java key, its hashCode()). It is Flink's
// KeyGroupRangeAssignment.computeKeyGroupForKeyHash: the murmur3 finalizer of
// MathUtils.murmurHash, then modulo maxParallelism. maxParallelism must be
// positive.
func KeyGroupForHash(hash int32, maxParallelism int) int {
	return int(murmurHash(hash)) % maxParallelism
}

// murmurHash is Flink's MathUtils.murmurHash(int): one murmur3 round over a
// single 4-byte block, the finalizer, then the absolute value (0 for MinInt32).
// Go's int32 and uint32 arithmetic wraps exactly as Java's int does.
func murmurHash(code int32) int32 {
	c := uint32(code)
	c *= 0xcc9e2d51
	c = c<<15 | c>>17
	c *= 0x1b873593
	c = c<<13 | c>>19
	c = c*5 + 0xe6546b64
	c ^= 4
	c ^= c >> 16
	c *= 0x85ebca6b
	c ^= c >> 13
	c *= 0xc2b2ae35
	c ^= c >> 16
	v := int32(c)
	switch {
	case v >= 0:
		return v
	case v != -1<<31:
		return -v
	default:
		return 0
	}
}

// KeyGroupRangeForOperator returns the key groups that operator subtask index
// of parallelism owns, as Flink's computeKeyGroupRangeForOperatorIndex does.
func KeyGroupRangeForOperator(maxParallelism, parallelism, index int) KeyGroupRange {
	return KeyGroupRange{
		Start: (index*maxParallelism + parallelism - 1) / parallelism,
		End:   ((index+1)*maxParallelism - 1) / parallelism,
	}
}

// OperatorForKeyGroup returns the subtask index of parallelism that owns
// keyGroup, as Flink's computeOperatorIndexForKeyGroup does.
func OperatorForKeyGroup(maxParallelism, parallelism, keyGroup int) int {
	return keyGroup * parallelism / maxParallelism
}

// ValidateParallelism checks a (maxParallelism, parallelism) pair: a job
// cannot have more subtasks than key groups.
func ValidateParallelism(maxParallelism, parallelism int) error {
	if err := ValidateMaxParallelism(maxParallelism); err != nil {
		return err
	}
	if parallelism < 1 || parallelism > maxParallelism {
		return fmt.Errorf("%w: parallelism %d is outside [1,%d] (maxParallelism)",
			ErrInvalidArgument, parallelism, maxParallelism)
	}
	return nil
}
