package kvstate

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/statedhq/stated/backend"
)

// Key layout (frozen: it is in every snapshot, SST and savepoint).
//
// Entry of a value, list or aggregate state:
//
//	kg(2, big-endian) | uvarint(len(state)) state | uvarint(len(key)) key | uvarint(len(ns)) ns
//
// Entry of a map state: the same prefix followed by the raw user key, so the
// entries of one map are contiguous and sorted by user key.
//
// Timer:
//
//	kg(2) | uvarint(len(state)) state | ts(8, big-endian, sign bit flipped) | uvarint(len(key)) key | uvarint(len(ns)) ns
//
// Every component before the last is length-prefixed, so no entry prefix is
// a prefix of another entry's prefix, and the key group comes first, so a
// key-group range is one contiguous span (clipping is two range deletions).

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

// uvarintLen is the length of binary.AppendUvarint's encoding of n.
func uvarintLen(n int) int {
	l := 1
	for ; n >= 0x80; n >>= 7 {
		l++
	}
	return l
}

func appendBytes(b, x []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(x)))
	return append(b, x...)
}

// entryPrefix encodes the (state, key group, key, namespace) address. It
// grows buf once to the exact size (plus room for a map's user key of up to
// 16 bytes): the key is built on every operation, and appending piecewise
// to a nil buffer reallocated it up to four times.
func entryPrefix(buf []byte, state string, k backend.Key) []byte {
	n := 2 + uvarintLen(len(state)) + len(state) + uvarintLen(len(k.Key)) + len(k.Key) +
		uvarintLen(len(k.Namespace)) + len(k.Namespace)
	buf = slices.Grow(buf, n+16)
	buf = binary.BigEndian.AppendUint16(buf, uint16(k.KeyGroup))
	buf = binary.AppendUvarint(buf, uint64(len(state)))
	buf = append(buf, state...)
	buf = appendBytes(buf, k.Key)
	return appendBytes(buf, k.Namespace)
}

// stateKGPrefix encodes kg | state, the prefix of all entries of a state in
// one key group.
func stateKGPrefix(buf []byte, state string, kg int) []byte {
	buf = binary.BigEndian.AppendUint16(buf, uint16(kg))
	buf = binary.AppendUvarint(buf, uint64(len(state)))
	return append(buf, state...)
}

func timerKey(buf []byte, state string, t backend.Timer) []byte {
	buf = stateKGPrefix(buf, state, t.KeyGroup)
	buf = binary.BigEndian.AppendUint64(buf, uint64(t.Timestamp)^(1<<63))
	buf = appendBytes(buf, t.Key)
	return appendBytes(buf, t.Namespace)
}

// prefixEnd returns the smallest key greater than every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil // p is all 0xff: no upper bound
}

func readBytes(b []byte) (x, rest []byte, ok bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n {
		return nil, nil, false
	}
	return b[w : w+int(n)], b[w+int(n):], true
}

// DecodedKey is a stored key taken apart.
type DecodedKey struct {
	KeyGroup  int
	State     string
	Rest      []byte // what follows the state name
	Timestamp int64  // timers only
}

// SplitKey parses kg | state | rest.
func SplitKey(k []byte) (DecodedKey, error) {
	kg, err := KeyGroupOf(k)
	if err != nil {
		return DecodedKey{}, err
	}
	name, rest, ok := readBytes(k[2:])
	if !ok {
		return DecodedKey{}, fmt.Errorf("%w: stored key %x has a bad state name", backend.ErrCorrupt, k)
	}
	return DecodedKey{KeyGroup: kg, State: string(name), Rest: rest}, nil
}

// decodeTimer parses what follows the state name of a timer key.
func decodeTimer(kg int, rest []byte) (backend.Timer, bool) {
	if len(rest) < 8 {
		return backend.Timer{}, false
	}
	ts := int64(binary.BigEndian.Uint64(rest) ^ (1 << 63))
	key, rest, ok := readBytes(rest[8:])
	if !ok {
		return backend.Timer{}, false
	}
	ns, rest, ok := readBytes(rest)
	if !ok || len(rest) != 0 {
		return backend.Timer{}, false
	}
	return backend.Timer{KeyGroup: kg, Key: clone(key), Namespace: clone(ns), Timestamp: ts}, true
}

func clone(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return append([]byte{}, b...)
}
