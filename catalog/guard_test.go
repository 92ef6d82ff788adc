package catalog

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

var errDeposed = errors.New("not the leader")

// A catalog whose Guard fails (a deposed cluster leader) writes and
// deletes nothing: retention after a completion leaves every file, the
// job file is not overwritten, and a completion fails rather than
// reporting a checkpoint a later leader might not see.
func TestGuardStopsWritesAndDeletes(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	var deposed atomic.Bool
	var asked atomic.Int64
	c := openCat(t, s, clk, func(o *Options) {
		o.Retain = 1
		o.Guard = func(context.Context) error {
			asked.Add(1)
			if deposed.Load() {
				return errDeposed
			}
			return nil
		}
	})
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	a.state["k"] = "1"
	m1 := checkpoint(t, c, s, 1, a)
	if asked.Load() == 0 {
		t.Fatal("a completion never asked the guard")
	}
	jobFile := storeSnapshot(t, s, "j/")["j/_catalog"]

	deposed.Store(true)
	a.state["k"] = "2"
	report(t, c, s, 2, a)
	if _, err := c.Complete(ctx, "j", 2); !errors.Is(err, errDeposed) {
		t.Fatalf("complete on a deposed node: %v, want the guard's error", err)
	}
	if exists(t, s, CheckpointManifest("j", 2)) {
		t.Fatal("a deposed node wrote a manifest")
	}
	// The sweep deletes nothing either (its error, if it found something
	// to delete, is the guard's; what is left is checked below).
	clk.Advance(2 * DefaultGCGrace)
	_, _ = c.GC(ctx, false)
	for _, p := range filesOf(m1) {
		if !exists(t, s, p) {
			t.Fatalf("file %s of retained checkpoint 1 deleted by a deposed node", p)
		}
	}
	if got := storeSnapshot(t, s, "j/")["j/_catalog"]; got != jobFile {
		t.Fatal("a deposed node rewrote the job file")
	}

	// Leading again, the same checkpoint completes, and retention (1)
	// now deletes checkpoint 1's manifest.
	deposed.Store(false)
	if _, err := c.Complete(ctx, "j", 2); err != nil {
		t.Fatal(err)
	}
	if exists(t, s, CheckpointManifest("j", 1)) {
		t.Fatal("retention kept checkpoint 1 once the guard allowed deletes")
	}
}

// A guard that fails right after the manifest landed makes Complete fail;
// the retried Complete finds the manifest and completes the checkpoint
// with it.
func TestGuardFailingAfterTheManifest(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	var calls, failAt atomic.Int64
	failAt.Store(-1)
	c := openCat(t, s, clk, func(o *Options) {
		o.Guard = func(context.Context) error {
			if calls.Add(1) == failAt.Load() {
				return errDeposed
			}
			return nil
		}
	})
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	a.state["k"] = "1"
	report(t, c, s, 1, a)
	failAt.Store(calls.Load() + 2) // the check after the manifest's write
	if _, err := c.Complete(ctx, "j", 1); !errors.Is(err, errDeposed) || !strings.Contains(err.Error(), "wrote its manifest") {
		t.Fatalf("complete: %v", err)
	}
	if !exists(t, s, CheckpointManifest("j", 1)) {
		t.Fatal("the manifest is gone: the test did not fail after the write")
	}
	m, err := c.Complete(ctx, "j", 1)
	if err != nil || m.CheckpointID != 1 {
		t.Fatalf("retried complete: %v", err)
	}
	if got := c.Retained("j"); len(got) != 1 || got[0] != 1 {
		t.Fatalf("retained %v", got)
	}
}

