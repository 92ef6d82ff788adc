package catalog

import (
	"slices"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered/memstore"
)

// A checkpoint snapshotted while checkpoint 1 was its backend's confirmed
// base references 1's shared files. Retention drops 1 (another checkpoint
// completes first); the files must survive until the in-flight checkpoint
// completes, so its completion succeeds, and the sweep still removes what
// ends up unreferenced.
func TestDroppedBaseSurvivesForInFlightCheckpoint(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk, func(o *Options) { o.Retain = 1 })
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	a.state["k1"], a.state["k2"] = "v1", "v2"
	m1 := checkpoint(t, c, s, 1, a)

	// Checkpoint 3 starts on base 1 and reuses its files.
	if err := c.BeginCheckpoint("j", 3); err != nil {
		t.Fatal(err)
	}
	a.snapshot(3)
	h3, err := a.upload(ctx, s, 3)
	if err != nil {
		t.Fatal(err)
	}
	reused := 0
	for _, f := range h3.Files {
		for _, p := range filesOf(m1) {
			if f.Path == p {
				reused++
			}
		}
	}
	if reused == 0 {
		t.Fatal("checkpoint 3 reuses none of checkpoint 1's files; the test sets up nothing")
	}
	// Checkpoint 2 of another task completes first and drops 1.
	b := newFakeTask("j", "op2", 0, backend.KeyGroupRange{Start: 0, End: 127})
	b.state["x"] = "y"
	checkpoint(t, c, s, 2, b)
	for _, f := range h3.Files {
		if !exists(t, s, f.Path) {
			t.Fatalf("file %s that in-flight checkpoint 3 references was deleted when 1 was dropped", f.Path)
		}
	}
	if err := c.AddTaskHandle("j", 3, h3); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Complete(ctx, "j", 3); err != nil {
		t.Fatalf("complete 3 after its base was dropped: %v", err)
	}
}

