//go:build linux

package partition

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/cluster"
	pb "github.com/statedhq/stated/cluster/clusterpb"
)

const (
	// watchEnv, set to a raft address, makes the test binary a watcher
	// (see watch) instead of running tests.
	watchEnv = "STATED_PARTITION_WATCH"
	tokenEnv = "STATED_PARTITION_CLUSTER_TOKEN"
	token    = "partition-suite-token"
	raftPort = "7000"
)

// binary is the stated binary TestMain built.
var binary string

func TestMain(m *testing.M) {
	if addr := os.Getenv(watchEnv); addr != "" {
		os.Exit(watch(addr, os.Getenv(tokenEnv)))
	}
	if os.Getenv("STATED_PARTITION") != "1" {
		os.Exit(m.Run()) // the suite skips itself and says how to run it
	}
	dir, err := os.MkdirTemp("", "stated-partition-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "stated")
	cmd := exec.Command("go", "build", "-o", binary, "github.com/statedhq/stated/cmd/stated")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build stated:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// sample is one status of a node as its watcher saw it.
type sample struct {
	At      int64  `json:"at"` // unix nanoseconds
	Err     string `json:"err,omitempty"`
	State   string `json:"state,omitempty"`
	Leader  string `json:"leader,omitempty"`
	Term    uint64 `json:"term,omitempty"`
	Commit  uint64 `json:"commit,omitempty"`
	Applied uint64 `json:"applied,omitempty"`
}

func (s sample) at() time.Time { return time.Unix(0, s.At) }

// watch asks the node at addr for its status (its own view: state, leader,
// term, indexes) every 50 ms and prints each answer as a JSON line, until
// its stdin closes. It runs inside the node's namespace, so it reaches its
// node whatever is cut, and gives the suite every node's view with a
// resolution of 50 ms, where "stated cluster status" would wait for the
// members it cannot reach.
func watch(addr, tok string) int {
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	c, err := cluster.Dial(addr, cluster.TLS{}, tok)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	enc := json.NewEncoder(os.Stdout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		st, err := c.Status(ctx, &pb.StatusRequest{})
		cancel()
		s := sample{At: time.Now().UnixNano()}
		if err != nil {
			s.Err = err.Error()
		} else {
			s.State, s.Leader, s.Term, s.Commit, s.Applied = st.GetState(), st.GetLeaderId(), st.GetTerm(), st.GetCommitIndex(), st.GetAppliedIndex()
		}
		if enc.Encode(s) != nil {
			return 0
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// node is one "stated serve" process in its namespace, its watcher and a
// client on its Unix socket. The client is the node's local engine: a
// task manager talks to the daemon on its own host, so its calls are not
// cut; what the cuts sever is node-to-node traffic (raft and the
// node-to-node service).
type node struct {
	t    testing.TB
	i    int
	ns   string
	addr string // raft address
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	c    *client.Client

	watcher *exec.Cmd
	wstdin  io.Closer
	mu      sync.Mutex
	samples []sample // every status the watcher saw, oldest first
	wdone   chan struct{}

	stopOnce sync.Once
}

// start runs node i of n in its namespace on the shared store.
func startNode(t testing.TB, nw *network, i, n int, root, store string) *node {
	t.Helper()
	var peers []string
	for j := range n {
		peers = append(peers, fmt.Sprintf("n%d=%s:%s", j, nw.addr(j), raftPort))
	}
	nd := &node{t: t, i: i, ns: nw.ns[i], addr: nw.addr(i) + ":" + raftPort, dir: filepath.Join(root, fmt.Sprintf("n%d", i)),
		done: make(chan struct{}), wdone: make(chan struct{})}
	if err := os.MkdirAll(nd.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(root, fmt.Sprintf("n%d.log", i)))
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(nd.dir, "s.sock")
	nd.cmd = exec.Command("ip", "netns", "exec", nd.ns, binary, "serve", "--data-dir", nd.dir, "--socket", sock,
		"--metrics-addr", "", "--node-id", fmt.Sprintf("n%d", i), "--raft-addr", nd.addr,
		"--raft-peers", strings.Join(peers, ","), "--checkpoint-store", store, "--retain", "2")
	nd.cmd.Env = append(os.Environ(), "STATED_CLUSTER_TOKEN="+token)
	// ip execs stated in place: the signal reaches stated if the suite
	// dies without its cleanup.
	nd.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := nd.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := nd.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		// Owned by the process: ends when its stderr closes.
		defer logf.Close()
		sc := bufio.NewScanner(stderr)
		seen := false
		for sc.Scan() {
			fmt.Fprintln(logf, sc.Text())
			if !seen && strings.Contains(sc.Text(), "stated serving") {
				seen = true
				close(ready)
			}
		}
		_, _ = io.Copy(logf, stderr)
		_ = nd.cmd.Wait()
		close(nd.done)
	}()
	t.Cleanup(nd.stop)
	select {
	case <-ready:
	case <-nd.done:
		t.Fatalf("n%d exited before serving; its log: %s", i, logf.Name())
	case <-time.After(60 * time.Second):
		t.Fatalf("n%d did not start serving; its log: %s", i, logf.Name())
	}
	if nd.c, err = client.Dial(sock, client.Options{}); err != nil {
		t.Fatal(err)
	}
	nd.startWatcher()
	return nd
}

func (nd *node) startWatcher() {
	self, err := os.Executable()
	if err != nil {
		nd.t.Fatal(err)
	}
	nd.watcher = exec.Command("ip", "netns", "exec", nd.ns, self)
	nd.watcher.Env = append(os.Environ(), watchEnv+"="+nd.addr, tokenEnv+"="+token)
	nd.watcher.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := nd.watcher.StdoutPipe()
	if err != nil {
		nd.t.Fatal(err)
	}
	in, err := nd.watcher.StdinPipe()
	if err != nil {
		nd.t.Fatal(err)
	}
	nd.wstdin = in
	if err := nd.watcher.Start(); err != nil {
		nd.t.Fatal(err)
	}
	go func() {
		// Owned by the watcher: ends when its stdout closes.
		defer close(nd.wdone)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var s sample
			if json.Unmarshal(sc.Bytes(), &s) == nil {
				nd.mu.Lock()
				nd.samples = append(nd.samples, s) // 20 a second: a few MiB in a long run
				nd.mu.Unlock()
			}
		}
		_ = nd.watcher.Wait()
	}()
}

// status is the node's latest status as its watcher saw it.
func (nd *node) status() sample {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if len(nd.samples) == 0 {
		return sample{}
	}
	return nd.samples[len(nd.samples)-1]
}

// ledAfter returns when the node was first seen leading in a term after
// term, at t0 or later.
func (nd *node) ledAfter(t0 time.Time, term uint64) (time.Time, bool) {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	for _, s := range nd.samples {
		if s.State == "leader" && s.Term > term && !s.at().Before(t0) {
			return s.at(), true
		}
	}
	return time.Time{}, false
}

// stop ends the watcher and the node (SIGTERM, then SIGKILL after 15 s),
// once.
func (nd *node) stop() { nd.stopOnce.Do(nd.stopNow) }

func (nd *node) stopNow() {
	if nd.c != nil {
		_ = nd.c.Close()
	}
	if nd.watcher != nil {
		_ = nd.wstdin.Close()
		select {
		case <-nd.wdone:
		case <-time.After(5 * time.Second):
			_ = nd.watcher.Process.Kill()
			<-nd.wdone
		}
	}
	_ = nd.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-nd.done:
	case <-time.After(15 * time.Second):
		_ = nd.cmd.Process.Kill()
		<-nd.done
	}
}
