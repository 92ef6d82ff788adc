package kvstate

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/statedhq/stated/backend"
)

// Value layout (frozen).
//
// A value, map value or aggregate is stored as
//
//	flags(1) | [expiry(8, big-endian unix ms) if flags&flagTTL] | payload
//
// An aggregate's payload is 8 bytes: the int64 (big-endian) or the float64
// bits. A list is a concatenation of elements, each
//
//	flags(1) | [expiry(8)] | uvarint(len) | payload
//
// so that appending is a blind concatenation (Engine.Merge) and every
// element carries its own time to live.

const flagTTL = 1

func appendHeader(b []byte, expiry int64) []byte {
	if expiry == 0 {
		return append(b, 0)
	}
	b = append(b, flagTTL)
	return binary.BigEndian.AppendUint64(b, uint64(expiry))
}

func encodeValue(expiry int64, payload []byte) []byte {
	b := appendHeader(make([]byte, 0, 9+len(payload)), expiry)
	return append(b, payload...)
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

func appendListElement(b []byte, expiry int64, payload []byte) []byte {
	b = appendHeader(b, expiry)
	b = binary.AppendUvarint(b, uint64(len(payload)))
	return append(b, payload...)
}

// listElement is one decoded element of a stored list.
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

func encodeNumber(n backend.Number) []byte {
	if n.Type == backend.NumFloat64 {
		return binary.BigEndian.AppendUint64(nil, math.Float64bits(n.Float))
	}
	return binary.BigEndian.AppendUint64(nil, uint64(n.Int))
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

// Expired reports whether a stored value or map value is past its TTL at
// nowMs (unix milliseconds). Full snapshots use it to leave expired entries
// out. Lists are never dropped whole by it (elements expire one by one).
func Expired(v []byte, nowMs int64) bool {
	expiry, _, err := decodeValue(v)
	return err == nil && expiry != 0 && expiry <= nowMs
}
