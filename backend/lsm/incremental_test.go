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