// Job a claims b's checkpoint 1 and builds on it; b then claims it back
// and its retention drops it. a's next checkpoint reuses 1's shared files:
// they must still exist (a holds them), and once a's checkpoint completes
// and a's base moves on, what nothing references any more is deleted.
func TestClaimedBaseOutlivesAnotherOwnersRetention(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk, func(o *Options) { o.Retain = 1 })
	b := newFakeTask("b", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	b.state["k1"], b.state["k2"], b.state["k3"] = "v1", "v2", "v3"
	m1 := checkpoint(t, c, s, 1, b)

	a := newFakeTask("a", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	r, err := c.RestoreSource(ctx, RestoreRequest{Job: "a", FromJob: "b", CheckpointID: 1, Mode: ModeClaim})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.restore(ctx, r.Store, r.Handles[0], r.NoClaim); err != nil {
		t.Fatal(err)
	}
	// b restarts from its checkpoint 1 in claim mode, taking it back, and
	// completes two more: retention 1 drops checkpoint 1.
	if _, err := c.RestoreSource(ctx, RestoreRequest{Job: "b", CheckpointID: 1, Mode: ModeClaim}); err != nil {
		t.Fatal(err)
	}
	b.state["k1"], b.state["k2"], b.state["k3"] = "w1", "w2", "w3"
	checkpoint(t, c, s, 2, b)
	b.state["k1"] = "x1"
	checkpoint(t, c, s, 3, b)
	if _, ok := c.Checkpoint("b", 1); ok {
		t.Fatal("checkpoint b/1 is still retained; the test drops nothing")
	}
	var held []string
	for _, p := range filesOf(m1) {
		if classify(p).kind == objShared {
			held = append(held, p)
			if !exists(t, s, p) {
				t.Fatalf("shared file %s of a's base b/1 was deleted by b's retention", p)
			}
		}
	}
	// a changes one key: its checkpoint reuses the rest of b/1.
	a.state["k1"] = "a1"
	m := checkpoint(t, c, s, 1, a)
	reused := 0
	for _, p := range filesOf(m) {
		if slices.Contains(held, p) {
			reused++
		}
	}
	if reused == 0 {
		t.Fatal("a's checkpoint reuses no file of b/1; the test shows nothing")
	}
	// a's base is a/1 now: b/1's files that a/1 does not reuse are gone,
	// the ones it does stay.
	for _, p := range held {
		if got, want := exists(t, s, p), slices.Contains(filesOf(m), p); got != want {
			t.Fatalf("after a's base moved on, %s exists=%v, want %v", p, got, want)
		}
	}
}

// An explicit DeleteCheckpoint of a job's own base keeps the base's shared
// files for the job's next checkpoint, and a restore elsewhere lets them go.
func TestDeletedBaseIsHeldUntilTheJobRestores(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk)
	a := newFakeTask("a", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	a.state["k1"], a.state["k2"] = "v1", "v2"
	m1 := checkpoint(t, c, s, 1, a)
	if err := c.DeleteCheckpoint(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	var shared []string
	for _, p := range filesOf(m1) {
		if classify(p).kind == objShared {
			shared = append(shared, p)
		}
	}
	for _, p := range shared {
		if !exists(t, s, p) {
			t.Fatalf("deleting a's base removed %s, which a's next checkpoint reuses", p)
		}
	}
	// a restores another job's checkpoint (no-claim): a builds on
	// nothing of its old base any more.
	o := newFakeTask("o", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	o.state["x"] = "y"
	checkpoint(t, c, s, 1, o)
	if _, err := c.RestoreSource(ctx, RestoreRequest{Job: "a", FromJob: "o", CheckpointID: 1, Mode: ModeNoClaim}); err != nil {
		t.Fatal(err)
	}
	for _, p := range shared {
		if exists(t, s, p) {
			t.Fatalf("%s of a's dropped base survives a's restore from elsewhere", p)
		}
	}
}

// A checkpoint that completes after a newer one of its job does not move
// the job's base back: the tasks keep building on the newer one (as lsm
// does), so deleting the newer one keeps its shared files for the next
// checkpoint. Before the base moved to whichever completed last, and the
// next checkpoint failed with a shared file missing.
func TestOlderCompletionLeavesTheBase(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk, func(o *Options) { o.Retain = 2 })
	a := newFakeTask("a", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	a.state["k1"] = "v1"
	report(t, c, s, 1, a)
	a.state["k2"] = "v2"
	report(t, c, s, 2, a)
	for _, id := range []uint64{2, 1} {
		if _, err := c.Complete(ctx, "a", id); err != nil {
			t.Fatal(err)
		}
		a.notifyComplete(id)
	}
	if err := c.DeleteCheckpoint(ctx, "a", 2); err != nil {
		t.Fatal(err)
	}
	a.state["k3"] = "v3"
	report(t, c, s, 3, a)
	if _, err := c.Complete(ctx, "a", 3); err != nil {
		t.Fatalf("the checkpoint after the base was deleted: %v", err)
	}
}

// After a restore the base moves to the next completion whatever its id,
// as the backends' bases do: a job that restored its checkpoint 5 and
// then completed 3 builds on 3, so deleting 3 keeps its shared files for
// the next checkpoint.
func TestFirstCompletionAfterARestoreMovesTheBase(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk, func(o *Options) { o.Retain = 3 })
	a := newFakeTask("a", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	a.state["k1"] = "v1"
	checkpoint(t, c, s, 5, a)
	r, err := c.RestoreSource(ctx, RestoreRequest{Job: "a", CheckpointID: 5, Mode: ModeClaim})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.restore(ctx, s, r.Handles[0], false); err != nil {
		t.Fatal(err)
	}
	a.state["k2"] = "v2"
	checkpoint(t, c, s, 3, a)
	if err := c.DeleteCheckpoint(ctx, "a", 3); err != nil {
		t.Fatal(err)
	}
	a.state["k3"] = "v3"
	report(t, c, s, 4, a)
	if _, err := c.Complete(ctx, "a", 4); err != nil {
		t.Fatalf("the checkpoint after the base was deleted: %v", err)
	}
}
