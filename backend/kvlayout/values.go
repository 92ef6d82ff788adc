package kvlayout

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/statedhq/stated/backend"
)

// FlagTTL is the flag of a value or list element that carries an expiry.
const FlagTTL = 1

// AppendHeader appends the flags and expiry (0: none) of a value or list
// element.
func AppendHeader(b []byte, expiry int64) []byte {
	if expiry == 0 {
		return append(b, 0)
	}
	b = append(b, FlagTTL)
	return binary.BigEndian.AppendUint64(b, uint64(expiry))
}

// EncodeValue returns the stored value of a value, map value or aggregate.
func EncodeValue(expiry int64, payload []byte) []byte {
	b := AppendHeader(make([]byte, 0, 9+len(payload)), expiry)
	return append(b, payload...)
}

// DecodeValue splits a stored value into its expiry (0: none) and payload.
func DecodeValue(v []byte) (expiry int64, payload []byte, err error) {
	if len(v) < 1 {
		return 0, nil, fmt.Errorf("%w: empty stored value", backend.ErrCorrupt)
	}
	switch v[0] {
	case 0:
		return 0, v[1:], nil
	case FlagTTL:
		if len(v) < 9 {
			return 0, nil, fmt.Errorf("%w: stored value with ttl has %d bytes", backend.ErrCorrupt, len(v))
		}
		return int64(binary.BigEndian.Uint64(v[1:9])), v[9:], nil
	}
	return 0, nil, fmt.Errorf("%w: stored value has unknown flags %#x", backend.ErrCorrupt, v[0])
}

// AppendListElement appends one element to a stored list.
func AppendListElement(b []byte, expiry int64, payload []byte) []byte {
	b = AppendHeader(b, expiry)
	b = binary.AppendUvarint(b, uint64(len(payload)))
	return append(b, payload...)
}

// ListElement is one decoded element of a stored list; Payload aliases the
// stored value.
type ListElement struct {
	Expiry  int64
	Payload []byte
}

// DecodeList splits a stored list into its elements.
func DecodeList(v []byte) ([]ListElement, error) {
	var out []ListElement
	for len(v) > 0 {
		expiry, rest, err := DecodeValue(v)
		if err != nil {
			return nil, err
		}
		n, w := binary.Uvarint(rest)
		if w <= 0 || uint64(len(rest)-w) < n {
			return nil, fmt.Errorf("%w: stored list element has a bad length", backend.ErrCorrupt)
		}
		out = append(out, ListElement{Expiry: expiry, Payload: rest[w : w+int(n)]})
		v = rest[w+int(n):]
	}
	return out, nil
}

// EncodeNumber returns the 8-byte payload of an aggregate.
func EncodeNumber(n backend.Number) []byte {
	if n.Type == backend.NumFloat64 {
		return binary.BigEndian.AppendUint64(nil, math.Float64bits(n.Float))
	}
	return binary.BigEndian.AppendUint64(nil, uint64(n.Int))
}

// DecodeNumber parses an aggregate's payload as a number of type t.
func DecodeNumber(t backend.NumberType, b []byte) (backend.Number, error) {
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
// nowMs (unix milliseconds). Lists are never dropped whole by it (elements
// expire one by one).
func Expired(v []byte, nowMs int64) bool {
	expiry, _, err := DecodeValue(v)
	return err == nil && expiry != 0 && expiry <= nowMs
}
