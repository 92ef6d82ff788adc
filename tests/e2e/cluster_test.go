package e2e

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
)

// freeAddrs returns n loopback addresses free a moment ago, on ports
// below the kernel's ephemeral range: the processes bind them only after
// others started, and a port the kernel hands out for a ":0" bind (the
// metrics listeners) or an outgoing connection meanwhile would make one
// refuse to start ("address already in use", seen in CI).
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	lo := 32768 // Linux's default start of net.ipv4.ip_local_port_range
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 11000 {
				lo = v
			}
		}
	}
	var out []string
	seen := map[int]bool{}
	for tries := 0; len(out) < n; tries++ {
		if tries > 1000 {
			t.Fatalf("no %d free loopback ports below %d", n, lo)
		}
		port := 10000 + rand.IntN(lo-10000)
		if seen[port] {
			continue
		}
		seen[port] = true
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		out = append(out, ln.Addr().String())
		ln.Close()
	}
	return out
}

var leaderRE = regexp.MustCompile(`leader (n\d) `)

// downRE finds a member whose HEALTH column says DOWN in "cluster status".
var downRE = regexp.MustCompile(`(?m)^n\d\s+\S+\s+\S+\s+DOWN\s`)

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
	shared := "file://" + filepath.Join(t.TempDir(), "shared")
	args := func(i int) []string {
		return []string{"--node-id", fmt.Sprintf("n%d", i), "--raft-addr", raft[i], "--raft-peers", strings.Join(peers, ","),
			"--cluster-token", token, "--checkpoint-store", shared}
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
		// A killed process refuses connections: its HEALTH is DOWN.
		return l != nil && l[1] != m[1] && downRE.MatchString(out)
	})
	t.Logf("leader %s killed; status after %v:\n%s", m[1], time.Since(t0).Round(time.Millisecond), out)
	if err := exec.Command(binary, "cluster", "status", "--raft-addr", via, "--cluster-token", token).Run(); err == nil {
		t.Fatal("status exits 0 with a member unreachable")
	}

	// The killed node restarts from its raft dir and is healthy again.
	procs[dead] = start(t, dirs[dead], args(dead)...)
	waitStatus(t, via, token, func(out string, err error) bool { return err == nil && strings.Count(out, "  ok  ") == 3 })
}

// TestClusterKillLeaderRestoresLatest: three "stated serve" processes on
// one shared checkpoint store, a job of 6 subtasks spread over them and a
// client on each; checkpoints stream while kill -9 takes the leader in
// the middle of a completion. The completion succeeds through the others
// (on retry if need be), the dead node's tasks reopen on the others with
// "restore latest", and every task's state equals the model. In changelog
// mode too (materializing every second), where the reopened tasks replay
// log segments the dead node wrote.
func TestClusterKillLeaderRestoresLatest(t *testing.T) {
	t.Run("plain", func(t *testing.T) { testClusterKillLeader(t) })
	t.Run("changelog", func(t *testing.T) { testClusterKillLeader(t, "--changelog", "--materialize-interval", "1s") })
}

