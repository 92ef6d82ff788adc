// Package kvlayout is the frozen key and value layout of keyed state: how
// a backend of this module stores an entry of a value, list, map,
// aggregate or timer state as one ordered key and one value. It is the
// content of every snapshot, SST and canonical savepoint, which is what
// makes a canonical savepoint restorable into any backend kind, and what
// lets package inspect read and write state without a backend's code.
//
// It lives once, here: backend/internal/kvstate stores state with it and
// inspect takes stored entries apart and builds new ones with it. Changing
// anything in it changes the format of every checkpoint ever written; the
// layout is frozen.
//
// Key of a value, list or aggregate entry:
//
//	kg(2, big-endian) | uvarint(len(state)) state | uvarint(len(key)) key | uvarint(len(ns)) ns
//
// A map entry: the same followed by the raw user key, so the entries of one
// map are contiguous and sorted by user key. A timer:
//
//	kg(2) | uvarint(len(state)) state | ts(8, big-endian, sign bit flipped) | uvarint(len(key)) key | uvarint(len(ns)) ns
//
// Every component before the last is length-prefixed, so no entry prefix is
// a prefix of another entry's prefix, and the key group comes first, so a
// key-group range is one contiguous span.
//
// Value of a value, map value or aggregate:
//
//	flags(1) | [expiry(8, big-endian unix ms) if flags&FlagTTL] | payload
//
// An aggregate's payload is 8 bytes: the int64 (big-endian) or the float64
// bits. A list is a concatenation of elements, each
//
//	flags(1) | [expiry(8)] | uvarint(len) | payload
//
// so that appending is a blind concatenation and every element carries its
// own time to live.
package kvlayout
