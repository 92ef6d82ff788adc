package kvstate

import (
	"fmt"

	"github.com/statedhq/stated/backend"
)

// SnapshotFilter returns a function that a full snapshot calls for every
// stored entry: it reports whether to write the entry. Values, map entries
// and aggregates past their TTL at nowMs are left out (space is reclaimed
// during snapshots, as DESIGN.md asks); lists expire element by element on
// read, so they are always kept. Entries of states not in states are kept.
func SnapshotFilter(states []backend.StateDescriptor, nowMs int64) func(k, v []byte) bool {
	withTTL := map[string]bool{}
	for _, d := range states {
		if d.TTL > 0 && d.Kind != backend.KindList {
			withTTL[d.Name] = true
		}
	}
	if len(withTTL) == 0 {
		return func(k, v []byte) bool { return true }
	}
	return func(k, v []byte) bool {
		sk, err := SplitKey(k)
		if err != nil || !withTTL[sk.State] {
			return true
		}
		return !Expired(v, nowMs)
	}
}

// CheckEntry validates a stored key read back from a restore source and
// reports whether its key group lies in r (entries outside are skipped when
// restoring into a sub-range).
func CheckEntry(k []byte, r backend.KeyGroupRange) (bool, error) {
	sk, err := SplitKey(k)
	if err != nil {
		return false, err
	}
	if sk.State == "" {
		return false, fmt.Errorf("%w: stored key %x has an empty state name", backend.ErrCorrupt, k)
	}
	return r.Contains(sk.KeyGroup), nil
}
