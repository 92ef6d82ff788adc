package lsm

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/heap"
	"github.com/statedhq/stated/backend/internal/kvstate"
	"github.com/statedhq/stated/tiered/memstore"
)

// restrict keeps the entries of d whose key group lies in r.
func restrict(t *testing.T, d map[string]string, r backend.KeyGroupRange) map[string]string {
	out := map[string]string{}
	for k, v := range d {
		kg, err := kvstate.KeyGroupOf([]byte(k))
		must(t, err)
		if r.Contains(kg) {
			out[k] = v
		}
	}
	return out
}

// sstBytes is the size of the SSTs in b's local store.
func sstBytes(t *testing.T, b *Backend) int64 {
	fs := b.lo.FS
	names, err := fs.List(b.dbDir)
	must(t, err)
	var n int64
	for _, name := range names {
		if strings.HasSuffix(name, ".sst") {
			info, err := fs.Stat(fs.PathJoin(b.dbDir, name))
			must(t, err)
			n += info.Size()
		}
	}
	return n
}

// TestClipToSubRange: a restore into half the key groups keeps exactly
// them; the clipped keys never come back, neither in the instance nor in
// its next checkpoint read back; local disk holds little more than the
// kept half (FLINK-34050); and the checkpoint references the restored
// SSTs instead of uploading them again.
func TestClipToSubRange(t *testing.T) {
	e := newEnv(t)
	b := e.open(full(), func(_ *backend.Options, lo *Options) { lo.TargetFileSize = 64 << 10 })
	fill(t, b, full(), 40_000, "a")
	must(t, b.DB().Compact(context.Background(), []byte{0}, []byte{0xff}, true))
	h1 := checkpoint(t, b, 1)
	all := dump(t, b)
	low := backend.KeyGroupRange{Start: 0, End: 63}
	high := backend.KeyGroupRange{Start: 64, End: 127}
	mid := backend.KeyGroupRange{Start: 40, End: 90}

	for _, r := range []backend.KeyGroupRange{low, high, mid} {
		c := e.open(r, func(o *backend.Options, _ *Options) { o.Restore = []*backend.Handle{h1} })
		sameDump(t, dump(t, c), restrict(t, all, r))
		if err := c.Put("v", key(r.End+1, "x"), nil); r.End < 127 && !errors.Is(err, backend.ErrKeyGroupOutOfRange) {
			t.Fatalf("put outside %s: %v", r, err)
		}
		// Little more than the kept share stays on disk: whole files
		// outside are dropped, only boundary files keep hidden bytes.
		share := float64(r.Len()) / 128
		onDisk, limit := sstBytes(t, c), int64(float64(sstBytes(t, b))*(share+0.15))
		if onDisk > limit {
			t.Fatalf("restore into %s keeps %d SST bytes on disk, over %d", r, onDisk, limit)
		}
		t.Logf("restore into %s: %d of %d SST bytes on local disk", r, onDisk, sstBytes(t, b))
		must(t, c.Put("v", key(r.Start, "new"), []byte("n")))
		want := dump(t, c)
		h2 := checkpoint(t, c, 2)
		if h2.KeyGroups != r {
			t.Fatalf("handle range %s, want %s", h2.KeyGroups, r)
		}
		if h2.CheckpointedSize > h1.FullSize/10 {
			t.Fatalf("checkpoint after clipping to %s uploaded %d bytes (restored %d)", r, h2.CheckpointedSize, h1.FullSize)
		}
		// Read the new checkpoint back and look at every stored key, with
		// no bounds at all.
		back := e.open(r, func(o *backend.Options, _ *Options) { o.Restore = []*backend.Handle{h2} })
		got := dump(t, back)
		sameDump(t, got, want)
		for k := range got {
			if kg, _ := kvstate.KeyGroupOf([]byte(k)); !r.Contains(kg) {
				t.Fatalf("checkpoint of %s holds key %x of key group %d", r, k, kg)
			}
		}
	}
}

// storedKey is the stored key of value state "v" (kvstate's layout).
func storedKey(k backend.Key) string {
	b := append(kvstate.KeyGroupPrefix(k.KeyGroup), 1, 'v')
	b = append(append(b, byte(len(k.Key))), k.Key...)
	return string(append(b, byte(len(k.Namespace))))
}

// TestRestoreMixedHandles: lsm handles, a canonical (file) handle and a
// heap handle together restore one range; each key group comes from the
// first handle listed that holds it.
func TestRestoreMixedHandles(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	r1 := backend.KeyGroupRange{Start: 0, End: 39}
	r2 := backend.KeyGroupRange{Start: 40, End: 79}
	r3 := backend.KeyGroupRange{Start: 80, End: 127}
	b1 := e.open(r1, nil)
	fill(t, b1, r1, 3000, "one")
	h1 := checkpoint(t, b1, 1)
	b2 := e.open(r2, func(o *backend.Options, _ *Options) { o.Task.Subtask = 1 })
	fill(t, b2, r2, 3000, "two")
	cp, err := b2.CanonicalSnapshot(ctx, 1, e.store, "savepoints/s")
	must(t, err)
	h2, err := cp.Run(ctx)
	must(t, err)
	if h2.Backend != backend.KindFile {
		t.Fatalf("canonical handle of backend %s", h2.Backend)
	}
	heapStore := memstore.New()
	hb, err := heap.Open(backend.Options{Task: backend.TaskID{Job: "job", Operator: "op", Subtask: 2}, KeyGroups: r3,
		States: testStates, Store: e.store}, heap.Options{Snapshots: heapStore})
	must(t, err)
	defer hb.Close()
	heapKeys := map[string]bool{} // stored keys written to the heap instance
	for i := 0; i < 3000; i++ {
		k := key(r3.Start+i%r3.Len(), "h"+string(rune('a'+i%26)))
		must(t, hb.Put("v", k, []byte("three")))
		heapKeys[storedKey(k)] = true
	}
	hp, err := hb.Snapshot(ctx, 1)
	must(t, err)
	h3, err := hp.Run(ctx)
	must(t, err)

	want := map[string]string{}
	for _, d := range []map[string]string{dump(t, b1), dump(t, b2)} {
		for k, v := range d {
			want[k] = v
		}
	}
	// The heap snapshot is only in the daemon's memory store.
	_, err = Open(backend.Options{Task: testTask, KeyGroups: full(), States: testStates, Store: e.store,
		Restore: []*backend.Handle{h1, h2, h3}}, Options{Dir: e.root + "/noheap", FS: e.fs})
	if !errors.Is(err, backend.ErrNotFound) || !strings.Contains(err.Error(), "daemon") {
		t.Fatalf("heap handle without the heap store: %v", err)
	}
	mid := backend.KeyGroupRange{Start: 20, End: 100}
	for _, r := range []backend.KeyGroupRange{full(), mid} {
		// h2 is listed twice: the second copy owns nothing.
		c := e.open(r, func(o *backend.Options, lo *Options) {
			o.Restore = []*backend.Handle{h2, h1, h3, h2}
			lo.HeapSnapshots = heapStore
		})
		got := dump(t, c)
		wantR := restrict(t, want, r)
		for k := range heapKeys {
			if kg, _ := kvstate.KeyGroupOf([]byte(k)); r.Contains(kg) {
				wantR[k] = "\x00three" // no TTL flag, then the payload
			}
		}
		for k, v := range got {
			if wantR[k] != v {
				t.Fatalf("entry %x = %x, want %x", k, v, wantR[k])
			}
			delete(wantR, k)
		}
		if len(wantR) != 0 {
			t.Fatalf("restore into %s lost %d entries", r, len(wantR))
		}
	}
}
