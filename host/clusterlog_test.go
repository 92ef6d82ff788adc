package host_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/dstl"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestClusterChangelogThroughLeaderDeaths is the job of
// TestClusterCheckpointsThroughLeaderDeaths in changelog mode, on 3 nodes
// materializing every 300 ms: no completed checkpoint is lost through the
// leader's death, no log segment or file a retained checkpoint references
// is deleted, and the dead node's tasks restore on the others from log
// segments another node wrote.
func TestClusterChangelogThroughLeaderDeaths(t *testing.T) {
	store, _, j := clusterJobThroughLeaderDeaths(t, 3, 40, func(_ int, o *host.Options) {
		o.Changelog, o.MaterializeInterval = true, 300*time.Millisecond
	})
	for i, in := range j.inst {
		if !in.Changelog() {
			t.Fatalf("%s on n%d is not in changelog mode", j.tasks[i], j.where[i])
		}
	}
	var runs []string
	for _, seg := range segments(t, store) {
		run, _, _ := dstl.ParseSegmentName(dstl.DefaultPrefix, seg)
		if !slices.Contains(runs, run) {
			runs = append(runs, run)
		}
	}
	if len(runs) < 2 {
		t.Fatalf("segments of %d runs in the store, want the logs of several nodes", len(runs))
	}
}

// segments lists the changelog's segments in store.
func segments(t *testing.T, store tiered.Store) []string {
	t.Helper()
	var out []string
	err := tiered.Walk(context.Background(), store, dstl.DefaultPrefix+"/", func(o tiered.ObjectInfo) error {
		out = append(out, o.Name)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestClusterChangelogSegmentsHeld: the leader's catalog keeps the log
// segments another node's live changelog holds, and deletes them once that
// node lets go of them or leaves the cluster. The sweep runs every 50 ms
// with a grace of 300 ms, so anything the leader thinks unheld goes at once.
func TestClusterChangelogSegmentsHeld(t *testing.T) {
	store := memstore.New()
	nodes := startNodesWith(t, store, 3, "secret", func(_ int, o *host.Options) {
		o.Changelog, o.GCGrace, o.SweepInterval, o.CheckpointTimeout = true, 300*time.Millisecond, 50*time.Millisecond, 250*time.Millisecond
	})
	leader := -1
	for i, nd := range nodes {
		if nd.Cluster().IsLeader() {
			leader = i
		}
	}
	f := (leader + 1) % len(nodes) // a follower writes the log
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := nodes[f].Daemon()
	kgs := backend.KeyGroupRange{Start: 0, End: 127}

	// writeAborted opens subtask on the follower and completes checkpoint
	// id there (whose base the first snapshot materializes), writes again
	// and has checkpoint id+1 snapshotted (its log segments durable) and
	// aborted: only the follower's live log holds those segments.
	writeAborted := func(subtask int, id uint64) (*daemon.Instance, []string) {
		task := backend.TaskID{Job: "job", Operator: "op", Subtask: subtask}
		in, err := d.Open(ctx, daemon.OpenParams{Task: task, KeyGroups: kgs, Kind: backend.KindFile, States: valueState})
		if err != nil {
			t.Fatal(err)
		}
		if !in.Changelog() {
			t.Fatal("the instance is not in changelog mode")
		}
		put := func(round int) {
			for k := range 50 {
				if err := in.Backend.Put("v", backend.Key{KeyGroup: k % 128, Key: []byte(fmt.Sprint(k))}, []byte(fmt.Sprint(round))); err != nil {
					t.Fatal(err)
				}
			}
		}
		put(1)
		if _, err := d.Snapshot(ctx, in, id, true); err != nil {
			t.Fatal(err)
		}
		if _, err := d.CompleteCheckpoint(ctx, "job", id, []backend.TaskID{task}); err != nil {
			t.Fatal(err)
		}
		before := segments(t, store)
		put(2)
		if _, err := d.Snapshot(ctx, in, id+1, true); err != nil {
			t.Fatal(err)
		}
		var held []string
		for _, s := range segments(t, store) {
			if !slices.Contains(before, s) {
				held = append(held, s)
			}
		}
		if len(held) == 0 {
			t.Fatalf("no new log segment after checkpoint %d in changelog mode", id+1)
		}
		if err := d.AbortCheckpoint(ctx, "job", id+1, "test"); err != nil {
			t.Fatal(err)
		}
		return in, held
	}
	gone := func(held []string) func([]string) bool {
		return func(s []string) bool {
			for _, h := range held {
				if slices.Contains(s, h) {
					return false
				}
			}
			return true
		}
	}

	// What the follower's log still holds must be there: a segment its
	// log let go of since (the truncation after the materialized
	// checkpoint completed, reported a moment later) may go.
	w := nodes[f].ChangelogWriter()
	stillHeld := func(held []string) []string {
		var out []string
		for _, h := range held {
			if w.Holds(h) {
				out = append(out, h)
			}
		}
		return out
	}
	in, held := writeAborted(0, 1)
	time.Sleep(time.Second) // past the grace, 20 sweeps
	if got, want := segments(t, store), stillHeld(held); len(want) == 0 || !containsAll(got, want) {
		t.Fatalf("the leader deleted segments the follower's log holds: held %v, now %v", want, got)
	}

	// The follower lets go: closing the instance releases its log, the
	// follower reports it, and the leader deletes what no checkpoint uses.
	if err := d.CloseInstance(in.ID, "job"); err != nil {
		t.Fatal(err)
	}
	waitSegments(t, store, gone(held), "the released segments deleted")

	// A node that dies (its raft member stops abruptly, its daemon can no
	// longer report) keeps its segments while it is a member, as it may
	// come back; once it leaves the cluster it holds nothing any more.
	_, held = writeAborted(1, 3)
	if err := nodes[f].Cluster().Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if got, want := segments(t, store), stillHeld(held); len(want) == 0 || !containsAll(got, want) {
		t.Fatalf("segments of a member's run deleted while it is down (it may come back): held %v, now %v", want, got)
	}
	if err := nodes[leader].Cluster().Leave(ctx, fmt.Sprintf("n%d", f)); err != nil {
		t.Fatal(err)
	}
	waitSegments(t, store, gone(held), "the segments of the node that left deleted")
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

func waitSegments(t *testing.T, store tiered.Store, ok func([]string) bool, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := segments(t, store)
		if ok(s) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: segments %s", what, strings.Join(s, " "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
