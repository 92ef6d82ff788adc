package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	pb "github.com/statedhq/stated/cluster/clusterpb"
	"github.com/statedhq/stated/internal/tlsconf/tlstest"
)

// fast are raft timeouts for tests: elections in tens of milliseconds.
func fast(o *Options) {
	o.HeartbeatTimeout, o.ElectionTimeout = 150*time.Millisecond, 150*time.Millisecond
	o.LeaderLeaseTimeout, o.CommitTimeout = 100*time.Millisecond, 5*time.Millisecond
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("STATED_TEST_CLUSTER_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// testCluster is n nodes on 127.0.0.1, bootstrapped together.
type testCluster struct {
	t     testing.TB
	nodes []*Member
	opts  []Options
}

func startCluster(t testing.TB, n int, mod func(i int, o *Options)) *testCluster {
	t.Helper()
	c := &testCluster{t: t, nodes: make([]*Member, n), opts: make([]Options, n)}
	var peers []Peer
	lns := make([]net.Listener, n)
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
		peers = append(peers, Peer{ID: fmt.Sprintf("n%d", i), Addr: ln.Addr().String()})
	}
	for i := range n {
		o := Options{ID: peers[i].ID, Listener: lns[i], Dir: t.TempDir(), Peers: peers, Token: "cluster-secret", Logger: testLogger(t)}
		fast(&o)
		if mod != nil {
			mod(i, &o)
		}
		c.opts[i] = o
		node, err := Open(o)
		if err != nil {
			t.Fatal(err)
		}
		c.nodes[i] = node
	}
	t.Cleanup(c.closeAll)
	return c
}

func (c *testCluster) closeAll() {
	for _, n := range c.nodes {
		if n != nil {
			_ = n.Close()
		}
	}
}

// leader waits for a leader among the live nodes and returns its index.
func (c *testCluster) leader() int {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for i, n := range c.nodes {
			if n != nil && n.IsLeader() {
				return i
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatal("no leader within 10s")
	return -1
}

// snapshotAndRestart snapshots every node, closes them all and opens
// them again on their addresses and directories (mod, if set, changes
// each node's options first).
func (c *testCluster) snapshotAndRestart(mod func(i int, o *Options)) {
	c.t.Helper()
	for _, n := range c.nodes {
		if err := n.raft.Snapshot().Error(); err != nil {
			c.t.Fatal(err)
		}
	}
	opts := c.opts
	c.closeAll()
	for i := range c.nodes {
		o := opts[i]
		ln, err := net.Listen("tcp", o.Listener.Addr().String())
		if err != nil {
			c.t.Fatal(err)
		}
		o.Listener, o.Peers = ln, nil
		if mod != nil {
			mod(i, &o)
		}
		if c.nodes[i], err = Open(o); err != nil {
			c.t.Fatal(err)
		}
	}
}

// kill closes node i abruptly: its transport and listener go with it.
func (c *testCluster) kill(i int) {
	_ = c.nodes[i].Close()
	c.nodes[i] = nil
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestTokensAcrossLeaderDeaths: with 3 and 5 nodes, tokens taken through
// every node grow strictly, survive the deaths of leaders (as long as a
// quorum lives) and are never handed out twice.
func TestTokensAcrossLeaderDeaths(t *testing.T) {
	for _, size := range []int{3, 5} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			c := startCluster(t, size, nil)
			ctx := ctxT(t)
			var last uint64
			seen := map[uint64]bool{}
			acquire := func(via int, task string) uint64 {
				tok, err := c.nodes[via].Acquire(ctx, task, c.nodes[via].ID())
				if err != nil {
					t.Fatalf("acquire through n%d: %v", via, err)
				}
				if tok <= last || seen[tok] {
					t.Fatalf("token %d after %d (seen before: %v)", tok, last, seen[tok])
				}
				seen[tok], last = true, tok
				return tok
			}
			kills := (size - 1) / 2 // what a quorum survives
			for round := 0; round <= kills; round++ {
				for i, n := range c.nodes {
					if n != nil {
						acquire(i, fmt.Sprintf("job/op/%d", i))
					}
				}
				if round == kills {
					break
				}
				l := c.leader()
				t0 := time.Now()
				c.kill(l)
				nl := c.leader()
				t.Logf("leader n%d killed; n%d leads after %v", l, nl, time.Since(t0).Round(time.Millisecond))
			}
			// Every live node's copy converges on the newest fences.
			for i, n := range c.nodes {
				if n == nil {
					continue
				}
				tok := acquire(i, "job/op/final")
				for _, m := range c.nodes {
					if m == nil {
						continue
					}
					if err := m.Check(ctx, "job/op/final", tok); err != nil {
						t.Fatalf("check on %s: %v", m.ID(), err)
					}
				}
			}
		})
	}
}

// TestFencing: a task reopened on another node fences the first holder,
// whose check and release fail naming the new holder and token.
func TestFencing(t *testing.T) {
	c := startCluster(t, 3, nil)
	ctx := ctxT(t)
	old, err := c.nodes[0].Acquire(ctx, "j/op/0", "n0")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.nodes[2].Check(ctx, "j/op/0", old); err != nil {
		t.Fatalf("fresh token: %v", err)
	}
	newer, err := c.nodes[1].Acquire(ctx, "j/op/0", "n1")
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{c.nodes[0].Check(ctx, "j/op/0", old), c.nodes[0].Release(ctx, "j/op/0", old)} {
		if !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), fmt.Sprintf("node n1 holds token %d", newer)) {
			t.Fatalf("stale holder: %v", err)
		}
	}
	if err := c.nodes[2].Release(ctx, "j/op/0", newer); err != nil {
		t.Fatal(err)
	}
	if err := c.nodes[1].Check(ctx, "j/op/0", newer); !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "released") {
		t.Fatalf("released token: %v", err)
	}
	again, err := c.nodes[2].Acquire(ctx, "j/op/0", "n2")
	if err != nil || again <= newer {
		t.Fatalf("token after release %d (%v), want above %d", again, err, newer)
	}
	// CheckHeld reads the leader's own state (its caller confirms the
	// leadership afterwards); a follower refuses it as not the leader.
	l := c.leader()
	if err := c.nodes[l].CheckHeld(ctx, []Check{{Task: "j/op/0", Token: again}}); err != nil {
		t.Fatalf("CheckHeld of the newest token: %v", err)
	}
	err = c.nodes[l].CheckHeld(ctx, []Check{{Task: "j/op/0", Token: again}, {Task: "j/op/0", Token: newer}, {Task: "j/op/9", Token: 1}})
	if !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), fmt.Sprintf("node n2 holds token %d", again)) || !strings.Contains(err.Error(), "j/op/9") {
		t.Fatalf("CheckHeld of a stale and an unknown token: %v", err)
	}
	if err := c.nodes[(l+1)%3].CheckHeld(ctx, []Check{{Task: "j/op/0", Token: again}}); !IsLeadershipError(err) {
		t.Fatalf("CheckHeld on a follower: %v", err)
	}
}

