package cluster

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// listService is a Service that keeps the commands it applied, in order.
type listService struct {
	mu  sync.Mutex
	log []string
}

func (s *listService) Apply(cmd []byte) any {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, string(cmd))
	return len(s.log)
}

func (s *listService) Image() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return []byte(strings.Join(s.log, ",")), nil
}

func (s *listService) Restore(img []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = strings.Split(string(img), ",")
	return nil
}

func (s *listService) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.log, ",")
}

// TestServiceRidesOnTheLog: the leader's proposals reach every node's
// service in one order and the proposer hears its own service's answer;
// a proposal whose fencing check fails reaches no service; a follower
// refuses to propose; and nodes restarted from snapshots get the
// service's state back.
func TestServiceRidesOnTheLog(t *testing.T) {
	svcs := []*listService{{}, {}, {}}
	c := startCluster(t, 3, func(i int, o *Options) {
		o.Service = svcs[i]
		o.SnapshotThreshold, o.TrailingLogs = 16, 8
	})
	ctx := ctxT(t)
	l := c.leader()
	tok, err := c.nodes[l].Acquire(ctx, "j/op/0", "n0")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 40 {
		cmd := strconv.Itoa(i)
		res, err := c.nodes[l].Propose(ctx, []byte(cmd), []Check{{Task: "j/op/0", Token: tok}})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, cmd)
		if res != len(want) {
			t.Fatalf("proposal %d answered %v, want %d", i, res, len(want))
		}
	}
	if _, err := c.nodes[(l+1)%3].Propose(ctx, []byte("x"), nil); !IsLeadershipError(err) {
		t.Fatalf("a follower's proposal: %v", err)
	}
	// Another holder takes the task: the old token's proposals are refused.
	if _, err := c.nodes[l].Acquire(ctx, "j/op/0", "n1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.nodes[l].Propose(ctx, []byte("fenced"), []Check{{Task: "j/op/0", Token: tok}}); !errors.Is(err, ErrFenced) {
		t.Fatalf("a fenced proposal: %v", err)
	}
	if err := c.nodes[l].Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	wantS := strings.Join(want, ",")
	waitFor(t, func() bool {
		for _, s := range svcs {
			if s.String() != wantS {
				return false
			}
		}
		return true
	})
	// Snapshot, restart every node with a fresh service: the snapshot and
	// the log after it give the state back.
	c.snapshotAndRestart(func(i int, o *Options) {
		svcs[i] = &listService{}
		o.Service = svcs[i]
	})
	l = c.leader()
	if _, err := c.nodes[l].Propose(ctx, []byte("after"), nil); err != nil {
		t.Fatal(err)
	}
	wantS += ",after"
	waitFor(t, func() bool {
		for _, s := range svcs {
			if s.String() != wantS {
				return false
			}
		}
		return true
	})
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("not within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// gateService is a Service whose Apply of "gate" waits until release is
// closed, after telling entered.
type gateService struct {
	listService
	entered, release chan struct{}
}

func (s *gateService) Apply(cmd []byte) any {
	if string(cmd) == "gate" {
		close(s.entered)
		<-s.release
	}
	return s.listService.Apply(cmd)
}

// TestProposalEndsWhenTheNodeCloses: a proposal committed but still
// queued for the service when its node closes is one raft never answers
// (its queue is dropped at shutdown); Propose must end anyway, with a
// leadership error, not wait forever. Raft picks at random between the
// queued entry and the shutdown, so the race is run several times.
func TestProposalEndsWhenTheNodeCloses(t *testing.T) {
	for round := range 6 {
		svc := &gateService{entered: make(chan struct{}), release: make(chan struct{})}
		c := startCluster(t, 1, func(_ int, o *Options) { o.Service = svc })
		n := c.nodes[c.leader()]
		go func() { _, _ = n.Propose(context.Background(), []byte("gate"), nil) }()
		<-svc.entered
		gate := n.raft.LastIndex()
		errc := make(chan error, 1)
		go func() {
			_, err := n.Propose(context.Background(), []byte("queued"), nil)
			errc <- err
		}()
		// Committed (one node: stored is committed), queued behind "gate".
		waitFor(t, func() bool {
			st := n.raft.Stats()
			return n.raft.LastIndex() > gate && st["commit_index"] == strconv.FormatUint(n.raft.LastIndex(), 10)
		})
		closed := make(chan struct{})
		go func() { _ = n.Close(); close(closed) }()
		waitFor(t, func() bool { return n.raft.State() == raft.Shutdown })
		close(svc.release)
		select {
		case err := <-errc:
			if err != nil && !IsLeadershipError(err) && !errors.Is(err, raft.ErrRaftShutdown) {
				t.Fatalf("round %d: the queued proposal: %v", round, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: the queued proposal still waits 5s after its node closed", round)
		}
		<-closed
	}
}

// lockedService is a Service whose owner reads the node's journal while
// holding the service's own lock, as the catalog does (which log
// segments are held) while it decides under its lock.
type lockedService struct {
	mu      sync.Mutex
	applied int
	entered chan struct{}
}

func (s *lockedService) Apply([]byte) any {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applied++
	return s.applied
}

func (s *lockedService) Image() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return []byte(strconv.Itoa(s.applied)), nil
}

func (s *lockedService) Restore(img []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := strconv.Atoi(string(img))
	s.applied = n
	return err
}

// TestServiceOwnerReadsTheNodeUnderItsLock: while the service's apply
// waits for the service's lock, the lock's holder can still read the
// node's journal (the node does not hold its own lock across the
// service's apply: the two locks would be taken in both orders).
func TestServiceOwnerReadsTheNodeUnderItsLock(t *testing.T) {
	svc := &lockedService{entered: make(chan struct{}, 1)}
	c := startCluster(t, 1, func(_ int, o *Options) { o.Service = svc })
	n := c.nodes[c.leader()]
	svc.mu.Lock()
	locked := true
	defer func() {
		if locked {
			svc.mu.Unlock()
		}
	}()
	errc := make(chan error, 1)
	go func() {
		_, err := n.Propose(ctxT(t), []byte("x"), nil)
		errc <- err
	}()
	<-svc.entered
	read := make(chan struct{})
	go func() {
		n.JournalRead("j/")
		close(read)
	}()
	select {
	case <-read:
	case <-time.After(5 * time.Second):
		t.Fatal("reading the journal under the service's lock still waits after 5s while the service's apply waits for that lock")
	}
	svc.mu.Unlock()
	locked = false
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
