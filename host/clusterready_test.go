package host_test

import (
	"context"
	"net"
	"path/filepath"
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

// openRefused opens a task on nd until the open is refused with code
// (within 20 s; each attempt has 10 s) and returns the refusal.
func openRefused(t *testing.T, nd *host.Host, code codes.Code) error {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for sub := 0; ; sub++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		in, err := nd.Daemon().Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: "ready", Operator: "op", Subtask: sub},
			KeyGroups: allGroups, Kind: backend.KindFile, States: valueState})
		cancel()
		if err != nil && status.Code(err) == code {
			return err
		}
		if time.Now().After(deadline) {
			t.Fatalf("open on %s: %v (code %s), want %s", nd.Cluster().ID(), err, status.Code(err), code)
		}
		if in != nil {
			_ = nd.Daemon().CloseInstance(in.ID, "ready")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestUnjoinedNodeRefusesTasks: a node started without --raft-peers that
// no member added refuses an open at once, saying it has not joined and
// how to join it (it blocked until the caller gave up before).
func TestUnjoinedNodeRefusesTasks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nd, err := host.Open(context.Background(), host.Options{DataDir: filepath.Join(t.TempDir(), "d"), Logger: clusterLog(9), Store: memstore.New(),
		NodeID: "lone", RaftAddr: ln.Addr().String(), ClusterToken: "secret", TuneCluster: fastRaft(ln)})
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = nd.Daemon().Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: "ready", Operator: "op"},
		KeyGroups: allGroups, Kind: backend.KindFile, States: valueState})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "has not joined a cluster") ||
		!strings.Contains(err.Error(), "stated cluster join") {
		t.Fatalf("open on a node that never joined: %v (code %s)", err, status.Code(err))
	}
	if ctx.Err() != nil {
		t.Fatal("the refusal came only when the caller's deadline passed")
	}
	// The catalog is refused as well, not waited for.
	if _, err := nd.Daemon().ListCheckpoints(ctx, "ready"); status.Code(err) != codes.Unavailable ||
		!strings.Contains(err.Error(), "has not joined") {
		t.Fatalf("ListCheckpoints on a node that never joined: %v", err)
	}
}

// TestRemovedNodeRefusesTasks: a node removed with `cluster leave`
// refuses opens, saying it was removed and what to do, and closes
// promptly; the others go on.
func TestRemovedNodeRefusesTasks(t *testing.T) {
	nodes := startNodes(t, 3, "secret")
	gone := (leaderOf(t, nodes) + 1) % 3
	other := (gone + 1) % 3
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// An instance open on it when it is removed: its close releases the
	// token through the cluster, which must not wait for a leader.
	held := openOn(t, ctx, nodes[gone], backend.TaskID{Job: "held", Operator: "op"}, allGroups)
	// And a checkpoint in flight, which its shutdown aborts through the
	// catalog.
	if _, err := nodes[gone].Daemon().Snapshot(ctx, held, 1, true); err != nil {
		t.Fatal(err)
	}
	if err := nodes[other].Cluster().Leave(ctx, nodes[gone].Cluster().ID()); err != nil {
		t.Fatal(err)
	}
	err := openRefused(t, nodes[gone], codes.FailedPrecondition)
	if !strings.Contains(err.Error(), "was removed from the cluster") || !strings.Contains(err.Error(), "stated cluster join") {
		t.Fatalf("open on a removed node: %v", err)
	}
	done := make(chan error, 1)
	t0 := time.Now()
	go func() { done <- nodes[gone].Close() }()
	select {
	case <-done:
		t.Logf("the removed node closed in %s", time.Since(t0))
	case <-time.After(8 * time.Second):
		t.Fatal("the removed node's Close took more than 8 s")
	}
	openOn(t, ctx, nodes[other], backend.TaskID{Job: "ready", Operator: "op"}, allGroups)
}

// TestNodeWithoutQuorumRefusesTasks: a node whose peers are gone refuses
// opens once an election would have ended, saying it knows no leader and
// how many members answer, instead of waiting until the caller's
// deadline.
func TestNodeWithoutQuorumRefusesTasks(t *testing.T) {
	nodes := startNodes(t, 3, "secret")
	_ = nodes[1].Close()
	_ = nodes[2].Close()
	err := openRefused(t, nodes[0], codes.Unavailable)
	if !strings.Contains(err.Error(), "has known no leader") || !strings.Contains(err.Error(), "0 of the other 2 members answer") {
		t.Fatalf("open without a quorum: %v", err)
	}
}