// TestRestartKeepsState: a cluster stopped and restarted from its raft
// dirs (no bootstrap) keeps every fence, from log replay and from
// snapshots (a small threshold makes raft take some).
func TestRestartKeepsState(t *testing.T) {
	c := startCluster(t, 3, func(_ int, o *Options) { o.SnapshotThreshold, o.TrailingLogs = 16, 8 })
	ctx := ctxT(t)
	want := map[string]uint64{}
	for i := range 100 {
		task := fmt.Sprintf("j/op/%d", i%10)
		tok, err := c.nodes[i%3].Acquire(ctx, task, "n0")
		if err != nil {
			t.Fatal(err)
		}
		want[task] = tok
	}
	// Force a snapshot on every node so that restart restores one.
	c.snapshotAndRestart(nil)
	c.leader()
	for task, tok := range want {
		if err := c.nodes[1].Check(ctx, task, tok); err != nil {
			t.Fatalf("after restart: %v", err)
		}
	}
	next, err := c.nodes[2].Acquire(ctx, "j/op/new", "n2")
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range want {
		if next <= tok {
			t.Fatalf("token %d after restart is not above %d", next, tok)
		}
	}
}

// TestJoinAndLeave: a node started without peers joins through a
// follower (forwarded to the leader), takes part, and leaves.
func TestJoinAndLeave(t *testing.T) {
	c := startCluster(t, 3, nil)
	ctx := ctxT(t)
	l := c.leader()
	f := (l + 1) % 3
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{ID: "n3", Listener: ln, Dir: t.TempDir(), Token: "cluster-secret", Logger: testLogger(t)}
	fast(&o)
	n3, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer n3.Close()
	if err := c.nodes[f].Join(ctx, "n3", n3.Addr()); err != nil {
		t.Fatal(err)
	}
	tok, err := n3.Acquire(ctx, "j/op/9", "n3")
	if err != nil {
		t.Fatalf("acquire through the new member: %v", err)
	}
	// The new member learns the configuration from the leader's appends:
	// ask until it lists all four, healthy.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := n3.Status(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		healthy := 0
		for _, m := range st.Members {
			if m.Healthy {
				healthy++
			}
		}
		if len(st.Members) == 4 && healthy == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("members after join: %v", st.Members)
		}
	}
	if err := c.nodes[f].Leave(ctx, "n3"); err != nil {
		t.Fatal(err)
	}
	st, err := c.nodes[l].Status(ctx, false)
	if err != nil || len(st.Members) != 3 {
		t.Fatalf("after leave: %v %v", st, err)
	}
	if err := c.nodes[l].Check(ctx, "j/op/9", tok); err != nil {
		t.Fatal(err)
	}
}

