package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestCallReachesTheLeadersService: a Call through any node runs on the
// leader's handler; while the leader hosts none it is retried, and after
// the leader dies it runs on the new leader's.
func TestCallReachesTheLeadersService(t *testing.T) {
	var mu sync.Mutex
	changes := map[int]int{}
	c := startCluster(t, 3, func(i int, o *Options) {
		o.OnLeaderChange = func(string) {
			mu.Lock()
			changes[i]++
			mu.Unlock()
		}
	})
	l := c.leader()
	serve := func(i int) {
		id := c.nodes[i].ID()
		c.nodes[i].SetHandler(func(_ context.Context, method string, payload []byte) ([]byte, error) {
			return fmt.Appendf(nil, "%s:%s:%s", id, method, payload), nil
		})
	}
	f := (l + 1) % 3
	// No handler yet: the call waits for one.
	done := make(chan string, 1)
	go func() {
		out, err := c.nodes[f].Call(ctxT(t), "m", []byte("p"))
		if err != nil {
			done <- err.Error()
			return
		}
		done <- string(out)
	}()
	serve(l)
	if got, want := <-done, c.nodes[l].ID()+":m:p"; got != want {
		t.Fatalf("call through a follower: %q, want %q", got, want)
	}
	out, err := c.nodes[l].Call(ctxT(t), "n", []byte("q"))
	if err != nil || string(out) != c.nodes[l].ID()+":n:q" {
		t.Fatalf("call on the leader: %q %v", out, err)
	}
	for i := range c.nodes {
		if i != l {
			serve(i) // each serves only once it leads
		}
	}
	c.kill(l)
	nl := c.leader()
	out, err = c.nodes[f].Call(ctxT(t), "m", []byte("again"))
	if err != nil || string(out) != c.nodes[nl].ID()+":m:again" {
		t.Fatalf("call after the leader's death: %q %v", out, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if changes[f] < 2 {
		t.Fatalf("OnLeaderChange on n%d: %d calls, want at least 2 (first leader, new leader)", f, changes[f])
	}
}

// TestJournalSurvivesTheLeader: records put through any node are on the
// next leader after the first one dies; a delete-range removes exactly
// its range; an oversized record is refused, naming its key.
func TestJournalSurvivesTheLeader(t *testing.T) {
	c := startCluster(t, 3, nil)
	l := c.leader()
	f := (l + 1) % 3
	for i, k := range []string{"r/j/01/a", "r/j/01/b", "r/j/02/a", "r/k/01/a"} {
		if err := c.nodes[(l+i)%3].JournalPut(ctxT(t), k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	c.kill(l)
	nl := c.leader()
	got := c.journalOnLeader("r/j/")
	if len(got) != 3 || string(got["r/j/02/a"]) != "r/j/02/a" {
		t.Fatalf("the new leader's journal: %v", got)
	}
	if err := c.nodes[f].JournalDeleteRange(ctxT(t), "r/j/", "r/j/02/"); err != nil {
		t.Fatal(err)
	}
	if got := c.journalOnLeader("r/"); len(got) != 2 || got["r/j/02/a"] == nil || got["r/k/01/a"] == nil {
		t.Fatalf("after deleting r/j/ up to r/j/02/: %v", got)
	}
	err := c.nodes[f].JournalPut(ctxT(t), "big", make([]byte, maxJournalValue+1))
	if err == nil || !strings.Contains(err.Error(), `"big"`) {
		t.Fatalf("an oversized record: %v", err)
	}
	// put-many is all or nothing.
	err = c.nodes[nl].JournalPutMany(ctxT(t), map[string][]byte{"m/1": []byte("a"), "m/2": make([]byte, maxJournalValue+1)})
	if err == nil || len(c.nodes[nl].JournalRead("m/")) != 0 {
		t.Fatalf("a put-many with an oversized record: %v, left %v", err, c.nodes[nl].JournalRead("m/"))
	}
	if err := c.nodes[nl].JournalPutMany(ctxT(t), map[string][]byte{"m/1": []byte("a"), "m/2": []byte("b")}); err != nil {
		t.Fatal(err)
	}
	if got := c.journalOnLeader("m/"); len(got) != 2 || string(got["m/2"]) != "b" {
		t.Fatalf("after put-many: %v", got)
	}
	// A checked record is set only while its token is the task's newest,
	// decided in the same entry as the others.
	old, err := c.nodes[f].Acquire(ctxT(t), "j/op/0", "n1")
	if err != nil {
		t.Fatal(err)
	}
	newer, err := c.nodes[nl].Acquire(ctxT(t), "j/op/0", "n2")
	if err != nil {
		t.Fatal(err)
	}
	refused, err := c.nodes[f].JournalPutChecked(ctxT(t), map[string][]byte{"c/old": []byte("x"), "c/new": []byte("y"), "c/free": []byte("z")},
		map[string]Check{"c/old": {Task: "j/op/0", Token: old}, "c/new": {Task: "j/op/0", Token: newer}})
	if err != nil {
		t.Fatal(err)
	}
	if len(refused) != 1 || !errors.Is(refused["c/old"], ErrFenced) || !strings.Contains(refused["c/old"].Error(), fmt.Sprintf("node n2 holds token %d", newer)) {
		t.Fatalf("refused %v, want c/old fenced by n2's token %d", refused, newer)
	}
	if got := c.journalOnLeader("c/"); len(got) != 2 || got["c/old"] != nil || string(got["c/new"]) != "y" || string(got["c/free"]) != "z" {
		t.Fatalf("after a checked put-many: %v", got)
	}
}

// journalOnLeader reads the journal under prefix on the leader once it
// has applied everything committed (leadership may move under a slow
// machine: it asks whichever node leads then).
func (c *testCluster) journalOnLeader(prefix string) map[string][]byte {
	c.t.Helper()
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		l := c.leader()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = c.nodes[l].Barrier(ctx)
		cancel()
		if err == nil {
			return c.nodes[l].JournalRead(prefix)
		}
	}
	c.t.Fatalf("no leader applied the log: %v", err)
	return nil
}

// TestCallLeavesALeaderThatStoppedAnswering: a call forwarded to the
// leader gets no answer (as from a leader cut off by a silent partition:
// no reset, no reply), and another node takes over. The call is given up
// as soon as the caller's node learns of the new leader, and answered
// there; before, it waited for the caller's whole deadline (found by the
// partition suite, tests/partition).
func TestCallLeavesALeaderThatStoppedAnswering(t *testing.T) {
	c := startCluster(t, 3, nil)
	release := make(chan struct{})
	defer close(release)
	type result struct {
		out []byte
		err error
	}
	for attempt := 1; ; attempt++ {
		l := c.leader()
		hung := make(chan struct{})
		var once sync.Once
		c.nodes[l].SetHandler(func(ctx context.Context, method string, _ []byte) ([]byte, error) {
			once.Do(func() { close(hung) })
			<-release // never answers while the test runs, whatever ctx says
			return nil, errors.New("released")
		})
		for i, nd := range c.nodes {
			if i != l {
				id := nd.ID()
				nd.SetHandler(func(_ context.Context, method string, _ []byte) ([]byte, error) { return []byte(id), nil })
			}
		}
		f := (l + 1) % 3
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		done := make(chan result, 1)
		start := time.Now()
		go func() {
			out, err := c.nodes[f].Call(ctx, "m", nil)
			done <- result{out, err}
		}()
		select {
		case <-hung:
		case r := <-done:
			// The leadership moved on its own before the call reached
			// the leader (a loaded machine): set the stage again.
			if attempt == 5 {
				t.Fatalf("the call never reached a leader that stays silent: %q %v", r.out, r.err)
			}
			t.Logf("attempt %d: the leadership moved first (%q %v)", attempt, r.out, r.err)
			continue
		}
		if err := c.nodes[l].raft.LeadershipTransfer().Error(); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil {
			t.Fatalf("call after %v: %v", time.Since(start).Round(time.Millisecond), r.err)
		}
		if string(r.out) == c.nodes[l].ID() || time.Since(start) > 10*time.Second {
			t.Fatalf("answered by %s after %v", r.out, time.Since(start).Round(time.Millisecond))
		}
		t.Logf("answered by %s after %v", r.out, time.Since(start).Round(time.Millisecond))
		return
	}
}

// stallConn is a connection that, once stalled, loses everything: its
// writes vanish and its reads wait, with no error and no reset, as a TCP
// connection across a silent partition (and after its heal, until TCP's
// next retransmission, tens of seconds later).
type stallConn struct {
	net.Conn
	rpc    atomic.Bool // its first write named the node-to-node service
	first  atomic.Bool
	stall  atomic.Bool
	closed chan struct{}
	once   sync.Once
}

func (c *stallConn) Write(b []byte) (int, error) {
	if !c.first.Swap(true) {
		// The mux's header: magic, version, kind.
		c.rpc.Store(len(b) > len(headerMagic)+1 && b[len(headerMagic)+1] == kindRPC)
	}
	if c.stall.Load() {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func (c *stallConn) Read(b []byte) (int, error) {
	if c.stall.Load() {
		<-c.closed
		return 0, net.ErrClosed
	}
	return c.Conn.Read(b)
}

func (c *stallConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// TestCallThroughAStalledConnection: a follower's connection to the
// leader's service stalls silently while the leader stays the leader. A
// call forwarded over it is answered once the connection is found dead
// (keepalive) and dialed again; before, it waited for the caller's whole
// deadline (found by the partition suite, tests/partition, where a healed
// node could not forward a call for 30-45 s).
func TestCallThroughAStalledConnection(t *testing.T) {
	if testing.Short() {
		t.Skip("takes gRPC's shortest keepalive interval (10 s)")
	}
	var mu sync.Mutex
	var conns []*stallConn
	c := startCluster(t, 3, func(i int, o *Options) {
		o.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			sc := &stallConn{Conn: conn, closed: make(chan struct{})}
			mu.Lock()
			conns = append(conns, sc)
			mu.Unlock()
			return sc, nil
		}
	})
	l := c.leader()
	f := (l + 1) % 3
	id := c.nodes[l].ID()
	// Every node answers with its id: on a loaded machine leadership can
	// move during the test, and a new leader must answer too (the test is
	// about the stalled connection, not about who leads).
	ids := map[string]bool{}
	for _, n := range c.nodes {
		nid := n.ID()
		ids[nid] = true
		n.SetHandler(func(context.Context, string, []byte) ([]byte, error) { return []byte(nid), nil })
	}
	if out, err := c.nodes[f].Call(ctxT(t), "m", nil); err != nil || string(out) != id {
		t.Fatalf("call before the stall: %q %v", out, err)
	}
	// Stall the connections that exist (the follower's to the leader's
	// service among them); the ones dialed from now on work.
	mu.Lock()
	old := slices.Clone(conns)
	mu.Unlock()
	for _, sc := range old {
		if sc.rpc.Load() {
			sc.stall.Store(true)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	start := time.Now()
	out, err := c.nodes[f].Call(ctx, "m", nil)
	if err != nil || !ids[string(out)] {
		t.Fatalf("call over a stalled connection, after %v: %q %v", time.Since(start).Round(time.Millisecond), out, err)
	}
	t.Logf("answered after %v", time.Since(start).Round(time.Millisecond))
}
