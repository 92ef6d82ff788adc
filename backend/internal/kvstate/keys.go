package kvstate

import (
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/kvlayout"
)

// The key layout is frozen and defined once, in backend/kvlayout (its
// package documentation draws it); package inspect reads and writes it
// from there too. These names keep this package's code short.

// KeyGroupPrefix returns the 2-byte prefix of every key of key group kg.
func KeyGroupPrefix(kg int) []byte { return kvlayout.KeyGroupPrefix(kg) }

// KeyGroupSpan returns [start, end) covering every key of the key groups in r.
func KeyGroupSpan(r backend.KeyGroupRange) (start, end []byte) { return kvlayout.KeyGroupSpan(r) }

// KeyGroupOf returns the key group a stored key belongs to.
func KeyGroupOf(k []byte) (int, error) { return kvlayout.KeyGroupOf(k) }

func appendBytes(b, x []byte) []byte { return kvlayout.AppendBytes(b, x) }

func readBytes(b []byte) (x, rest []byte, ok bool) { return kvlayout.ReadBytes(b) }

// entryPrefix encodes the (state, key group, key, namespace) address.
func entryPrefix(buf []byte, state string, k backend.Key) []byte {
	return kvlayout.AppendEntryKey(buf, state, k)
}

// stateKGPrefix encodes kg | state, the prefix of all entries of a state in
// one key group.
func stateKGPrefix(buf []byte, state string, kg int) []byte {
	return kvlayout.AppendStatePrefix(buf, state, kg)
}

func timerKey(buf []byte, state string, t backend.Timer) []byte {
	return kvlayout.AppendTimerKey(buf, state, t)
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

// DecodedKey is a stored key taken apart.
type DecodedKey = kvlayout.DecodedKey

// SplitKey parses kg | state | rest.
func SplitKey(k []byte) (DecodedKey, error) { return kvlayout.SplitKey(k) }

// decodeTimer parses what follows the state name of a timer key into a
// timer that owns its bytes.
func decodeTimer(kg int, rest []byte) (backend.Timer, bool) {
	ts, key, ns, ok := kvlayout.SplitTimer(rest)
	if !ok {
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
