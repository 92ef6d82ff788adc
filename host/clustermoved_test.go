package host_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// openOn opens task on nd with key groups kg of maxParallelism 128.
func openOn(t *testing.T, ctx context.Context, nd *host.Host, task backend.TaskID, kg backend.KeyGroupRange) *daemon.Instance {
	t.Helper()
	in, err := nd.Daemon().Open(ctx, daemon.OpenParams{Task: task, KeyGroups: kg, Kind: backend.KindFile, States: valueState})
	if err != nil {
		t.Fatalf("open %s on %s: %v", task, nd.Cluster().ID(), err)
	}
	return in
}

var allGroups = backend.KeyGroupRange{Start: 0, End: 127}

// TestMovedTaskHandleFencedOnTheLeader: an instance reports its handle of
// checkpoint 1, then its task is opened on another node (a takeover);
// a completion through a third node, which holds no task and sends no
// token of its own, is refused on the leader with an error naming the
// task and the stale token, and the checkpoint has no manifest. Before
// the leader checked every handle's token, only the completing node's
// own tasks were checked, and the old holder's handle completed.
func TestMovedTaskHandleFencedOnTheLeader(t *testing.T) {
	st := memstore.New()
	nodes := startNodesOn(t, st, 3, "secret")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	task := backend.TaskID{Job: "z", Operator: "op"}
	old := openOn(t, ctx, nodes[0], task, allGroups)
	if _, err := nodes[0].Daemon().Snapshot(ctx, old, 1, true); err != nil {
		t.Fatalf("snapshot while holding the token: %v", err)
	}
	// The token is read from nodes[0]'s own replica, which a follower
	// applies a moment after the leader committed the open: wait for it.
	var oldToken uint64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		tok, _, ok := nodes[0].Cluster().Holder("z/op/0")
		if ok && tok != 0 {
			oldToken = tok
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("nodes[0] never applied the token of its own open")
		}
	}
	openOn(t, ctx, nodes[1], task, allGroups) // the task moves: a newer token
	_, err := nodes[2].Daemon().CompleteCheckpoint(ctx, "z", 1, []backend.TaskID{task})
	if !errors.Is(err, daemon.ErrFenced) || !strings.Contains(err.Error(), "task z/op/0") ||
		!strings.Contains(err.Error(), "fencing token "+itoa(oldToken)) || !strings.Contains(err.Error(), "node n1 holds token") {
		t.Fatalf("completion through a third node with the moved task's old handle: %v", err)
	}
	if _, err := st.Stat(ctx, catalog.CheckpointManifest("z", 1)); !tiered.IsNotFound(err) {
		t.Fatalf("checkpoint 1 has a manifest (%v)", err)
	}
	// Without a task list too.
	if _, err := nodes[2].Daemon().CompleteCheckpoint(ctx, "z", 1, nil); !errors.Is(err, daemon.ErrFenced) {
		t.Fatalf("completion without a task list: %v", err)
	}
}

// TestTakeoverReplacesTheOldHandle: after a takeover the new holder's
// report of the same checkpoint replaces the old holder's handle (the
// old one is invalid), and the checkpoint completes with the new one.
func TestTakeoverReplacesTheOldHandle(t *testing.T) {
	st := memstore.New()
	nodes := startNodesOn(t, st, 3, "secret")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	task := backend.TaskID{Job: "r", Operator: "op"}
	old := openOn(t, ctx, nodes[0], task, allGroups)
	if _, err := nodes[0].Daemon().Snapshot(ctx, old, 1, true); err != nil {
		t.Fatal(err)
	}
	moved := openOn(t, ctx, nodes[1], task, allGroups)
	if _, err := nodes[1].Daemon().Snapshot(ctx, moved, 1, true); err != nil {
		t.Fatalf("the new holder's report of the same checkpoint: %v", err)
	}
	info, err := nodes[2].Daemon().CompleteCheckpoint(ctx, "r", 1, []backend.TaskID{task})
	if err != nil {
		t.Fatalf("completion with the new holder's handle: %v", err)
	}
	if info.Tasks != 1 {
		t.Fatalf("completed with %d tasks", info.Tasks)
	}
	// The zombie's snapshot of the next checkpoint is refused.
	if _, err := nodes[0].Daemon().Snapshot(ctx, old, 2, true); !errors.Is(err, daemon.ErrFenced) {
		t.Fatalf("the old holder's next snapshot: %v", err)
	}
}

