package lsm

import (
	"os"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestIdleInstanceDescriptors: an idle instance holds at most 4 file
// descriptors (Pebble's LOCK, MANIFEST and log file; no directory), so
// that a host's thousands of instances stay within its descriptor limit.
func TestIdleInstanceDescriptors(t *testing.T) {
	count := func() int {
		es, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skipf("no /proc/self/fd on this system: %v", err)
		}
		return len(es)
	}
	const n = 10
	before := count()
	for i := range n {
		b, err := Open(backend.Options{Task: backend.TaskID{Job: "j", Operator: "o", Subtask: i},
			KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}},
			Store: memstore.New()}, Options{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		if err := b.Put("v", backend.Key{KeyGroup: 1, Key: []byte("k")}, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if per := float64(count()-before) / n; per > 4 {
		t.Fatalf("an idle instance holds %.1f descriptors, want at most 4", per)
	}
}
