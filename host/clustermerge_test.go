package host_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestMergedCompletionsAgainstAModel drives a 3-node cluster with random
// rounds of snapshots, takeovers and completions through random nodes, and
// checks every completed checkpoint against a model of who holds each
// task: a daemon holding a job's tasks hands their reports to the leader
// with its completion (one log entry, each report under its token), and
// that path must never complete a checkpoint missing a subtask's handle,
// nor one holding a handle of an instance whose task was taken over. Each
// instance labels its handles (operator state "who"), so the manifest says
// whose handle it holds. STATED_TEST_SEED replays a run.
func TestMergedCompletionsAgainstAModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("STATED_TEST_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("STATED_TEST_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (STATED_TEST_SEED replays it)", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	st := memstore.New()
	nodes := startNodesOn(t, st, 3, "secret")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const job, par = "m", 2
	type instance struct {
		nd    int
		in    *daemon.Instance
		label string
	}
	holder := map[int]*instance{}                   // the newest instance of each subtask
	open := map[int]map[int]*instance{0: {}, 1: {}} // subtask -> node -> instance (zombies too)
	opened := 0
	openOn := func(sub, nd int) {
		t.Helper()
		if z := open[sub][nd]; z != nil {
			// One instance of a task per node: the old one goes.
			if err := nodes[nd].Daemon().CloseInstance(z.in.ID, job); err != nil {
				t.Fatalf("close %s: %v", z.label, err)
			}
		}
		opened++
		o0 := time.Now()
		defer func() {
			if d := time.Since(o0); d > time.Second {
				t.Logf("open of subtask %d on node %d took %v", sub, nd, d)
			}
		}()
		task := backend.TaskID{Job: job, Operator: "op", Subtask: sub}
		in, err := nodes[nd].Daemon().Open(ctx, daemon.OpenParams{Task: task, KeyGroups: backend.KeyGroupRangeForOperator(128, par, sub),
			MaxParallelism: 128, Parallelism: par, Kind: backend.KindFile, States: valueState})
		if err != nil {
			t.Fatalf("open %s on node %d: %v", task, nd, err)
		}
		label := fmt.Sprintf("i%d@n%d", opened, nd)
		if err := in.OperatorSet("who", backend.OperatorUnion, [][]byte{[]byte(label)}); err != nil {
			t.Fatal(err)
		}
		ins := &instance{nd: nd, in: in, label: label}
		open[sub][nd], holder[sub] = ins, ins
	}
	// Both subtasks on one node most of the time: its completions take
	// its reports in their own entry.
	home := rng.IntN(3)
	for sub := range par {
		openOn(sub, home)
	}
	snapshot := func(ins *instance, id uint64) {
		// Errors are allowed (a zombie's snapshot or report is refused;
		// a task snapshots a checkpoint once per node).
		_, _ = nodes[ins.nd].Daemon().Snapshot(ctx, ins.in, id, rng.IntN(4) == 0)
	}
	takeover := func() {
		sub := rng.IntN(par)
		nd := rng.IntN(3)
		if rng.IntN(3) > 0 {
			nd = home // mostly back home: the merged path runs again
		}
		openOn(sub, nd)
	}
	// At least 40 rounds, and more (up to 160) until 10 checkpoints
	// completed: on a loaded machine more completions are refused, and a
	// run that completed few checked little.
	const minRounds, maxRounds, minCompleted = 40, 160, 10
	rounds := uint64(0)
	completed := 0
	for id := uint64(1); id <= maxRounds && (id <= minRounds || completed < minCompleted); id++ {
		rounds = id
		r0 := time.Now()
		if rng.IntN(5) == 0 {
			takeover()
		}
		// Every open instance may snapshot, the zombies too.
		for sub := range par {
			for _, ins := range open[sub] {
				if ins == holder[sub] && rng.IntN(8) > 0 || ins != holder[sub] && rng.IntN(3) == 0 {
					snapshot(ins, id)
				}
			}
		}
		if rng.IntN(5) == 0 {
			takeover() // between the snapshots and the completion
			if rng.IntN(2) == 0 {
				sub := rng.IntN(par)
				snapshot(holder[sub], id)
			}
		}
		// Complete through random nodes (the holders' node most often),
		// with the task list or without.
		var errs []error
		for range 1 + rng.IntN(2) {
			nd := holder[rng.IntN(par)].nd
			if rng.IntN(3) == 0 {
				nd = rng.IntN(3)
			}
			var tasks []backend.TaskID
			if rng.IntN(2) == 0 {
				for sub := range par {
					tasks = append(tasks, backend.TaskID{Job: job, Operator: "op", Subtask: sub})
				}
			}
			t0 := time.Now()
			_, err := nodes[nd].Daemon().CompleteCheckpoint(ctx, job, id, tasks)
			if d := time.Since(t0); d > time.Second {
				t.Logf("checkpoint %d: a completion through node %d took %v: %v", id, nd, d, err)
			}
			errs = append(errs, err)
		}
		if d := time.Since(r0); d > time.Second {
			t.Logf("checkpoint %d: the round took %v", id, d)
		}
		raw, err := tiered.ReadAll(ctx, st, catalog.CheckpointManifest(job, id), 1<<20)
		if tiered.IsNotFound(err) {
			for _, e := range errs {
				if e == nil {
					t.Fatalf("checkpoint %d: a completion succeeded but it has no manifest", id)
				}
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		m, err := catalog.DecodeManifest(raw)
		if err != nil {
			t.Fatal(err)
		}
		completed++
		seen := map[int]bool{}
		for _, h := range m.Tasks {
			sub := h.Task.Subtask
			seen[sub] = true
			who := ""
			for _, l := range h.OperatorState {
				if l.Name == "who" && len(l.Elements) == 1 {
					who = string(l.Elements[0])
				}
			}
			if who != holder[sub].label {
				t.Fatalf("checkpoint %d holds subtask %d's handle of %q, but %q holds the task (a fenced handle completed it); errors %v",
					id, sub, who, holder[sub].label, errs)
			}
		}
		for sub := range par {
			if !seen[sub] {
				t.Fatalf("checkpoint %d completed without a handle of subtask %d (partial); errors %v", id, sub, errs)
			}
		}
	}
	var merged uint64
	for _, nd := range nodes {
		merged += nd.Daemon().Metrics().ReportsMerged.Load()
	}
	t.Logf("%d of %d checkpoints completed, %d reports merged into completions", completed, rounds, merged)
	if completed < minCompleted {
		t.Fatalf("only %d of %d checkpoints completed: the run checked little", completed, rounds)
	}
	if merged == 0 {
		t.Fatal("no completion took its reports in its own entry: the merged path did not run")
	}
}
