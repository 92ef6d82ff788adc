package kvstate

import (
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/kvlayout"
)

// The value layout is frozen and defined once, in backend/kvlayout.

func appendHeader(b []byte, expiry int64) []byte { return kvlayout.AppendHeader(b, expiry) }

func encodeValue(expiry int64, payload []byte) []byte { return kvlayout.EncodeValue(expiry, payload) }

// decodeValue splits a stored value into its expiry (0: none) and payload.
func decodeValue(v []byte) (expiry int64, payload []byte, err error) { return kvlayout.DecodeValue(v) }

func appendListElement(b []byte, expiry int64, payload []byte) []byte {
	return kvlayout.AppendListElement(b, expiry, payload)
}

func decodeList(v []byte) ([]kvlayout.ListElement, error) { return kvlayout.DecodeList(v) }

func encodeNumber(n backend.Number) []byte { return kvlayout.EncodeNumber(n) }

func decodeNumber(t backend.NumberType, b []byte) (backend.Number, error) {
	return kvlayout.DecodeNumber(t, b)
}

// Expired reports whether a stored value or map value is past its TTL at
// nowMs (unix milliseconds). Full snapshots use it to leave expired entries
// out. Lists are never dropped whole by it (elements expire one by one).
func Expired(v []byte, nowMs int64) bool { return kvlayout.Expired(v, nowMs) }
