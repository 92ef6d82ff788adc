package kvlayout

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/statedhq/stated/backend"
)

// KeyGroupPrefix returns the 2-byte prefix of every key of key group kg.
func KeyGroupPrefix(kg int) []byte {
	return binary.BigEndian.AppendUint16(nil, uint16(kg))
}

// KeyGroupSpan returns [start, end) covering every key of the key groups in r.
func KeyGroupSpan(r backend.KeyGroupRange) (start, end []byte) {
	// r.End+1 <= MaxMaxParallelism = 0x8000 still fits in two bytes.
	return KeyGroupPrefix(r.Start), KeyGroupPrefix(r.End + 1)
}

// KeyGroupOf returns the key group a stored key belongs to.
func KeyGroupOf(k []byte) (int, error) {
	if len(k) < 2 {
		return 0, fmt.Errorf("%w: stored key of %d bytes has no key group", backend.ErrCorrupt, len(k))
	}
	return int(binary.BigEndian.Uint16(k)), nil
}

// UvarintLen is the length of binary.AppendUvarint's encoding of n.
func UvarintLen(n int) int {
	l := 1
	for ; n >= 0x80; n >>= 7 {
		l++
	}
	return l
}

// AppendBytes appends uvarint(len(x)) x.
func AppendBytes(b, x []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(x)))
	return append(b, x...)
}

// ReadBytes parses uvarint(len) x off the front of b.
func ReadBytes(b []byte) (x, rest []byte, ok bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n {
		return nil, nil, false
	}
	return b[w : w+int(n)], b[w+int(n):], true
}

// AppendEntryKey appends the key of the (state, key group, key, namespace)
// address of a value, list, aggregate or map entry (a map's user key
// follows it raw). It grows buf once to the exact size (plus room for a
// map's user key of up to 16 bytes): the key is built on every operation,
// and appending piecewise to a nil buffer reallocated it up to four times.
func AppendEntryKey(buf []byte, state string, k backend.Key) []byte {
	n := 2 + UvarintLen(len(state)) + len(state) + UvarintLen(len(k.Key)) + len(k.Key) +
		UvarintLen(len(k.Namespace)) + len(k.Namespace)
	buf = slices.Grow(buf, n+16)
	buf = binary.BigEndian.AppendUint16(buf, uint16(k.KeyGroup))
	buf = binary.AppendUvarint(buf, uint64(len(state)))
	buf = append(buf, state...)
	buf = AppendBytes(buf, k.Key)
	return AppendBytes(buf, k.Namespace)
}

// AppendStatePrefix appends kg | state, the prefix of all entries of a
// state in one key group.
func AppendStatePrefix(buf []byte, state string, kg int) []byte {
	buf = binary.BigEndian.AppendUint16(buf, uint16(kg))
	buf = binary.AppendUvarint(buf, uint64(len(state)))
	return append(buf, state...)
}

// AppendTimerKey appends the key of timer t of state.
func AppendTimerKey(buf []byte, state string, t backend.Timer) []byte {
	buf = AppendStatePrefix(buf, state, t.KeyGroup)
	buf = binary.BigEndian.AppendUint64(buf, uint64(t.Timestamp)^(1<<63))
	buf = AppendBytes(buf, t.Key)
	return AppendBytes(buf, t.Namespace)
}

// DecodedKey is a stored key taken apart up to its state name.
type DecodedKey struct {
	KeyGroup int
	State    string
	Rest     []byte // what follows the state name
}

// SplitKey parses kg | state | rest.
func SplitKey(k []byte) (DecodedKey, error) {
	kg, err := KeyGroupOf(k)
	if err != nil {
		return DecodedKey{}, err
	}
	name, rest, ok := ReadBytes(k[2:])
	if !ok {
		return DecodedKey{}, fmt.Errorf("%w: stored key %x has a bad state name", backend.ErrCorrupt, k)
	}
	return DecodedKey{KeyGroup: kg, State: string(name), Rest: rest}, nil
}

// SplitAddress parses key | ns | tail, what follows the state name of a
// value, list, aggregate or map key (tail: a map entry's user key).
func SplitAddress(rest []byte) (key, ns, tail []byte, ok bool) {
	key, rest, ok = ReadBytes(rest)
	if !ok {
		return nil, nil, nil, false
	}
	ns, tail, ok = ReadBytes(rest)
	return key, ns, tail, ok
}

// SplitTimer parses what follows the state name of a timer key. The
// slices alias rest.
func SplitTimer(rest []byte) (ts int64, key, ns []byte, ok bool) {
	if len(rest) < 8 {
		return 0, nil, nil, false
	}
	ts = int64(binary.BigEndian.Uint64(rest) ^ (1 << 63))
	key, ns, tail, ok := SplitAddress(rest[8:])
	if !ok || len(tail) != 0 {
		return 0, nil, nil, false
	}
	return ts, key, ns, true
}

// RenameState returns the key k (of any kind) with its state name
// replaced by state, appended to buf.
func RenameState(buf, k []byte, state string) ([]byte, error) {
	dk, err := SplitKey(k)
	if err != nil {
		return nil, err
	}
	buf = AppendStatePrefix(buf, state, dk.KeyGroup)
	return append(buf, dk.Rest...), nil
}
