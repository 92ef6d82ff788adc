package lsm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/backend"
)

// TestIncrementalWritesOnlyNewSSTs is issue 2's target: after a first
// checkpoint of 200k entries, changing 1% of the keys and checkpointing
// again writes at most 5% of the first checkpoint's bytes.
func TestIncrementalWritesOnlyNewSSTs(t *testing.T) {
	const n = 200_000
	e := newEnv(t)
	e.fs = vfs.NewMem() // the test is about bytes, not disks; spare the fsyncs
	b := e.open(full(), func(_ *backend.Options, lo *Options) {
		lo.MemTableSize = 4 << 20
		lo.TargetFileSize = 2 << 20
	})
	rng := rand.New(rand.NewPCG(1, 2))
	val := func() []byte {
		v := make([]byte, 24)
		for i := range v {
			v[i] = byte(rng.Uint32())
		}
		return v
	}
	keyOf := func(i int) backend.Key { return key(i%128, fmt.Sprintf("user-%07d", i)) }
	for i := 0; i < n; i++ {
		must(t, b.Put("v", keyOf(i), val()))
	}
	// A settled store, as a long-running task's is: the bulk in the lower
	// levels, L0 empty. Without this the load's own L0 files would be
	// compacted between the two checkpoints, and an 8 MB store is small
	// enough for one compaction to rewrite all of it; in a large store a
	// compaction rewrites at most about LBaseMaxBytes.
	must(t, b.DB().Compact(context.Background(), []byte{0}, []byte{0xff}, true))
	h1 := checkpoint(t, b, 1)
	b.NotifyCheckpointComplete(1)
	if h1.CheckpointedSize != h1.FullSize {
		t.Fatalf("first checkpoint uploaded %d of %d bytes", h1.CheckpointedSize, h1.FullSize)
	}
	for _, i := range rng.Perm(n)[:n/100] {
		must(t, b.Put("v", keyOf(i), val()))
	}
	start := time.Now()
	p2, err := b.Snapshot(context.Background(), 2)
	must(t, err)
	syncPart := time.Since(start)
	h2, err := p2.Run(context.Background())
	must(t, err)
	t.Logf("checkpoint 2: synchronous part %v, asynchronous part %v", syncPart, time.Since(start)-syncPart)
	t.Logf("checkpoint 1: %d bytes in %d files; checkpoint 2: uploaded %d of %d bytes, %d files",
		h1.CheckpointedSize, len(h1.Files), h2.CheckpointedSize, h2.FullSize, len(h2.Files))
	if limit := h1.CheckpointedSize / 20; h2.CheckpointedSize > limit {
		t.Fatalf("checkpoint 2 uploaded %d bytes, more than 5%% (%d) of checkpoint 1\n%s", h2.CheckpointedSize, limit, fileNames(h2))
	}
	// What was not uploaded is referenced: the same objects as checkpoint 1.
	reused := 0
	p1 := sharedPaths(h1)
	for p := range sharedPaths(h2) {
		if p1[p] {
			reused++
		}
	}
	if reused == 0 {
		t.Fatal("checkpoint 2 references nothing of checkpoint 1")
	}
	want := dump(t, b)
	r := e.open(full(), func(o *backend.Options, _ *Options) { o.Restore = []*backend.Handle{h2} })
	sameDump(t, dump(t, r), want)
}

// TestDropBaseSparesANewerBase: an engine confirms checkpoint n and
// forgets n-1 at once, and the daemon decides to drop the base for n-1
// while n-1 is still the confirmed one. When n's confirmation gets to the
// backend first, that drop must leave n's files as the base: the next
// checkpoint reuses them. Dropping the current base does drop it.
func TestDropBaseSparesANewerBase(t *testing.T) {
	e := newEnv(t)
	b := e.open(full(), nil)
	for i := 0; i < 2000; i++ {
		must(t, b.Put("v", key(i%127, fmt.Sprintf("user-%05d", i)), []byte("value")))
	}
	must(t, b.DB().Compact(context.Background(), []byte{0}, []byte{0xff}, true))
	checkpoint(t, b, 1)
	b.NotifyCheckpointComplete(1)
	h2 := checkpoint(t, b, 2)
	b.NotifyCheckpointComplete(2)
	b.DropBase(1) // the forget of 1, decided before 2 was confirmed

	must(t, b.Put("v", key(127, "late"), []byte("value")))
	h3 := checkpoint(t, b, 3)
	if h3.CheckpointedSize >= h3.FullSize || len(sharedPaths(h2)) == 0 {
		t.Fatalf("checkpoint 3 wrote %d of %d bytes: the stale drop of 1 dropped 2's files from the base", h3.CheckpointedSize, h3.FullSize)
	}
	for p := range sharedPaths(h2) {
		if !sharedPaths(h3)[p] {
			t.Errorf("checkpoint 3 does not reference %s of confirmed checkpoint 2", p)
		}
	}

	b.NotifyCheckpointComplete(3)
	b.DropBase(3)
	h4 := checkpoint(t, b, 4)
	if h4.CheckpointedSize != h4.FullSize {
		t.Errorf("checkpoint 4 wrote %d of %d bytes after its base 3 was dropped, want all", h4.CheckpointedSize, h4.FullSize)
	}
}
