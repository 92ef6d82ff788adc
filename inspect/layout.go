package inspect

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/statedhq/stated/backend"
)

// This file restates the frozen key and value layout of
// backend/internal/kvstate (keys.go, values.go), which a package outside
// backend cannot import. The layout is frozen: it is the content of every
// snapshot, SST and canonical savepoint, so restating it is safe; the
// round-trip tests (reader_test.go) fail if the two ever disagree.
//
// Key of a value, list or aggregate entry:
//
//	kg(2, big-endian) | uvarint(len(state)) state | uvarint(len(key)) key | uvarint(len(ns)) ns
//
// A map entry: the same followed by the raw user key. A timer:
//
//	kg(2) | uvarint(len(state)) state | ts(8, big-endian, sign bit flipped) | uvarint(len(key)) key | uvarint(len(ns)) ns
//
// Value of a value, map value or aggregate: flags(1) | [expiry(8) if
// flags&1] | payload (an aggregate's payload: 8 bytes, big-endian int64 or
// float64 bits). A list: elements, each flags(1) | [expiry(8)] |
// uvarint(len) | payload.

const flagTTL = 1

func readBytes(b []byte) (x, rest []byte, ok bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n {
		return nil, nil, false
	}
	return b[w : w+int(n)], b[w+int(n):], true
}

// splitKey parses kg | state | rest.
func splitKey(k []byte) (kg int, state string, rest []byte, err error) {
	if len(k) < 2 {
		return 0, "", nil, fmt.Errorf("%w: stored key of %d bytes has no key group", backend.ErrCorrupt, len(k))
	}
	name, rest, ok := readBytes(k[2:])
	if !ok {
		return 0, "", nil, fmt.Errorf("%w: stored key %x has a bad state name", backend.ErrCorrupt, k)
	}
	return int(binary.BigEndian.Uint16(k)), string(name), rest, nil
}

// splitAddress parses key | ns | tail of what follows the state name.
func splitAddress(rest []byte) (key, ns, tail []byte, ok bool) {
	key, rest, ok = readBytes(rest)
	if !ok {
		return nil, nil, nil, false
	}
	ns, tail, ok = readBytes(rest)
	return key, ns, tail, ok
}

// decodeValue splits a stored value into its expiry (0: none) and payload.
func decodeValue(v []byte) (expiry int64, payload []byte, err error) {
	if len(v) < 1 {
		return 0, nil, fmt.Errorf("%w: empty stored value", backend.ErrCorrupt)
	}
	switch v[0] {
	case 0:
		return 0, v[1:], nil
	case flagTTL:
		if len(v) < 9 {
			return 0, nil, fmt.Errorf("%w: stored value with ttl has %d bytes", backend.ErrCorrupt, len(v))
		}
		return int64(binary.BigEndian.Uint64(v[1:9])), v[9:], nil
	}
	return 0, nil, fmt.Errorf("%w: stored value has unknown flags %#x", backend.ErrCorrupt, v[0])
}

// listElement is one element of a stored list.
type listElement struct {
	expiry  int64
	payload []byte
}

func decodeList(v []byte) ([]listElement, error) {
	var out []listElement
	for len(v) > 0 {
		expiry, rest, err := decodeValue(v)
		if err != nil {
			return nil, err
		}
		n, w := binary.Uvarint(rest)
		if w <= 0 || uint64(len(rest)-w) < n {
			return nil, fmt.Errorf("%w: stored list element has a bad length", backend.ErrCorrupt)
		}
		out = append(out, listElement{expiry: expiry, payload: rest[w : w+int(n)]})
		v = rest[w+int(n):]
	}
	return out, nil
}

func decodeNumber(t backend.NumberType, b []byte) (backend.Number, error) {
	if len(b) != 8 {
		return backend.Number{}, fmt.Errorf("%w: stored aggregate has %d bytes, want 8", backend.ErrCorrupt, len(b))
	}
	u := binary.BigEndian.Uint64(b)
	if t == backend.NumFloat64 {
		return backend.Float64(math.Float64frombits(u)), nil
	}
	return backend.Int64(int64(u)), nil
}

// decodeTimer parses what follows the state name of a timer key.
func decodeTimer(rest []byte) (ts int64, key, ns []byte, ok bool) {
	if len(rest) < 8 {
		return 0, nil, nil, false
	}
	ts = int64(binary.BigEndian.Uint64(rest) ^ (1 << 63))
	key, ns, tail, ok := splitAddress(rest[8:])
	if !ok || len(tail) != 0 {
		return 0, nil, nil, false
	}
	return ts, key, ns, true
}

// keyGroupBounds returns [start, end) covering every stored key of the key
// groups in r.
func keyGroupBounds(r backend.KeyGroupRange) (start, end []byte) {
	return binary.BigEndian.AppendUint16(nil, uint16(r.Start)), binary.BigEndian.AppendUint16(nil, uint16(r.End+1))
}
