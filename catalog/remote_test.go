package catalog

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestRemoteReleaseOnRetention: when retention discards a checkpoint, the
// remote SSTs only it held (the instance compacted them away) go at once,
// without a sweep; those the live instance or a retained checkpoint still
// holds stay.
func TestRemoteReleaseOnRetention(t *testing.T) {
	ctx := context.Background()
	clk := &testClock{}
	store := memstore.New()
	c, err := Open(ctx, clk.opts(store)) // Retain 2
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := openRemoteLSM(t, store)
	handles := map[uint64]*backend.Handle{}
	for id := uint64(1); id <= 3; id++ {
		for i := range 200 {
			k := fmt.Sprintf("k%04d", i)
			if err := b.Put("v", backend.Key{KeyGroup: i % 128, Key: []byte(k)}, []byte(fmt.Sprintf("%d-%0100d", id, i))); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.DB().Flush(); err != nil {
			t.Fatal(err)
		}
		// Every table of the earlier checkpoints leaves the version.
		if err := b.DB().Compact(ctx, []byte{0}, []byte{0xff, 0xff}, false); err != nil {
			t.Fatal(err)
		}
		handles[id] = realCheckpoint(t, c, b, id).Tasks[0]
	}
	kept := map[string]bool{}
	for _, id := range []uint64{2, 3} {
		for _, f := range handles[id].Files {
			kept[f.Path] = true
		}
	}
	// Pebble deletes the files a compaction made obsolete in the
	// background (its marker, then the object if no marker is left): the
	// last of the two holders to let go deletes the object, so wait for
	// Pebble to finish.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		left := 0
		for _, f := range handles[1].Files {
			if _, err := store.Stat(ctx, f.Path); err == nil && !kept[f.Path] {
				left++
			}
		}
		if left == 0 {
			break
		}
	}
	gone := 0
	for _, f := range handles[1].Files {
		_, err := store.Stat(ctx, f.Path)
		switch {
		case kept[f.Path] && err != nil:
			t.Fatalf("%s of retained checkpoints: %v", f.Path, err)
		case !kept[f.Path] && !tiered.IsNotFound(err):
			t.Fatalf("%s only the discarded checkpoint 1 held is still there (%v)", f.Path, err)
		case !kept[f.Path]:
			gone++
		}
	}
	if gone == 0 {
		t.Fatal("checkpoint 1 shared all its tables with the retained ones: the test proves nothing")
	}
	for _, id := range []uint64{2, 3} {
		for _, f := range handles[id].Files {
			if _, err := store.Stat(ctx, f.Path); err != nil {
				t.Fatalf("%s of retained checkpoint %d: %v", f.Path, id, err)
			}
		}
	}
}

// TestRemoteSweepKeepsLiveInstance: with a grace period shorter than the
// lease refresh, a sweep still takes a live instance's lease for fresh
// and leaves its SSTs alone (minLeaseWindow).
func TestRemoteSweepKeepsLiveInstance(t *testing.T) {
	ctx := context.Background()
	clk := &testClock{}
	store := memstore.New()
	o := clk.opts(store)
	o.GCGrace = time.Nanosecond
	c, err := Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, err := lsm.Open(backend.Options{Task: backend.TaskID{Job: "a", Operator: "op"}, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127},
		MaxParallelism: 128, States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}, Store: store},
		lsm.Options{Dir: "/inst", FS: vfs.NewMem(), MemTableSize: 64 << 10,
			Remote: &lsm.RemoteOptions{Store: store, CacheBytes: 1 << 20, LeaseInterval: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i := range 500 {
		if err := b.Put("v", backend.Key{KeyGroup: i % 128, Key: []byte(fmt.Sprint(i))}, []byte(fmt.Sprintf("%0200d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond) // older than the grace period
	if _, err := c.GC(ctx, false); err != nil {
		t.Fatal(err)
	}
	for i := range 500 {
		if _, ok, err := b.Get("v", backend.Key{KeyGroup: i % 128, Key: []byte(fmt.Sprint(i))}); err != nil || !ok {
			t.Fatalf("key %d after the sweep: %v, present %v (the live instance's SSTs were swept)", i, err, ok)
		}
	}
}

// TestRemoteVerifyChecksBlocks: verify reads the size-only tables of a
// remote-mode checkpoint as SSTs and checks Pebble's block checksums, so
// one byte flipped inside a data block (the size unchanged) is found and
// the report names the object.
func TestRemoteVerifyChecksBlocks(t *testing.T) {
	ctx := context.Background()
	clk := &testClock{}
	store := memstore.New()
	c, err := Open(ctx, clk.opts(store))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := openRemoteLSM(t, store)
	for i := range 300 {
		if err := b.Put("v", backend.Key{KeyGroup: i % 128, Key: []byte(fmt.Sprintf("k%04d", i))}, []byte(fmt.Sprintf("%0100d", i))); err != nil {
			t.Fatal(err)
		}
	}
	h := realCheckpoint(t, c, b, 1).Tasks[0]
	rep, err := c.Verify(ctx, "a", 1)
	if err != nil || !rep.OK() || rep.Files != len(h.Files) {
		t.Fatalf("verify of an intact remote-mode checkpoint (%d tables): %+v %v", len(h.Files), rep, err)
	}
	victim := h.Files[len(h.Files)/2]
	if !victim.SizeOnly || victim.Table == nil {
		t.Fatalf("%+v is no size-only table", victim)
	}
	data, err := tiered.ReadAll(ctx, store, victim.Path, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	// An SST's first data block starts at offset 0 and holds a key and
	// value of this test's at byte 20.
	data[20] ^= 0x40
	if err := tiered.PutBytes(ctx, store, victim.Path, data); err != nil {
		t.Fatal(err)
	}
	rep, err = c.Verify(ctx, "a", 1)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || len(rep.Problems) != 1 || rep.Problems[0].Path != victim.Path || rep.Problems[0].Missing ||
		!strings.Contains(rep.Problems[0].Detail, "checksum") {
		t.Fatalf("verify after a flipped byte in %s: %+v", victim.Path, rep.Problems)
	}
	t.Logf("verify reports %s", rep.Problems[0])
	if err := store.Delete(ctx, victim.Path); err != nil {
		t.Fatal(err)
	}
	rep, err = c.Verify(ctx, "a", 1)
	if err != nil || len(rep.Problems) != 1 || !rep.Problems[0].Missing || rep.Problems[0].Path != victim.Path {
		t.Fatalf("verify after %s was deleted: %+v %v", victim.Path, rep, err)
	}
}

// openRemoteLSM opens task a/op/0 (value state "v", every key group) in
// lsm remote mode over store, in memory; it closes with the test.
func openRemoteLSM(t *testing.T, store tiered.Store) *lsm.Backend {
	t.Helper()
	task := backend.TaskID{Job: "a", Operator: "op"}
	b, err := lsm.Open(backend.Options{Task: task, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, MaxParallelism: 128,
		States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}, Store: store},
		lsm.Options{Dir: "/inst", FS: vfs.NewMem(), MemTableSize: 64 << 10,
			Remote: &lsm.RemoteOptions{Store: store, CacheBytes: 1 << 20, LeaseInterval: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}
