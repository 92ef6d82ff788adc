package kvstate

import (
	"encoding/binary"
	"testing"

	"pgregory.net/rapid"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/kvlayout"
)

// TestEntryPrefixOneAllocation: the key built on every operation costs one
// allocation, and the size computed up front matches what is appended.
func TestEntryPrefixOneAllocation(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 1<<40).Draw(t, "n")
		if got, want := kvlayout.UvarintLen(n), len(binary.AppendUvarint(nil, uint64(n))); got != want {
			t.Fatalf("uvarintLen(%d) = %d, AppendUvarint wrote %d", n, got, want)
		}
		state := rapid.StringN(0, 200, -1).Draw(t, "state")
		k := backend.Key{KeyGroup: rapid.IntRange(0, 1<<15-1).Draw(t, "kg"),
			Key:       rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(t, "key"),
			Namespace: rapid.SliceOfN(rapid.Byte(), 0, 200).Draw(t, "ns")}
		got := entryPrefix(nil, state, k)
		want := binary.BigEndian.AppendUint16(nil, uint16(k.KeyGroup))
		want = appendBytes(appendBytes(appendBytes(want, []byte(state)), k.Key), k.Namespace)
		if string(got) != string(want) {
			t.Fatalf("entryPrefix = %x, want %x", got, want)
		}
	})
	k := backend.Key{KeyGroup: 7, Key: []byte("a key of some length"), Namespace: []byte("ns")}
	if allocs := testing.AllocsPerRun(100, func() { _ = entryPrefix(nil, "value", k) }); allocs != 1 && !raceEnabled {
		t.Fatalf("entryPrefix allocated %v times, want 1", allocs)
	}
}