func testClusterKillLeader(t *testing.T, extra ...string) {
	const token, job, subtasks, rounds, killAt = "e2e-cluster-token", "stream", 6, 24, 12
	raft := freeAddrs(t, 3)
	var peers []string
	for i, a := range raft {
		peers = append(peers, fmt.Sprintf("n%d=%s", i, a))
	}
	shared := "file://" + filepath.Join(t.TempDir(), "shared")
	procs := make([]*proc, 3)
	clients := make([]*client.Client, 3)
	for i := range 3 {
		args := append([]string{"--node-id", fmt.Sprintf("n%d", i), "--raft-addr", raft[i],
			"--raft-peers", strings.Join(peers, ","), "--cluster-token", token, "--checkpoint-store", shared}, extra...)
		procs[i] = start(t, filepath.Join(t.TempDir(), fmt.Sprintf("n%d", i)), args...)
		clients[i] = procs[i].dial(client.Options{})
	}
	out := waitStatus(t, raft[0], token, func(_ string, err error) bool { return err == nil })
	leader := int(leaderRE.FindStringSubmatch(out)[1][1] - '0')

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	states := []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}
	spec := func(i int, restore *client.Restore) client.OpenSpec {
		return client.OpenSpec{Task: backend.TaskID{Job: job, Operator: "op", Subtask: i}, KeyGroups: backend.KeyGroupRangeForOperator(128, subtasks, i),
			MaxParallelism: 128, Parallelism: subtasks, Backend: backend.KindFile, States: states, Restore: restore}
	}
	where := make([]int, subtasks)
	ins := make([]*client.Instance, subtasks)
	model := make([]map[string]string, subtasks)
	var tasks []backend.TaskID
	for i := range subtasks {
		where[i] = i % 3
		in, err := clients[where[i]].Open(ctx, spec(i, nil))
		if err != nil {
			t.Fatal(err)
		}
		if in.Changelog() != slices.Contains(extra, "--changelog") {
			t.Fatalf("subtask %d: changelog mode %v with flags %v", i, in.Changelog(), extra)
		}
		ins[i], model[i] = in, map[string]string{}
		tasks = append(tasks, spec(i, nil).Task)
	}
	dead := -1
	var atDone []map[string]string
	for id := uint64(1); id <= rounds; id++ {
		for i, in := range ins {
			k, v := taskKey(in, spec(i, nil).KeyGroups, int(id%8)), fmt.Sprintf("v%d.%d", id, i)
			if _, err := in.Put("v", []byte(k), nil, []byte(v)).Wait(ctx); err != nil {
				t.Fatal(err)
			}
			model[i][k] = v
			if err := in.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := in.Snapshot(ctx, id, true); err != nil {
				t.Fatalf("snapshot %d of subtask %d on n%d: %v", id, i, where[i], err)
			}
		}
		if id == killAt {
			procs[leader].kill() // mid-stream: every handle is reported, none completed
			dead = leader
		}
		for n := range 3 {
			if n == dead || !slices.Contains(where, n) {
				continue
			}
			var err error
			for attempt := 0; attempt < 100; attempt++ {
				if _, err = clients[n].CompleteCheckpoint(ctx, job, id, tasks...); err == nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("completion %d through n%d never succeeded: %v", id, n, err)
			}
		}
		atDone = make([]map[string]string, subtasks)
		for i := range model {
			atDone[i] = maps.Clone(model[i])
		}
		if id != killAt {
			continue
		}
		// The dead node's tasks reopen on the others from the latest
		// checkpoint: the one completed without their node.
		for i := range ins {
			if where[i] != dead {
				continue
			}
			where[i] = (dead + 1 + i%2) % 3
			in, err := clients[where[i]].Open(ctx, spec(i, &client.Restore{Latest: true}))
			if err != nil {
				t.Fatalf("reopen subtask %d on n%d: %v", i, where[i], err)
			}
			if in.RestoredCheckpoint() != id {
				t.Fatalf("subtask %d restored checkpoint %d, want %d", i, in.RestoredCheckpoint(), id)
			}
			ins[i] = in
		}
		t.Logf("leader n%d killed at checkpoint %d; its tasks reopened on the others", dead, id)
	}
	for i, in := range ins {
		for k, v := range atDone[i] {
			got, err := in.Get("v", []byte(k), nil).Wait(ctx)
			if err != nil || !got.Found || string(got.Data) != v {
				t.Fatalf("subtask %d on n%d key %s: %q %v, want %q", i, where[i], k, got.Data, err, v)
			}
		}
	}
}

// taskKey is the n-th key (in a fixed order) that hashes into kg: a
// record routed to the task that owns it.
func taskKey(in *client.Instance, kg backend.KeyGroupRange, n int) string {
	for i, seen := 0, 0; ; i++ {
		k := fmt.Sprintf("k%d", i)
		if g := in.KeyGroup([]byte(k)); g >= kg.Start && g <= kg.End {
			if seen == n {
				return k
			}
			seen++
		}
	}
}
