package e2e

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
)

// freeAddrs returns n loopback addresses free a moment ago.
func freeAddrs(t *testing.T, n int) []string {
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ln.Addr().String())
		ln.Close()
	}
	return out
}

var leaderRE = regexp.MustCompile(`leader (n\d) `)

// clusterStatus runs "stated cluster status" against addr.
func clusterStatus(addr, token string) (string, error) {
	out, err := exec.Command(binary, "cluster", "status", "--raft-addr", addr, "--cluster-token", token, "--timeout", "3s").CombinedOutput()
	return string(out), err
}

// waitStatus polls status through addr until ok says the output is what
// the test waits for.
func waitStatus(t *testing.T, addr, token string, ok func(string, error) bool) string {
	t.Helper()
	var out string
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if out, err = clusterStatus(addr, token); ok(out, err) {
			return out
		}
	}
	t.Fatalf("cluster status through %s never became what the test waits for; last: %v\n%s", addr, err, out)
	return ""
}

// TestClusterEndToEnd: three "stated serve" processes form a cluster; a
// task reopened on another process fences the first instance; kill -9 of
// the leader elects another, and the killed node rejoins on restart.
func TestClusterEndToEnd(t *testing.T) {
	const token = "e2e-cluster-token"
	raft := freeAddrs(t, 3)
	var peers []string
	for i, a := range raft {
		peers = append(peers, fmt.Sprintf("n%d=%s", i, a))
	}
	dirs := make([]string, 3)
	args := func(i int) []string {
		return []string{"--node-id", fmt.Sprintf("n%d", i), "--raft-addr", raft[i], "--raft-peers", strings.Join(peers, ","),
			"--cluster-token", token}
	}
	procs := make([]*proc, 3)
	for i := range 3 {
		dirs[i] = filepath.Join(t.TempDir(), fmt.Sprintf("n%d", i))
		procs[i] = start(t, dirs[i], args(i)...)
	}
	out := waitStatus(t, raft[0], token, func(_ string, err error) bool { return err == nil })
	m := leaderRE.FindStringSubmatch(out)
	if m == nil || strings.Count(out, "  ok  ") != 3 {
		t.Fatalf("status:\n%s", out)
	}

	// Fencing across processes.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := client.OpenSpec{Task: backend.TaskID{Job: "j", Operator: "op"}, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127},
		Backend: backend.KindFile, States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}}
	c0, c1 := procs[0].dial(client.Options{}), procs[1].dial(client.Options{})
	old, err := c0.Open(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c1.Open(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Snapshot(ctx, 1, true); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "fenc") {
		t.Fatalf("snapshot of the instance whose task moved: %v", err)
	}

	// kill -9 the leader: another is elected, the dead one is unreachable.
	dead := int(m[1][1] - '0')
	t0 := time.Now()
	procs[dead].kill()
	via := raft[(dead+1)%3]
	out = waitStatus(t, via, token, func(out string, _ error) bool {
		l := leaderRE.FindStringSubmatch(out)
		return l != nil && l[1] != m[1] && strings.Contains(out, "UNREACHABLE")
	})
	t.Logf("leader %s killed; status after %v:\n%s", m[1], time.Since(t0).Round(time.Millisecond), out)
	if err := exec.Command(binary, "cluster", "status", "--raft-addr", via, "--cluster-token", token).Run(); err == nil {
		t.Fatal("status exits 0 with a member unreachable")
	}

	// The killed node restarts from its raft dir and is healthy again.
	procs[dead] = start(t, dirs[dead], args(dead)...)
	waitStatus(t, via, token, func(out string, err error) bool { return err == nil && strings.Count(out, "  ok  ") == 3 })
}