// CompleteTasks names the tasks without a handle and leaves the
// checkpoint in flight; once they report, it completes; asked again for a
// completed checkpoint it answers with it.
func TestCompleteTasksWaitsForEveryTask(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk)
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 63})
	b := newFakeTask("j", "op", 1, backend.KeyGroupRange{Start: 64, End: 127})
	a.state["x"], b.state["y"] = "1", "2"
	if err := c.BeginCheckpoint("j", 1); err != nil {
		t.Fatal(err)
	}
	report := func(tk *fakeTask) {
		t.Helper()
		tk.snapshot(1)
		h, err := tk.upload(ctx, s, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.AddTaskHandle("j", 1, h); err != nil {
			t.Fatal(err)
		}
		// The same report again (a retried forward) is accepted.
		if err := c.AddTaskHandle("j", 1, h); err != nil {
			t.Fatalf("repeated report: %v", err)
		}
	}
	report(a)
	tasks := []backend.TaskID{a.task, b.task}
	_, err := c.CompleteTasks(ctx, "j", 1, tasks)
	if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), b.task.String()) || strings.Contains(err.Error(), a.task.String()) {
		t.Fatalf("complete without b: %v", err)
	}
	report(b)
	m, err := c.CompleteTasks(ctx, "j", 1, tasks)
	if err != nil || len(m.Tasks) != 2 {
		t.Fatalf("complete: %v", err)
	}
	if _, err := c.CompleteTasks(ctx, "j", 1, tasks); err != nil {
		t.Fatalf("retried complete: %v", err)
	}
	other := backend.TaskID{Job: "j", Operator: "op", Subtask: 2}
	if _, err := c.CompleteTasks(ctx, "j", 1, append(tasks, other)); !errors.Is(err, ErrState) {
		t.Fatalf("a completed checkpoint without an asked-for task: %v", err)
	}
	// A different handle of a task that reported is still refused.
	if err := c.BeginCheckpoint("j", 2); err != nil {
		t.Fatal(err)
	}
	a.snapshot(2)
	h, _ := a.upload(ctx, s, 2)
	if err := c.AddTaskHandle("j", 2, h); err != nil {
		t.Fatal(err)
	}
	h2 := *h
	h2.FullSize++
	if err := c.AddTaskHandle("j", 2, &h2); !errors.Is(err, ErrExists) {
		t.Fatalf("a second, different handle: %v", err)
	}
}

// report begins checkpoint id and reports the handles of tasks, without
// completing it.
func report(t *testing.T, c *Catalog, s tiered.Store, id uint64, tasks ...*fakeTask) {
	t.Helper()
	if err := c.BeginCheckpoint(tasks[0].task.Job, id); err != nil {
		t.Fatal(err)
	}
	for _, tk := range tasks {
		tk.snapshot(id)
		h, err := tk.upload(ctx, s, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.AddTaskHandle(tk.task.Job, id, h); err != nil {
			t.Fatal(err)
		}
	}
}

// DeleteGuard, when set, guards the deletes and Guard the writes: a
// catalog whose writes are allowed (a leader within its lease) but whose
// delete check fails (a quorum round that fails) completes checkpoints
// and deletes nothing.
func TestDeleteGuardGuardsDeletes(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	var writes, deletes atomic.Int64
	c := openCat(t, s, clk, func(o *Options) {
		o.Retain = 1
		o.Guard = func(context.Context) error { writes.Add(1); return nil }
		o.DeleteGuard = func(context.Context) error { deletes.Add(1); return errDeposed }
	})
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	a.state["k"] = "1"
	m1 := checkpoint(t, c, s, 1, a)
	a.state["k"] = "2"
	checkpoint(t, c, s, 2, a)
	if writes.Load() == 0 || deletes.Load() == 0 {
		t.Fatalf("guards asked: %d writes, %d deletes; want both", writes.Load(), deletes.Load())
	}
	// Retention (1) wanted checkpoint 1 gone; the delete guard refused.
	for _, p := range append(filesOf(m1), CheckpointManifest("j", 1)) {
		if !exists(t, s, p) {
			t.Fatalf("%s deleted though the delete guard refused", p)
		}
	}
}
