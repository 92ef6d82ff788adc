package host_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/tiered/memstore"
)

// checkpointFlags runs the same job on d: four checkpoints, then the
// task reopened from checkpoint 3 in no-claim mode (which pins it), and
// returns its listed history as "id status retained pinned" lines.
func checkpointFlags(t *testing.T, ctx context.Context, d *daemon.Daemon, list ...*daemon.Daemon) [][]string {
	t.Helper()
	task := backend.TaskID{Job: "h", Operator: "op"}
	in, err := d.Open(ctx, daemon.OpenParams{Task: task, KeyGroups: allGroups, Kind: backend.KindFile, States: valueState})
	if err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 4; id++ {
		if _, err := d.Snapshot(ctx, in, id, true); err != nil {
			t.Fatal(err)
		}
		if _, err := d.CompleteCheckpoint(ctx, "h", id, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.CloseInstance(in.ID, "h"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Open(ctx, daemon.OpenParams{Task: task, KeyGroups: allGroups, Kind: backend.KindFile, States: valueState,
		Restore: &daemon.RestoreSpec{CheckpointID: 3, NoClaim: true}}); err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, ld := range list {
		infos, err := ld.ListCheckpoints(ctx, "h")
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, in := range infos {
			lines = append(lines, fmt.Sprintf("%d %s retained=%v pinned=%v", in.ID, in.Status, in.Retained, in.Pinned))
		}
		out = append(out, lines)
	}
	return out
}

// TestClusterListsRetainedAndPinned: ListCheckpoints through the leader
// and through a follower shows the same retained and pinned flags as a
// daemon alone running the same job. The catalog's records crossed the
// node-to-node service without them (every checkpoint "not retained",
// none pinned).
func TestClusterListsRetainedAndPinned(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alone, err := host.Open(ctx, host.Options{DataDir: filepath.Join(t.TempDir(), "d"), NoSocket: true, Logger: quiet(), Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	defer alone.Close()
	want := checkpointFlags(t, ctx, alone.Daemon(), alone.Daemon())[0]
	if !slices.ContainsFunc(want, func(l string) bool { return strings.Contains(l, "pinned=true") }) ||
		!slices.ContainsFunc(want, func(l string) bool { return strings.Contains(l, "retained=true pinned=false") }) {
		t.Fatalf("the daemon alone lists %q: the test needs retained and pinned checkpoints", want)
	}
	nodes := startNodes(t, 3, "secret")
	leader, follower := leaderOf(t, nodes), -1
	for i := range nodes {
		if i != leader && i != 0 {
			follower = i
		}
	}
	got := checkpointFlags(t, ctx, nodes[0].Daemon(), nodes[leader].Daemon(), nodes[follower].Daemon())
	for i, g := range got {
		if !slices.Equal(g, want) {
			t.Fatalf("through node %d of the cluster:\n%s\na daemon alone:\n%s", i, strings.Join(g, "\n"), strings.Join(want, "\n"))
		}
	}
}

// leaderOf is the index of the node that leads.
func leaderOf(t *testing.T, nodes []*host.Host) int {
	t.Helper()
	for i, nd := range nodes {
		if nd.Cluster().IsLeader() {
			return i
		}
	}
	t.Fatal("no leader")
	return -1
}

// TestLookupsWithoutACatalogAreErrors: with its peers gone, a node's
// ListCheckpoints and PlanRescale answer UNAVAILABLE naming the reason,
// not an empty list or NOT_FOUND.
func TestLookupsWithoutACatalogAreErrors(t *testing.T) {
	nodes := startNodes(t, 3, "secret")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in := openOn(t, ctx, nodes[0], backend.TaskID{Job: "u", Operator: "op"}, allGroups)
	if _, err := nodes[0].Daemon().Snapshot(ctx, in, 1, true); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[0].Daemon().CompleteCheckpoint(ctx, "u", 1, nil); err != nil {
		t.Fatal(err)
	}
	_ = nodes[1].Close()
	_ = nodes[2].Close()
	// A leader that lost its quorum steps down within its lease.
	for nodes[0].Cluster().IsLeader() {
		if ctx.Err() != nil {
			t.Fatal("node 0 still leads without a quorum")
		}
		time.Sleep(20 * time.Millisecond)
	}
	d := nodes[0].Daemon()
	check := func(what string, err error) {
		t.Helper()
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "unreachable") {
			t.Fatalf("%s without a catalog: %v (code %s)", what, err, status.Code(err))
		}
	}
	short, cancel2 := context.WithTimeout(ctx, 2*time.Second)
	defer cancel2()
	list, err := d.ListCheckpoints(short, "u")
	if err == nil {
		t.Fatalf("ListCheckpoints without a catalog answered %d checkpoints", len(list))
	}
	check("ListCheckpoints", err)
	short, cancel3 := context.WithTimeout(ctx, 2*time.Second)
	defer cancel3()
	_, _, err = d.PlanRescale(short, "u", "op", 0, "", 2)
	if errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("PlanRescale without a catalog: NotFound: %v", err)
	}
	check("PlanRescale", err)
}