// TestPartialCompletionRefused: a parallelism-2 operator with subtask 0
// on one node and subtask 1 on another; a completion without a task list
// through the first node, before the second reported, is refused naming
// the missing subtask (it completed with one handle before, became the
// job's latest and failed the other subtask's restore). Once both
// reported it completes.
func TestPartialCompletionRefused(t *testing.T) {
	st := memstore.New()
	nodes := startNodesOn(t, st, 3, "secret")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := backend.TaskID{Job: "p", Operator: "op", Subtask: 0}
	t1 := backend.TaskID{Job: "p", Operator: "op", Subtask: 1}
	i0 := openOn(t, ctx, nodes[0], t0, backend.KeyGroupRangeForOperator(128, 2, 0))
	i1 := openOn(t, ctx, nodes[1], t1, backend.KeyGroupRangeForOperator(128, 2, 1))
	if _, err := nodes[0].Daemon().Snapshot(ctx, i0, 1, true); err != nil {
		t.Fatal(err)
	}
	_, err := nodes[0].Daemon().CompleteCheckpoint(ctx, "p", 1, nil)
	if err == nil || !strings.Contains(err.Error(), "task p/op/1 is open but has no handle") ||
		!strings.Contains(err.Error(), "key groups [64,127]") {
		t.Fatalf("completion with one of two subtasks' handles: %v", err)
	}
	if _, err := st.Stat(ctx, catalog.CheckpointManifest("p", 1)); !tiered.IsNotFound(err) {
		t.Fatalf("checkpoint 1 has a manifest (%v)", err)
	}
	if _, err := nodes[1].Daemon().Snapshot(ctx, i1, 1, true); err != nil {
		t.Fatal(err)
	}
	info, err := nodes[0].Daemon().CompleteCheckpoint(ctx, "p", 1, nil)
	if err != nil {
		t.Fatalf("completion once both reported: %v", err)
	}
	if info.Tasks != 2 {
		t.Fatalf("completed with %d tasks", info.Tasks)
	}
	// A node holding no task of the job completes the next one too, once
	// both reported.
	for _, x := range []struct {
		nd *host.Host
		in *daemon.Instance
	}{{nodes[0], i0}, {nodes[1], i1}} {
		if _, err := x.nd.Daemon().Snapshot(ctx, x.in, 2, true); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := nodes[2].Daemon().CompleteCheckpoint(ctx, "p", 2, nil); err != nil {
		t.Fatalf("completion through a node holding no task: %v", err)
	}
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }

// TestZombieSnapshotKeepsTheCheckpoint: a zombie (its task opened again
// on another node) snapshots a checkpoint and is refused; the checkpoint
// is not aborted for the whole job: the task's new holder and the job's
// other task report it, and a completion through the zombie's node
// completes it with their handles. The zombie's refused snapshot aborted
// the checkpoint before, and the others' work was lost.
func TestZombieSnapshotKeepsTheCheckpoint(t *testing.T) {
	nodes := startNodes(t, 3, "secret")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := backend.TaskID{Job: "k", Operator: "a"}, backend.TaskID{Job: "k", Operator: "b"}
	zombie := openOn(t, ctx, nodes[0], a, allGroups)
	other := openOn(t, ctx, nodes[2], b, allGroups)
	moved := openOn(t, ctx, nodes[1], a, allGroups)
	if _, err := nodes[0].Daemon().Snapshot(ctx, zombie, 1, true); !errors.Is(err, daemon.ErrFenced) {
		t.Fatalf("the zombie's snapshot: %v", err)
	}
	if _, err := nodes[2].Daemon().Snapshot(ctx, other, 1, true); err != nil {
		t.Fatalf("the other task's snapshot after the zombie's was refused: %v", err)
	}
	if _, err := nodes[1].Daemon().Snapshot(ctx, moved, 1, true); err != nil {
		t.Fatalf("the new holder's snapshot: %v", err)
	}
	info, err := nodes[0].Daemon().CompleteCheckpoint(ctx, "k", 1, nil)
	if err != nil {
		t.Fatalf("completion through the zombie's node: %v", err)
	}
	if info.Tasks != 2 {
		t.Fatalf("completed with %d tasks", info.Tasks)
	}
}
