package catalog

import (
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
