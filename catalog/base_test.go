package catalog

import (
	"fmt"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestInFlightCheckpointPinsItsBase: a checkpoint in flight keeps the
// shared files of the base it began on, whoever else lists them. Job a
// claims job b's checkpoint 1 while b's checkpoint 4, begun on it, is in
// flight; b moves on (2 and 3 complete); a builds on 1 and drops it,
// restores its own newest without claiming it, and deletes that one, the
// last to list 1's files. b's
// checkpoint 4 must still complete with every file there (found by
// TestMachineReplaysItsCommands).
func TestInFlightCheckpointPinsItsBase(t *testing.T) {
	mem := memstore.New()
	c := openCat(t, mem, &testClock{}, func(o *Options) { o.Retain = 1 })
	newTasks := func(job string) []*fakeTask {
		return []*fakeTask{
			newFakeTask(job, "op", 0, backend.KeyGroupRange{Start: 0, End: 63}),
			newFakeTask(job, "op", 1, backend.KeyGroupRange{Start: 64, End: 127}),
		}
	}
	tasks := map[string][]*fakeTask{"a": newTasks("a"), "b": newTasks("b")}
	handles := map[ref][]*backend.Handle{}
	begin := func(job string, id uint64) {
		t.Helper()
		if err := c.BeginCheckpoint(job, id); err != nil {
			t.Fatal(err)
		}
		for _, tk := range tasks[job] {
			tk.snapshot(id)
			h, err := tk.upload(ctx, mem, id)
			if err != nil {
				t.Fatal(err)
			}
			handles[ref{job, id}] = append(handles[ref{job, id}], h)
		}
	}
	complete := func(job string, id uint64) {
		t.Helper()
		if _, err := c.Complete(ctx, job, id, handles[ref{job, id}]...); err != nil {
			t.Fatalf("complete %s/%d: %v", job, id, err)
		}
		for _, tk := range tasks[job] {
			tk.notifyComplete(id)
		}
	}
	for id := uint64(1); id <= 3; id++ {
		for i, tk := range tasks["b"] {
			tk.state["k"] = fmt.Sprint(id, i)
		}
		begin("b", id)
	}
	complete("b", 1)
	begin("b", 4) // reuses every shared file of 1
	res, err := c.RestoreSource(ctx, RestoreRequest{Job: "a", FromJob: "b", CheckpointID: 1, Mode: ModeClaim})
	if err != nil {
		t.Fatal(err)
	}
	for i, tk := range tasks["a"] {
		if err := tk.restore(ctx, res.Store, res.Handles[i], res.NoClaim); err != nil {
			t.Fatal(err)
		}
	}
	complete("b", 2)
	complete("b", 3)
	begin("a", 5)
	complete("a", 5) // a drops the claimed 1 (retains one)
	// a restores its newest without claiming it (no base to hold), then
	// deletes it.
	res, err = c.RestoreSource(ctx, RestoreRequest{Job: "a", Mode: ModeNoClaim})
	if err != nil {
		t.Fatal(err)
	}
	for i, tk := range tasks["a"] {
		if err := tk.restore(ctx, res.Store, res.Handles[i], res.NoClaim); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.DeleteCheckpoint(ctx, "a", 5); err != nil {
		t.Fatal(err)
	}
	complete("b", 4)
	m, ok := c.Checkpoint("b", 4)
	if !ok {
		t.Fatal("checkpoint b/4 is not retained")
	}
	for _, h := range m.Tasks {
		for _, f := range h.Files {
			if _, err := mem.Stat(ctx, f.Path); err != nil {
				t.Fatalf("file %s of b/4: %v", f.Path, err)
			}
		}
	}
}
