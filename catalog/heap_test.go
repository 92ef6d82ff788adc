package catalog

import (
	"reflect"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// heapFiles lists the heap store's objects by checkpoint directory.
func heapFiles(t testing.TB, s *memstore.Store) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, name := range names(storeSnapshot(t, s, "")) {
		n := classify(name)
		out[n.dir()] = append(out[n.dir()], name)
	}
	return out
}

// TestHeapStoreBounded: with Options.HeapStore, the heap snapshot files of
// a job that takes many checkpoints are those of its retained checkpoints
// only; aborted, declined, released and expired ones leave nothing, and the
// retained ones still restore.
func TestHeapStoreBounded(t *testing.T) {
	s, hs := memstore.New(), memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk, func(o *Options) { o.Retain = 3; o.HeapStore = hs })
	if c.HeapStore() != tiered.Store(hs) {
		t.Fatal("HeapStore does not return Options.HeapStore")
	}
	in := &instance{heapStore: hs}
	b := in.open(t, backend.KindHeap, taskOpts("j", s))
	defer b.Close()
	model := kvModel{}
	var maxSnap int64
	for id := uint64(1); id <= 50; id++ {
		writeSome(t, b, model, int(id))
		m := realCheckpoint(t, c, b, id)
		maxSnap = max(maxSnap, m.FullSize)
		files := heapFiles(t, hs)
		if len(files) != min(int(id), 3) {
			t.Fatalf("after checkpoint %d the heap store holds %d checkpoints: %v", id, len(files), files)
		}
		for _, f := range files {
			if n := classify(f[0]); n.id+3 <= id {
				t.Fatalf("after checkpoint %d the heap store still holds subsumed %s", id, n.dir())
			}
		}
		if got := hs.Bytes(); got > 3*maxSnap {
			t.Fatalf("after checkpoint %d the heap store holds %d bytes, more than 3 snapshots of at most %d", id, got, maxSnap)
		}
	}

	// Aborted, declined and released checkpoints leave nothing.
	for i, end := range []func(id uint64) error{
		func(id uint64) error { return c.Abort(ctx, "j", id, StatusAborted, "test") },
		func(id uint64) error { return c.Abort(ctx, "j", id, StatusDeclined, "test") },
		func(id uint64) error { return c.Release(ctx, "j", id) },
	} {
		id := uint64(100 + i)
		if err := c.BeginCheckpoint("j", id); err != nil {
			t.Fatal(err)
		}
		if err := c.AddTaskHandle("j", id, snapshotRun(t, b, id)); err != nil {
			t.Fatal(err)
		}
		if len(heapFiles(t, hs)[CheckpointDir("j", id)]) != 1 {
			t.Fatalf("checkpoint %d has no heap file in flight", id)
		}
		if err := end(id); err != nil {
			t.Fatal(err)
		}
		b.NotifyCheckpointAborted(id)
		if f := heapFiles(t, hs)[CheckpointDir("j", id)]; len(f) != 0 {
			t.Fatalf("ended checkpoint %d left heap files %v", id, f)
		}
	}

	// Expiry (an Abort) deletes a stale checkpoint's files; the sweep
	// deletes a late upload of an ended checkpoint and a stray file of a
	// retained one, at once (no grace period); an in-flight checkpoint's
	// files and names outside the layout stay.
	if err := c.BeginCheckpoint("j", 200); err != nil {
		t.Fatal(err)
	}
	snapshotRun(t, b, 200) // uploaded, never added: protected by being in flight
	stale := snapshotRun(t, b, 201)
	if err := c.BeginCheckpoint("j", 201); err != nil {
		t.Fatal(err)
	}
	if err := c.AddTaskHandle("j", 201, stale); err != nil {
		t.Fatal(err)
	}
	late := "j/chk-100/op-0/state-late"
	stray := CheckpointDir("j", 50) + "/op-0/stray"
	for _, name := range []string{late, stray, "not-a-layout-name"} {
		if err := tiered.PutBytes(ctx, hs, name, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	// 200 and 201 outlive the daemon's timeout, which aborts them as
	// expired; 202 begins after.
	clk.Advance(11 * time.Minute)
	for _, id := range []uint64{200, 201} {
		if err := c.Abort(ctx, "j", id, StatusExpired, "not completed within 10m0s"); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.BeginCheckpoint("j", 202); err != nil {
		t.Fatal(err)
	}
	before := names(storeSnapshot(t, hs, ""))
	dry, err := c.GC(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(storeSnapshot(t, hs, "")); !reflect.DeepEqual(got, before) {
		t.Fatalf("a dry run changed the heap store: %v -> %v", before, got)
	}
	if len(dry.HeapOrphans) != 2 || dry.HeapOrphans[0].Name != late || dry.HeapOrphans[1].Name != stray {
		t.Fatalf("dry run heap orphans %+v", dry.HeapOrphans)
	}
	rep, err := c.GC(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	files := heapFiles(t, hs)
	if len(files[CheckpointDir("j", 200)]) != 0 || len(files[CheckpointDir("j", 201)]) != 0 {
		t.Fatalf("expired checkpoints left heap files: %v", files)
	}
	if rep.HeapBytes == 0 || len(rep.HeapOrphans) != 2 {
		t.Fatalf("heap orphans %+v (%d bytes)", rep.HeapOrphans, rep.HeapBytes)
	}
	if _, err := hs.Stat(ctx, "not-a-layout-name"); err != nil {
		t.Fatalf("the sweep deleted a name outside the layout: %v", err)
	}
	if _, err := hs.Stat(ctx, stray); !tiered.IsNotFound(err) {
		t.Fatalf("stray file in a retained checkpoint kept: %v", err)
	}
	// In flight: a file under 202 stays.
	if err := tiered.PutBytes(ctx, hs, CheckpointDir("j", 202)+"/op-0/state-x", []byte("y")); err != nil {
		t.Fatal(err)
	}
	if rep, err := c.GC(ctx, false); err != nil || len(rep.HeapOrphans) != 0 {
		t.Fatalf("sweep with 202 in flight: %+v %v", rep, err)
	}

	// A retained heap checkpoint still restores from the heap store.
	r, err := c.RestoreSource(ctx, RestoreRequest{Job: "j", Mode: ModeClaim})
	if err != nil || r.Manifest.CheckpointID != 50 {
		t.Fatalf("restore source: %v", err)
	}
	o := taskOpts("j", s)
	o.Restore, o.RestoreStore, o.NoClaim = r.Handles, r.Store, r.NoClaim
	rb := in.open(t, backend.KindHeap, o)
	got, err := dumpState(rb, allKGs)
	rb.Close()
	if err != nil || !reflect.DeepEqual(got, model) {
		t.Fatalf("heap restored from retained checkpoint 50: %v\n got %v\nwant %v", err, got, model)
	}

	// DeleteCheckpoint deletes its heap files.
	if err := c.DeleteCheckpoint(ctx, "j", 49); err != nil {
		t.Fatal(err)
	}
	if f := heapFiles(t, hs)[CheckpointDir("j", 49)]; len(f) != 0 {
		t.Fatalf("deleted checkpoint 49 left heap files %v", f)
	}
	if f := heapFiles(t, hs)[CheckpointDir("j", 50)]; len(f) != 1 {
		t.Fatalf("retained checkpoint 50 lost its heap file: %v", f)
	}
}

// Without Options.HeapStore the catalog never touches heap files (the
// stated gc CLI runs in another process and cannot see them anyway).
func TestHeapStoreUnmanaged(t *testing.T) {
	s, hs := memstore.New(), memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk, func(o *Options) { o.Retain = 1 })
	in := &instance{heapStore: hs}
	b := in.open(t, backend.KindHeap, taskOpts("j", s))
	defer b.Close()
	for id := uint64(1); id <= 3; id++ {
		realCheckpoint(t, c, b, id)
	}
	clk.Advance(5 * time.Hour)
	if rep, err := c.GC(ctx, false); err != nil || len(rep.HeapOrphans) != 0 {
		t.Fatalf("gc: %+v %v", rep, err)
	}
	if n := len(heapFiles(t, hs)); n != 3 {
		t.Fatalf("unmanaged heap store holds %d checkpoints, want the 3 written", n)
	}
	if c.HeapStore() != nil {
		t.Fatal("HeapStore of a catalog without one")
	}
}