// TestAuthentication: a node or client with a wrong token is refused, and
// so is a connection that speaks another protocol; the refusals are
// counted.
func TestAuthentication(t *testing.T) {
	c := startCluster(t, 3, nil)
	ctx := ctxT(t)
	c.leader()
	addr := c.nodes[0].Addr()
	cl, err := Dial(addr, TLS{}, "wrong")
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Status(ctx, &pb.StatusRequest{}); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("status with a wrong token: %v", err)
	}
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = raw.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	b, _ := io.ReadAll(raw)
	raw.Close()
	if string(b) != string([]byte{answerRefused}) {
		t.Fatalf("an HTTP request got %q", b)
	}
	if got := c.nodes[0].Stats().Refused; got < 2 {
		t.Fatalf("refused connections %d, want at least 2", got)
	}
	good, err := Dial(addr, TLS{}, "cluster-secret")
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	st, err := good.Status(ctx, &pb.StatusRequest{Probe: true})
	if err != nil || len(st.Members) != 3 {
		t.Fatalf("status: %v %v", st, err)
	}
}

// TestTLS: nodes with certificates of the cluster CA form a cluster
// without a token; a client whose certificate another CA signed is
// refused.
func TestTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "cluster")
	c := startCluster(t, 3, func(i int, o *Options) {
		p := ca.Peer(t, fmt.Sprintf("node%d", i))
		o.Token = ""
		o.ServerTLS = TLS{CertFile: p.Cert, KeyFile: p.Key, CAFile: ca.File}
		o.ClientTLS = o.ServerTLS
	})
	ctx := ctxT(t)
	tok, err := c.nodes[1].Acquire(ctx, "j/op/0", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.nodes[2].Check(ctx, "j/op/0", tok); err != nil {
		t.Fatal(err)
	}
	op := tlstest.NewCA(t, "other").Client(t, "intruder")
	bad, err := Dial(c.nodes[0].Addr(), TLS{CertFile: op.Cert, KeyFile: op.Key, CAFile: ca.File}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if _, err := bad.Status(ctx, &pb.StatusRequest{}); err == nil {
		t.Fatal("a client certificate of another CA was accepted")
	}
	cp := ca.Client(t, "operator")
	good, err := Dial(c.nodes[0].Addr(), TLS{CertFile: cp.Cert, KeyFile: cp.Key, CAFile: ca.File}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	if _, err := good.Status(ctx, &pb.StatusRequest{}); err != nil {
		t.Fatalf("operator with a cluster certificate: %v", err)
	}
}

// TestOptionsRefused: unsafe or incomplete settings are refused, named.
func TestOptionsRefused(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Addr: "127.0.0.1:0", Dir: "d", Token: "t"}, "no node id"},
		{Options{ID: "a", Addr: "127.0.0.1:0", Dir: "d"}, "cluster token or use TLS"},
		{Options{ID: "a", Addr: "127.0.0.1:0", Dir: "d", Token: "t", Peers: []Peer{{"b", "h:1"}}}, "do not include this node"},
		{Options{ID: "a", Addr: "127.0.0.1:0", Dir: "d", ServerTLS: TLS{CertFile: "c"}}, "both its server and client side"},
		{Options{ID: "a", Addr: "127.0.0.1:0", Dir: "d", Token: "t", Advertise: "0.0.0.0:7"}, "names no host"},
		{Options{ID: "a", Addr: "nope", Dir: "d", Token: "t"}, "raft address"},
		{Options{ID: "a", Addr: "127.0.0.1:0", Dir: "d", Token: "t", HeartbeatTimeout: time.Second, LeaderLease: 600 * time.Millisecond}, "below half the heartbeat timeout"},
	} {
		if _, err := Open(c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
	if _, err := ParsePeers("a=h:1,a=h:2"); err == nil {
		t.Error("a duplicate peer id was accepted")
	}
	if p, err := ParsePeers(" a=h:1, b=[::1]:2 "); err != nil || len(p) != 2 || p[1].Addr != "[::1]:2" {
		t.Errorf("peers %v %v", p, err)
	}
}

// TestRetriedCommandAppliesOnce: an acquire or release applied twice with
// one request id (its first answer lost with a leader) takes effect once
// and answers the same; remembered answers stay bounded.
func TestRetriedCommandAppliesOnce(t *testing.T) {
	s := newFSM(nil).st
	a := command{V: 1, Op: opAcquire, Task: "t", Holder: "n0", Req: "r1"}
	first := s.apply(a)
	other := s.apply(command{V: 1, Op: opAcquire, Task: "t", Holder: "n1", Req: "r2"})
	if again := s.apply(a); !reflect.DeepEqual(again, first) || s.Next != 2 || s.Fences["t"].Token != other.Token {
		t.Fatalf("retried acquire: %+v then %+v, next %d, fence %+v", first, again, s.Next, s.Fences["t"])
	}
	rel := command{V: 1, Op: opRelease, Task: "t", Token: other.Token, Req: "r3"}
	if r := s.apply(rel); r.Fenced || r.Err != "" {
		t.Fatalf("release: %+v", r)
	}
	if r := s.apply(rel); r.Fenced || r.Err != "" {
		t.Fatalf("retried release answered %+v, not its first answer", r)
	}
	for i := range maxDone + 10 {
		s.apply(command{V: 1, Op: opAcquire, Task: "u", Holder: "n0", Req: fmt.Sprint("bulk", i)})
	}
	if len(s.Done) != maxDone || len(s.DoneOrder) != maxDone {
		t.Fatalf("remembered %d answers (%d in order), want %d", len(s.Done), len(s.DoneOrder), maxDone)
	}
}

// TestCheckHeldWaitsForTheMachine: raft counts an entry applied when it
// hands it to the state machine's goroutine, before the machine applied
// it. A token check on the leader must wait for the machine itself, or it
// passes a token that a committed acquire has just replaced.
func TestCheckHeldWaitsForTheMachine(t *testing.T) {
	c := startCluster(t, 3, nil)
	ctx := ctxT(t)
	l := c.leader()
	ln := c.nodes[l]
	old, err := ln.Acquire(ctx, "j/op/0", "n0")
	if err != nil {
		t.Fatal(err)
	}
	if err := ln.CheckHeld(ctx, []Check{{Task: "j/op/0", Token: old}}); err != nil {
		t.Fatalf("fresh token: %v", err)
	}
	gate := make(chan struct{})
	hold := func() { <-gate }
	ln.fsm.beforeApply.Store(&hold)
	released := false
	release := func() {
		if !released {
			released = true
			ln.fsm.beforeApply.Store(nil)
			close(gate)
		}
	}
	defer release()
	before := ln.raft.AppliedIndex()
	acquired := make(chan error, 1)
	go func() {
		_, err := ln.Acquire(ctx, "j/op/0", "n1")
		acquired <- err
	}()
	for ln.raft.AppliedIndex() == before {
		select {
		case err := <-acquired:
			t.Fatalf("the acquire returned while the machine was held: %v", err)
		case <-ctx.Done():
			t.Fatal("raft never handed the acquire to the machine")
		case <-time.After(time.Millisecond):
		}
	}
	checked := make(chan error, 1)
	go func() { checked <- ln.CheckHeld(ctx, []Check{{Task: "j/op/0", Token: old}}) }()
	select {
	case err := <-checked:
		t.Fatalf("CheckHeld answered before the machine applied the committed acquire: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	if err := <-checked; !errors.Is(err, ErrFenced) {
		t.Fatalf("CheckHeld of the replaced token: %v, want ErrFenced", err)
	}
	if err := <-acquired; err != nil {
		t.Fatal(err)
	}
}
