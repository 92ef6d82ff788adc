package host_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/cluster"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/tiered/memstore"
)

// fastRaft shortens the raft timeouts of a test cluster.
func fastRaft(ln net.Listener) func(*cluster.Options) {
	return func(o *cluster.Options) {
		o.Listener = ln
		o.HeartbeatTimeout, o.ElectionTimeout = 150*time.Millisecond, 150*time.Millisecond
		o.LeaderLeaseTimeout, o.CommitTimeout = 100*time.Millisecond, 5*time.Millisecond
	}
}

// startNodes starts n nodes in cluster mode on 127.0.0.1, each with its
// own data dir and socket.
func startNodes(t *testing.T, n int, token string) []*host.Host {
	t.Helper()
	return startNodesOn(t, memstore.New(), n, token)
}

// startNodesOn is startNodes with the checkpoint store all nodes share.
func startNodesOn(t *testing.T, store *memstore.Store, n int, token string) []*host.Host {
	t.Helper()
	return startNodesWith(t, store, n, token, nil)
}

// startNodesWith is startNodesOn with each node's options tuned by tune
// (nil: as they are).
func startNodesWith(t *testing.T, store *memstore.Store, n int, token string, tune func(int, *host.Options)) []*host.Host {
	t.Helper()
	lns := make([]net.Listener, n)
	var peers []string
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
		peers = append(peers, fmt.Sprintf("n%d=%s", i, ln.Addr()))
	}
	nodes := make([]*host.Host, n)
	for i := range n {
		o := host.Options{DataDir: filepath.Join(t.TempDir(), "d"), Logger: clusterLog(i), Store: store,
			NodeID: fmt.Sprintf("n%d", i), RaftAddr: lns[i].Addr().String(), RaftPeers: strings.Join(peers, ","),
			ClusterToken: token, TuneCluster: fastRaft(lns[i])}
		if tune != nil {
			tune(i, &o)
		}
		nd, err := host.Open(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = nd
		t.Cleanup(func() { _ = nd.Close() })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, nd := range nodes {
		if err := nd.Cluster().WaitLeader(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return nodes
}

// TestZombieFenced: a task reopened on another node fences the instance
// on the first: its snapshot's handle report and its completion are
// refused with FailedPrecondition naming the newer token, while the new
// holder checkpoints normally.
func TestZombieFenced(t *testing.T) {
	nodes := startNodes(t, 3, "secret")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	task := backend.TaskID{Job: "j", Operator: "op"}
	spec := client.OpenSpec{Task: task, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, Backend: backend.KindFile, States: valueState}
	dial := func(nd *host.Host) *client.Client {
		c, err := client.Dial(nd.Socket(), client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	ca, cb := dial(nodes[0]), dial(nodes[1])
	old, err := ca.Open(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	old.Put("v", []byte("k"), nil, []byte("old"))
	if _, err := old.Snapshot(ctx, 1, true); err != nil {
		t.Fatalf("snapshot before the task moved: %v", err)
	}
	if _, err := ca.CompleteCheckpoint(ctx, "j", 1); err != nil {
		t.Fatalf("complete before the task moved: %v", err)
	}
	// The task reopens on node 1, as after a presumed failure of node 0.
	moved, err := cb.Open(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	moved.Put("v", []byte("k"), nil, []byte("new"))
	if _, err := moved.Snapshot(ctx, 2, true); err != nil {
		t.Fatalf("the new holder's snapshot: %v", err)
	}
	if _, err := cb.CompleteCheckpoint(ctx, "j", 2); err != nil {
		t.Fatalf("the new holder's completion: %v", err)
	}
	// The zombie's snapshot of the next checkpoint (the one it missed is
	// completed already, which the one catalog knows).
	_, err = old.Snapshot(ctx, 3, true)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "fencing token") ||
		!strings.Contains(err.Error(), "node n1 holds token") {
		t.Fatalf("the zombie's snapshot: %v", err)
	}
	if _, err := ca.CompleteCheckpoint(ctx, "j", 3); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "fenc") {
		t.Fatalf("the zombie's node completing a checkpoint its instance was fenced from: %v", err)
	}
	if got := metric(t, nodes[1], "stated_raft_members"); got != 3 {
		t.Fatalf("stated_raft_members %v", got)
	}
	leaders := 0.0
	for _, nd := range nodes {
		leaders += metric(t, nd, "stated_raft_leader")
	}
	if leaders != 1 {
		t.Fatalf("%v nodes report they lead", leaders)
	}
}

// TestClusterOptionsRefused: cluster settings that cannot work are refused
// before anything is created, each naming its fields.
func TestClusterOptionsRefused(t *testing.T) {
	for _, c := range []struct {
		o    host.Options
		want string
	}{
		{host.Options{NodeID: "a"}, "without RaftAddr"},
		{host.Options{RaftAddr: "127.0.0.1:0", ClusterToken: "t"}, "RaftAddr needs NodeID"},
		{host.Options{RaftAddr: "127.0.0.1:0", NodeID: "a"}, "cluster mode needs ClusterToken or ClusterTLSCert"},
		{host.Options{RaftAddr: "127.0.0.1:0", NodeID: "a", ClusterToken: "t", RaftPeers: "b=h:1"}, `does not list this node's NodeID "a"`},
		{host.Options{RaftAddr: "127.0.0.1:0", NodeID: "a", ClusterToken: "t", RaftPeers: "a"}, "want id=host:port"},
		{host.Options{RaftAddr: "127.0.0.1:0", NodeID: "a", ClusterTLSCert: "c", Store: memstore.New()}, "go together"},
		{host.Options{RaftAddr: "127.0.0.1:0", NodeID: "a", ClusterToken: "t"}, "cluster mode needs CheckpointStore naming storage every node reaches"},
		{host.Options{RaftAddr: "127.0.0.1:0", NodeID: "a", ClusterToken: "t", Store: memstore.New(), ChangelogStore: "file:///tmp/log"}, "ChangelogStore is not available in cluster mode"},
	} {
		c.o.DataDir, c.o.Logger, c.o.NoSocket = filepath.Join(t.TempDir(), "d"), quiet(), true
		n, err := host.Open(context.Background(), c.o)
		if err == nil {
			n.Close()
			t.Errorf("%+v: opened", c.o)
			continue
		}
		var oe *host.OptionError
		if !errors.As(err, &oe) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v, want an option error naming %q", err, c.want)
		}
	}
}

// clusterLog is node i's logger: quiet unless STATED_TEST_CLUSTER_LOG is
// set (then everything, at debug level, on stderr).
func clusterLog(i int) *slog.Logger {
	if os.Getenv("STATED_TEST_CLUSTER_LOG") == "" {
		return quiet()
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", i)
}
