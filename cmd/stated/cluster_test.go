package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/cluster"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/tiered/memstore"
)

// clusterStore is the checkpoint store every node of the test's
// cluster shares.
var clusterStore = memstore.New()

func clusterNode(t *testing.T, id, peers string, ln net.Listener) *host.Host {
	t.Helper()
	nd, err := host.Open(context.Background(), host.Options{DataDir: filepath.Join(t.TempDir(), "d"), NoSocket: true, Store: clusterStore,
		Logger: slog.New(slog.DiscardHandler), NodeID: id, RaftAddr: ln.Addr().String(), RaftPeers: peers, ClusterToken: "secret",
		TuneCluster: func(o *cluster.Options) {
			o.Listener = ln
			o.HeartbeatTimeout, o.ElectionTimeout = 150*time.Millisecond, 150*time.Millisecond
			o.LeaderLeaseTimeout, o.CommitTimeout = 100*time.Millisecond, 5*time.Millisecond
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nd.Close() })
	return nd
}

// TestClusterCommands: status shows the leader and every member healthy,
// join adds a node through a member, leave removes it, and a wrong token
// is refused with an error that says so.
func TestClusterCommands(t *testing.T) {
	var lns []net.Listener
	var peers []string
	for i := range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		peers = append(peers, fmt.Sprintf("n%d=%s", i, ln.Addr()))
	}
	var nodes []*host.Host
	for i := range 3 {
		nodes = append(nodes, clusterNode(t, fmt.Sprintf("n%d", i), strings.Join(peers, ","), lns[i]))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, nd := range nodes {
		if err := nd.Cluster().WaitLeader(ctx); err != nil {
			t.Fatal(err)
		}
	}
	addr := lns[1].Addr().String()
	out, err := runCLI(t, newClusterCmd(), "status", "--raft-addr", addr, "--cluster-token", "secret")
	if err != nil || !strings.Contains(out, "leader n") || strings.Count(out, "  ok  ") != 3 {
		t.Fatalf("status: %v\n%s", err, out)
	}
	if _, err := runCLI(t, newClusterCmd(), "status", "--raft-addr", addr, "--cluster-token", "wrong"); err == nil ||
		!strings.Contains(err.Error(), "refused") {
		t.Fatalf("status with a wrong token: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	clusterNode(t, "n3", "", ln)
	if out, err := runCLI(t, newClusterCmd(), "join", "--raft-addr", addr, "--cluster-token", "secret",
		"--new-node-id", "n3", "--new-raft-addr", ln.Addr().String()); err != nil {
		t.Fatalf("join: %v\n%s", err, out)
	}
	// The new member learns the configuration, with itself in it, from
	// the leader's next append: ask until it has.
	out, err = pollStatus(t, ln.Addr().String(), func(out string, err error) bool {
		return err == nil && strings.Contains(out, "n3") && strings.Count(out, "  ok  ") == 4
	})
	if err != nil {
		t.Fatalf("status after join: %v\n%s", err, out)
	}
	if out, err := runCLI(t, newClusterCmd(), "leave", "--raft-addr", addr, "--cluster-token", "secret", "--leaving-node-id", "n3"); err != nil {
		t.Fatalf("leave: %v\n%s", err, out)
	}
	if out, err = pollStatus(t, addr, func(out string, err error) bool { return err == nil && !strings.Contains(out, "n3 ") }); err != nil {
		t.Fatalf("status after leave: %v\n%s", err, out)
	}
}

// pollStatus runs "stated cluster status" through addr until done says the
// answer is the one awaited, for at most 10 s; it returns the last answer,
// and an error when it never came.
func pollStatus(t *testing.T, addr string, done func(string, error) bool) (string, error) {
	t.Helper()
	var out string
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if out, err = runCLI(t, newClusterCmd(), "status", "--raft-addr", addr, "--cluster-token", "secret"); done(out, err) {
			return out, nil
		}
	}
	if err == nil {
		err = fmt.Errorf("status never became what the test awaits")
	}
	return out, err
}

// TestClusterStatusReadable: with a member down, status prints a short
// HEALTH word for it (the reason on a line of its own after the table,
// without gRPC's wrapping), and a status without a token is told to give
// one, not that its token is wrong.
func TestClusterStatusReadable(t *testing.T) {
	var lns []net.Listener
	var peers []string
	for i := range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		peers = append(peers, fmt.Sprintf("n%d=%s", i, ln.Addr()))
	}
	var nodes []*host.Host
	for i := range 3 {
		nodes = append(nodes, clusterNode(t, fmt.Sprintf("n%d", i), strings.Join(peers, ","), lns[i]))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, nd := range nodes {
		if err := nd.Cluster().WaitLeader(ctx); err != nil {
			t.Fatal(err)
		}
	}
	addr := lns[0].Addr().String()
	_, err := runCLI(t, newClusterCmd(), "status", "--raft-addr", addr)
	if err == nil || !strings.Contains(err.Error(), "needs the cluster's --cluster-token") || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("status without a token: %v", err)
	}
	_, err = runCLI(t, newClusterCmd(), "status", "--raft-addr", addr, "--cluster-token", "wrong")
	if err == nil || !strings.Contains(err.Error(), "wrong --cluster-token") || strings.Contains(err.Error(), "rpc error") {
		t.Fatalf("status with a wrong token: %v", err)
	}
	_ = nodes[2].Close()
	out, err := pollStatus(t, addr, func(out string, err error) bool { return strings.Contains(out, "DOWN") })
	if err != nil {
		t.Fatalf("status with n2 down: %v\n%s", err, out)
	}
	t.Logf("status:\n%s", out)
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "n2 ") && (len(line) > 80 || !strings.Contains(line, "DOWN") || strings.Contains(line, "rpc error")) {
			t.Fatalf("n2's row is not short:\n%s", out)
		}
	}
	if !strings.Contains(out, "\nn2: ") || strings.Contains(out, "rpc error") {
		t.Fatalf("status does not give n2's reason after the table, unwrapped:\n%s", out)
	}
}
