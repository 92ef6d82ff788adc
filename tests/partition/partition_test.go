//go:build linux

package partition

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api/client"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/localfs"
)

var (
	cyclesFlag  = flag.Int("partition.cycles", 1, "times every scenario runs (CI runs 1)")
	nodesFlag   = flag.Int("partition.nodes", 5, "cluster nodes, at least 3 (5 gives a minority of two that can talk to each other)")
	seedFlag    = flag.Uint64("partition.seed", 0, "random seed of the cut timings (0: from the clock; printed)")
	onlyFlag    = flag.String("partition.only", "", "run only the scenarios whose name contains this")
	keepFlag    = flag.Bool("partition.keep", false, "keep the nodes' logs and data after a run that passed")
	isolateFlag = flag.Duration("partition.isolate", 3*time.Second, "how long each cut lasts at least after the new leader is known (-short: 1s)")
)

const (
	job      = "stream"
	probeJob = "probe"
)

var states = []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}

// scenario is one kind of cut. cut makes it, given the leader l of n
// nodes, and returns the nodes that must make no progress while it lasts
// (minority) and those the driver leaves alone (avoid: the minority and
// any node whose catalog calls cannot succeed).
type scenario struct {
	name string
	// trigger: "completion" cuts while a completion through the leader
	// is in flight, "delete" just after a completion returned (while the
	// leader discards what retention dropped), "" between rounds.
	trigger   string
	cut       func(nw *network, l, n int) (minority, avoid []int, err error)
	newLeader bool // a leader outside avoid must be elected
}

func isolateLeader(nw *network, l, _ int) ([]int, []int, error) {
	return []int{l}, []int{l}, nw.isolate(l)
}

var scenarios = []scenario{
	{name: "leader isolated mid-completion", trigger: "completion", cut: isolateLeader, newLeader: true},
	{name: "leader isolated mid-delete", trigger: "delete", cut: isolateLeader, newLeader: true},
	{name: "minority with the leader", trigger: "completion", newLeader: true,
		cut: func(nw *network, l, n int) ([]int, []int, error) {
			minority := []int{l}
			if n >= 5 {
				minority = append(minority, (l+1)%n)
			}
			for a := range n {
				for b := range n {
					if slices.Contains(minority, a) && !slices.Contains(minority, b) {
						if err := errors.Join(nw.drop(a, b), nw.drop(b, a)); err != nil {
							return nil, nil, err
						}
					}
				}
			}
			return minority, minority, nil
		}},
	{name: "leader mute (its packets lost)", trigger: "completion", newLeader: true,
		cut: func(nw *network, l, n int) ([]int, []int, error) {
			for b := range n {
				if b != l {
					if err := nw.drop(l, b); err != nil {
						return nil, nil, err
					}
				}
			}
			return []int{l}, []int{l}, nil
		}},
	{name: "leader deaf (packets to it lost)", trigger: "delete", newLeader: true,
		cut: func(nw *network, l, n int) ([]int, []int, error) {
			for a := range n {
				if a != l {
					if err := nw.drop(a, l); err != nil {
						return nil, nil, err
					}
				}
			}
			return []int{l}, []int{l}, nil
		}},
	{name: "follower deaf to the leader", trigger: "",
		// No minority: the cluster must go on; the follower may or may
		// not disturb the leader, and its own calls need the leader.
		cut: func(nw *network, l, n int) ([]int, []int, error) {
			f := (l + 1) % n
			return nil, []int{f}, nw.drop(l, f)
		}},
}

// figure is what one scenario measured.
type figure struct {
	name          string
	newLeader     time.Duration // from the cut to a leader outside the cut side (its own view)
	firstComplete time.Duration // from the cut to the next acknowledged completion
	refused       int           // probe completions the minority refused
	refusedIn     []time.Duration
	converge      time.Duration // from the heal to every node agreeing
}

type task struct {
	sub   int
	node  int
	in    *client.Instance
	model map[string]string
	keys  []string // keys of its key groups, in a fixed order
	scan  int      // the next candidate key's number
}

// key is the n-th key that hashes into the task's key groups.
func (tk *task) key(n int) string {
	kg := tk.in.KeyGroups()
	for ; len(tk.keys) <= n; tk.scan++ {
		k := fmt.Sprintf("k%d", tk.scan)
		if g := tk.in.KeyGroup([]byte(k)); g >= kg.Start && g <= kg.End {
			tk.keys = append(tk.keys, k)
		}
	}
	return tk.keys[n]
}

type zombie struct {
	node int
	in   *client.Instance
}

type suite struct {
	t     *testing.T
	rng   *rand.Rand
	nw    *network
	nodes []*node
	store string // the shared checkpoint store's directory
	tasks []*task

	zombies  []zombie
	nextID   uint64
	modelAt  map[uint64]map[int]map[string]string // checkpoint -> subtask -> state snapshotted
	acked    map[uint64]bool
	maxAcked uint64
	tried    map[uint64]bool // completions asked for (acknowledged or not)
	rr       int

	// avoid are the nodes the driver leaves alone; the cut sets them as
	// it cuts, while a round may be running.
	mu    sync.Mutex
	avoid map[int]bool

	probe     *client.Instance
	probeNode int
	probeID   uint64
	refused   []uint64 // probe checkpoints a minority node was asked to complete

	figs []figure
}

// TestPartition runs every scenario against five "stated serve" processes
// in their own network namespaces (see the package doc).
func TestPartition(t *testing.T) {
	if os.Getenv("STATED_PARTITION") != "1" {
		t.Skip("the partition suite needs Linux, root and ip netns: run it with STATED_PARTITION=1 (scripts/partition.sh)")
	}
	if why := netnsUnavailable(); why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the partition suite cannot run: %s. CI runs it as root with iproute2 (ip netns, veth, bridge, ip rule); fix the CI machine", why)
		}
		t.Skipf("the partition suite cannot run here: %s (in CI, CI=true, this fails)", why)
	}
	n := *nodesFlag
	if n < 3 {
		t.Fatalf("-partition.nodes %d: a cluster that can lose a node needs at least 3", n)
	}
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-partition.seed to repeat the cut timings), %d nodes, %d cycles", seed, n, *cyclesFlag)

	root, err := os.MkdirTemp("", "stp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || *keepFlag {
			t.Logf("the nodes' logs and data are kept in %s", root)
			return
		}
		os.RemoveAll(root)
	})
	s := &suite{t: t, rng: rand.New(rand.NewPCG(seed, 1)), store: filepath.Join(root, "shared"),
		modelAt: map[uint64]map[int]map[string]string{}, acked: map[uint64]bool{}, tried: map[uint64]bool{}, avoid: map[int]bool{}}
	s.nw = newNetwork(t, n)
	for i := range n {
		s.nodes = append(s.nodes, startNode(t, s.nw, i, n, root, "file://"+s.store))
	}
	t.Cleanup(func() {
		// All at once: each may take seconds to stop.
		var wg sync.WaitGroup
		for _, nd := range s.nodes {
			wg.Go(nd.stop)
		}
		wg.Wait()
	})
	start := time.Now()
	s.stableLeader(60 * time.Second)
	t.Logf("%d nodes serving, leader elected after %v", n, time.Since(start).Round(time.Millisecond))

	ctx := t.Context()
	for sub := range n {
		in, err := s.nodes[sub].c.Open(ctx, s.spec(sub, nil, false))
		if err != nil {
			t.Fatalf("open subtask %d on n%d: %v", sub, sub, err)
		}
		s.tasks = append(s.tasks, &task{sub: sub, node: sub, in: in, model: map[string]string{}})
	}
	for range 3 {
		s.round(-1, nil, false)
	}
	for c := range *cyclesFlag {
		for _, sc := range scenarios {
			if !strings.Contains(sc.name, *onlyFlag) {
				continue
			}
			s.run(c, sc)
		}
	}
	s.final()
	s.report()
}

func (s *suite) spec(sub int, restore *client.Restore, replace bool) client.OpenSpec {
	return client.OpenSpec{Task: backend.TaskID{Job: job, Operator: "op", Subtask: sub}, MaxParallelism: 128, Parallelism: len(s.nodes),
		Backend: backend.KindLSM, States: states, Restore: restore, Replace: replace}
}

func (s *suite) taskIDs() []backend.TaskID {
	var out []backend.TaskID
	for _, tk := range s.tasks {
		out = append(out, tk.in.Task())
	}
	return out
}

// allowed lists the nodes the driver may use, starting after the last
// one it used.
func (s *suite) allowed() []int {
	var out []int
	for k := range len(s.nodes) {
		i := (s.rr + k) % len(s.nodes)
		if !s.avoided(i) {
			out = append(out, i)
		}
	}
	s.rr++
	return out
}

func (s *suite) avoided(i int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.avoid[i]
}

// leader is the leader every node agrees on, or -1.
func (s *suite) agreedLeader() (int, uint64) {
	var lead string
	var term uint64
	for i, nd := range s.nodes {
		st := nd.status()
		if st.Err != "" || st.Leader == "" || time.Since(st.at()) > time.Second {
			return -1, 0
		}
		if i == 0 {
			lead, term = st.Leader, st.Term
		} else if st.Leader != lead || st.Term != term {
			return -1, 0
		}
	}
	var l int
	if _, err := fmt.Sscanf(lead, "n%d", &l); err != nil {
		return -1, 0
	}
	return l, term
}

func (s *suite) stableLeader(timeout time.Duration) (int, uint64) {
	s.t.Helper()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if l, term := s.agreedLeader(); l >= 0 {
			return l, term
		}
	}
	var views []string
	for _, nd := range s.nodes {
		views = append(views, fmt.Sprintf("n%d %+v", nd.i, nd.status()))
	}
	s.t.Fatalf("the nodes never agreed on a leader within %v: %s", timeout, strings.Join(views, "; "))
	return -1, 0
}

// round runs one checkpoint of the job: a write in every task, every
// task's snapshot, and a completion through via (or, -1, the next allowed
// node). hook runs as the completion is sent. strict: the completion must
// succeed through via itself. It returns the checkpoint's id and whether
// its completion was acknowledged.
func (s *suite) round(via int, hook func(), strict bool) (uint64, bool) {
	s.t.Helper()
	s.failOver()
	s.nextID++
	id := s.nextID
	for _, tk := range s.tasks {
		ctx, cancel := context.WithTimeout(s.t.Context(), 30*time.Second)
		k, v := tk.key(int(id)), fmt.Sprintf("c%d.s%d", id, tk.sub)
		if _, err := tk.in.Put("v", []byte(k), nil, []byte(v)).Wait(ctx); err != nil {
			cancel()
			s.t.Fatalf("checkpoint %d: put into subtask %d on n%d: %v", id, tk.sub, tk.node, err)
		}
		tk.model[k] = v
		_, err := tk.in.Snapshot(ctx, id, true)
		cancel()
		if err != nil {
			// Not fatal: the cut may have come during the snapshot.
			s.t.Logf("checkpoint %d abandoned: snapshot of subtask %d on n%d: %v", id, tk.sub, tk.node, err)
			return id, false
		}
		if s.modelAt[id] == nil {
			s.modelAt[id] = map[int]map[string]string{}
		}
		s.modelAt[id][tk.sub] = maps.Clone(tk.model)
	}
	tasks := s.taskIDs()
	s.tried[id] = true
	var errs []string
	for attempt, deadline := 0, time.Now().Add(60*time.Second); time.Now().Before(deadline); attempt++ {
		n := via
		if n < 0 || (!strict && attempt > 0) {
			n = s.allowed()[0]
		}
		if attempt == 0 && hook != nil {
			hook()
		}
		// An engine gives up on a node that does not answer and retries
		// through another: a cut-off node holds a call until its deadline.
		ctx, cancel := context.WithTimeout(s.t.Context(), 5*time.Second)
		info, err := s.nodes[n].c.CompleteCheckpoint(ctx, job, id, tasks...)
		cancel()
		if err == nil {
			if info.GetCheckpointId() != id {
				s.t.Fatalf("completion of %d through n%d answered checkpoint %d", id, n, info.GetCheckpointId())
			}
			s.acked[id] = true
			s.maxAcked = max(s.maxAcked, id)
			if len(errs) > 0 {
				s.t.Logf("checkpoint %d completed through n%d after %d failed attempts: %s", id, n, len(errs), strings.Join(errs, "; "))
			}
			return id, true
		}
		errs = append(errs, fmt.Sprintf("n%d: %v", n, err))
		if strict && attempt == 2 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.dump(via)
	s.t.Fatalf("checkpoint %d never completed (strict %v): %s", id, strict, strings.Join(errs, "; "))
	return id, false
}

// dump makes node i and the leader print their goroutines into their
// logs (SIGQUIT: the Go runtime prints every goroutine and exits), for a
// call that hung.
func (s *suite) dump(i int) {
	l, _ := s.agreedLeader()
	for _, nd := range s.nodes {
		if nd.i == i || nd.i == l {
			_ = nd.cmd.Process.Signal(syscall.SIGQUIT)
		}
	}
	time.Sleep(time.Second)
}

// failOver moves every task off the nodes the driver avoids, as an engine
// restarts the tasks of a lost host elsewhere: restored from the latest
// checkpoint, which must not be older than the newest acknowledged
// completion. The old instances stay open on their node: zombies.
func (s *suite) failOver() {
	for _, tk := range s.tasks {
		if !s.avoided(tk.node) {
			continue
		}
		s.zombies = append(s.zombies, zombie{tk.node, tk.in})
		counts := make([]int, len(s.nodes))
		for _, o := range s.tasks {
			counts[o.node]++
		}
		to := -1
		for _, n := range s.allowed() {
			if to < 0 || counts[n] < counts[to] {
				to = n
			}
		}
		s.move(tk, to)
	}
}

// move reopens tk on node to, restored from the latest checkpoint, and
// checks the restored state against the model.
func (s *suite) move(tk *task, to int) {
	s.t.Helper()
	before := s.maxAcked
	ctx, cancel := context.WithTimeout(s.t.Context(), 60*time.Second)
	defer cancel()
	in, err := s.nodes[to].c.Open(ctx, s.spec(tk.sub, &client.Restore{Latest: true}, false))
	if err != nil {
		s.dump(to)
		s.t.Fatalf("reopen subtask %d on n%d (restore latest): %v", tk.sub, to, err)
	}
	got := in.RestoredCheckpoint()
	if got < before {
		s.t.Fatalf("ACKNOWLEDGED COMPLETION LOST: subtask %d restored checkpoint %d on n%d, but checkpoint %d was acknowledged before", tk.sub, got, to, before)
	}
	m, ok := s.modelAt[got][tk.sub]
	if !ok {
		s.t.Fatalf("subtask %d restored checkpoint %d, which it never snapshotted", tk.sub, got)
	}
	s.t.Logf("subtask %d moved n%d -> n%d, restored checkpoint %d (newest acknowledged %d)", tk.sub, tk.node, to, got, before)
	tk.in, tk.node, tk.model = in, to, maps.Clone(m)
	s.checkState(ctx, tk.in, tk, m, got)
}

// checkState reads every key of want from in, and the keys the next
// checkpoints wrote, which must be absent.
func (s *suite) checkState(ctx context.Context, in *client.Instance, tk *task, want map[string]string, id uint64) {
	s.t.Helper()
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	for n := int(id) + 1; n <= int(id)+3; n++ {
		if k := tk.key(n); want[k] == "" {
			keys = append(keys, k)
		}
	}
	futs := make([]client.Future[client.Value], len(keys))
	for i, k := range keys {
		futs[i] = in.Get("v", []byte(k), nil)
	}
	in.Flush()
	for i, f := range futs {
		v, err := f.Wait(ctx)
		if err != nil {
			s.t.Fatalf("subtask %d at checkpoint %d: get %s: %v", tk.sub, id, keys[i], err)
		}
		w, ok := want[keys[i]]
		if v.Found != ok || string(v.Data) != w {
			s.t.Fatalf("subtask %d at checkpoint %d: key %s = %q (found %v), want %q (found %v)", tk.sub, id, keys[i], v.Data, v.Found, w, ok)
		}
	}
}

// probeRound snapshots a fresh checkpoint of the probe job (one task, on
// a node the driver may use) and asks each node of via to complete it.
// refused: each must fail (a minority node), and is counted; otherwise
// each must succeed (the control, before the cut).
func (s *suite) probeRound(via []int, refused bool, fig *figure) {
	s.t.Helper()
	ctx := s.t.Context()
	task := backend.TaskID{Job: probeJob, Operator: "op"}
	for _, n := range via {
		if s.probe == nil || s.avoided(s.probeNode) {
			s.probeNode = s.allowed()[0]
			octx, cancel := context.WithTimeout(ctx, 60*time.Second)
			in, err := s.nodes[s.probeNode].c.Open(octx, client.OpenSpec{Task: task, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127},
				Backend: backend.KindFile, States: states, Replace: true})
			cancel()
			if err != nil {
				s.t.Fatalf("open the probe task on n%d: %v", s.probeNode, err)
			}
			s.probe = in
		}
		s.probeID++
		id := s.probeID
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := s.probe.Put("v", []byte("p"), nil, fmt.Appendf(nil, "%d", id)).Wait(sctx)
		if err == nil {
			_, err = s.probe.Snapshot(sctx, id, true)
		}
		cancel()
		if err != nil {
			s.t.Fatalf("probe checkpoint %d on n%d: %v", id, s.probeNode, err)
		}
		if !refused {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, err := s.nodes[n].c.CompleteCheckpoint(cctx, probeJob, id, task)
			cancel()
			if err != nil {
				s.t.Fatalf("control: probe checkpoint %d through n%d before the cut: %v", id, n, err)
			}
			continue
		}
		s.refused = append(s.refused, id)
		t0 := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err = s.nodes[n].c.CompleteCheckpoint(cctx, probeJob, id, task)
		cancel()
		if err == nil {
			s.t.Fatalf("THE CUT-OFF SIDE MADE PROGRESS: n%d completed probe checkpoint %d", n, id)
		}
		fig.refused++
		fig.refusedIn = append(fig.refusedIn, time.Since(t0))
		s.t.Logf("n%d (cut off) refused probe checkpoint %d after %v: %s", n, id, time.Since(t0).Round(time.Millisecond), status.Code(err))
	}
}

// waitLeader waits until a node outside avoid leads in a term after
// term, in its own view, and returns when that was seen.
func (s *suite) waitLeader(t0 time.Time, term uint64, avoid map[int]bool, timeout time.Duration) time.Time {
	s.t.Helper()
	next := time.Now().Add(2 * time.Second)
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var first time.Time
		for _, nd := range s.nodes {
			if at, ok := nd.ledAfter(t0, term); ok && !avoid[nd.i] && (first.IsZero() || at.Before(first)) {
				first = at
			}
		}
		if !first.IsZero() {
			return first
		}
		if time.Now().After(next) {
			next = time.Now().Add(2 * time.Second)
			var views []string
			for _, nd := range s.nodes {
				st := nd.status()
				views = append(views, fmt.Sprintf("n%d %s term %d leader %q (%v old) %s", nd.i, st.State, st.Term, st.Leader, time.Since(st.at()).Round(time.Millisecond), st.Err))
			}
			s.t.Logf("%v after the cut, no new leader seen yet: %s", time.Since(t0).Round(time.Millisecond), strings.Join(views, "; "))
		}
	}
	s.t.Fatalf("no node outside the cut side led within %v of the cut", timeout)
	return time.Time{}
}

// run runs one scenario: a few rounds, the cut (at its trigger), rounds
// on the side that may go on while the cut side is probed, the heal, and
// the checks.
func (s *suite) run(cycle int, sc scenario) {
	n := len(s.nodes)
	fig := figure{name: sc.name}
	l, term := s.stableLeader(30 * time.Second)
	s.t.Logf("=== cycle %d: %s (leader n%d, term %d)", cycle, sc.name, l, term)
	for range 2 {
		s.round(-1, nil, false)
	}
	// The cut side's nodes complete a probe checkpoint before the cut:
	// what they refuse after it, they refuse because of it.
	var minority, avoid []int
	var t0 time.Time
	cutErr := make(chan error, 1)
	cut := func() {
		t0 = time.Now()
		var err error
		minority, avoid, err = sc.cut(s.nw, l, n)
		s.mu.Lock()
		for _, i := range avoid {
			s.avoid[i] = true
		}
		s.mu.Unlock()
		cutErr <- err
	}
	s.probeRound(prospectiveMinority(sc, l, n), false, &fig)
	switch sc.trigger {
	case "completion":
		done := make(chan struct{})
		delay := time.Duration(s.rng.IntN(15)) * time.Millisecond
		s.round(l, func() {
			go func() {
				defer close(done)
				time.Sleep(delay)
				cut()
			}()
		}, false)
		<-done
	case "delete":
		s.round(l, nil, false)
		time.Sleep(time.Duration(s.rng.IntN(150)) * time.Millisecond)
		cut()
	default:
		cut()
	}
	if err := <-cutErr; err != nil {
		s.t.Fatal(err)
	}
	s.t.Logf("cut at %s: minority %v, avoided %v", t0.Format("15:04:05.000"), minority, avoid)
	acked := 0
	for time.Since(t0) < 2*time.Second || acked == 0 {
		if time.Since(t0) > 90*time.Second {
			s.t.Fatalf("no completion acknowledged within 90 s of the cut")
		}
		if _, ok := s.round(-1, nil, false); ok {
			acked++
			if acked == 1 {
				fig.firstComplete = time.Since(t0)
			}
		}
	}
	if sc.newLeader {
		cutSide := map[int]bool{}
		for _, i := range avoid {
			cutSide[i] = true
		}
		fig.newLeader = s.waitLeader(t0, term, cutSide, 30*time.Second).Sub(t0)
	}
	s.probeRound(minority, true, &fig)
	isolate := *isolateFlag
	if testing.Short() {
		isolate = time.Second
	}
	for end := time.Now().Add(isolate); time.Now().Before(end); {
		s.round(-1, nil, false)
	}
	if !testing.Short() {
		s.probeRound(minority, true, &fig) // once more, after the cut side had time to try
	}
	s.logMinorityReads(minority)

	// Heal, and wait for every node to agree.
	var commit uint64
	for _, nd := range s.nodes {
		if !s.avoided(nd.i) {
			commit = max(commit, nd.status().Commit)
		}
	}
	th := time.Now()
	if err := s.nw.heal(); err != nil {
		s.t.Fatal(err)
	}
	fig.converge = s.converge(th, commit)
	s.t.Logf("healed; converged after %v", fig.converge.Round(time.Millisecond))
	s.mu.Lock()
	clear(s.avoid)
	s.mu.Unlock()
	s.checkCatalog()
	s.fenceZombies()
	s.rebalance()
	for i := range n {
		s.round(i, nil, true) // every node completes again
	}
	s.figs = append(s.figs, fig)
}

// prospectiveMinority is the minority a scenario's cut will make, for the
// control before it.
func prospectiveMinority(sc scenario, l, n int) []int {
	switch {
	case sc.name == "minority with the leader" && n >= 5:
		return []int{l, (l + 1) % n}
	case sc.newLeader:
		return []int{l}
	}
	return nil
}

// logMinorityReads logs what a list of the job's checkpoints through a
// cut-off node answers (a read is no progress, but an empty answer with
// OK would hide the cut from an operator).
func (s *suite) logMinorityReads(minority []int) {
	for _, n := range minority {
		ctx, cancel := context.WithTimeout(s.t.Context(), 3*time.Second)
		list, err := s.nodes[n].c.ListCheckpoints(ctx, job)
		cancel()
		if err != nil {
			s.t.Logf("list through n%d (cut off): %v", n, status.Code(err))
		} else {
			s.t.Logf("list through n%d (cut off): OK with %d checkpoints", n, len(list))
		}
	}
}

// converge waits until every node, in its own view, follows the same
// leader in the same term and has applied at least commit (what the side
// that went on had committed at the heal), and every node answers the
// same list of the job's checkpoints; it returns the time from th.
func (s *suite) converge(th time.Time, commit uint64) time.Duration {
	s.t.Helper()
	deadline := th.Add(60 * time.Second)
	var raftAt time.Time
	for ; time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ok := true
		var lead string
		var term uint64
		raftAt = th
		for i, nd := range s.nodes {
			st := nd.status()
			if !st.at().After(th) || st.Err != "" || st.Leader == "" || st.Applied < commit || (i > 0 && (st.Leader != lead || st.Term != term)) {
				ok = false
				break
			}
			lead, term = st.Leader, st.Term
			raftAt = maxTime(raftAt, st.at())
		}
		if ok {
			break
		}
	}
	if !time.Now().Before(deadline) {
		var views []string
		for _, nd := range s.nodes {
			views = append(views, fmt.Sprintf("n%d %+v", nd.i, nd.status()))
		}
		s.t.Fatalf("THE HEALED CLUSTER DID NOT CONVERGE within 60 s (applied >= %d wanted): %s", commit, strings.Join(views, "; "))
	}
	for ; time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		lists, err := s.lists()
		if err == nil && allEqual(lists) {
			return maxTime(raftAt, time.Now()).Sub(th)
		}
	}
	lists, err := s.lists()
	s.t.Fatalf("THE HEALED CLUSTER DID NOT CONVERGE: the nodes list different checkpoints (%v): %v", err, lists)
	return 0
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// lists is the job's checkpoints as each node lists them (id, state,
// retained).
func (s *suite) lists() ([]string, error) {
	var out []string
	for _, nd := range s.nodes {
		ctx, cancel := context.WithTimeout(s.t.Context(), 5*time.Second)
		list, err := nd.c.ListCheckpoints(ctx, job)
		cancel()
		if err != nil {
			return out, fmt.Errorf("n%d: %w", nd.i, err)
		}
		var b strings.Builder
		for _, c := range list {
			fmt.Fprintf(&b, "%d:%s:%v ", c.GetCheckpointId(), c.GetState(), c.GetRetained())
		}
		out = append(out, b.String())
	}
	return out, nil
}

func allEqual(l []string) bool {
	for _, x := range l {
		if x != l[0] {
			return false
		}
	}
	return len(l) > 0
}

// checkCatalog checks the job's checkpoints as the healed cluster lists
// them: every acknowledged completion the history still holds is listed
// completed, nothing is completed that was not asked to be, every
// retained checkpoint's files are all there with their checksums (stated
// verify), and no probe checkpoint a cut-off node was asked for completed
// or left a manifest.
func (s *suite) checkCatalog() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.t.Context(), 30*time.Second)
	defer cancel()
	list, err := s.nodes[0].c.ListCheckpoints(ctx, job)
	if err != nil {
		s.t.Fatalf("list: %v", err)
	}
	completed := map[uint64]bool{}
	var retained []uint64
	oldest := uint64(1<<63 - 1)
	for _, c := range list {
		id := c.GetCheckpointId()
		oldest = min(oldest, id)
		if c.GetState() == pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
			completed[id] = true
			if !s.tried[id] {
				s.t.Fatalf("checkpoint %d is completed, but no completion of it was ever asked for", id)
			}
		}
		if c.GetRetained() {
			retained = append(retained, id)
		}
	}
	for id := range s.acked {
		if id >= oldest && !completed[id] {
			s.t.Fatalf("ACKNOWLEDGED COMPLETION LOST: checkpoint %d was acknowledged, the list says %v", id, list)
		}
	}
	if len(retained) == 0 || !slices.Contains(retained, s.maxAcked) {
		s.t.Fatalf("the newest acknowledged checkpoint %d is not retained: retained %v", s.maxAcked, retained)
	}
	for _, id := range retained {
		out, err := exec.CommandContext(ctx, binary, "verify", "--checkpoint-store", "file://"+s.store, catalog.CheckpointDir(job, id)).CombinedOutput()
		if err != nil {
			s.t.Fatalf("REFERENCED FILE DAMAGED: stated verify of retained checkpoint %d: %v\n%s", id, err, out)
		}
	}
	plist, err := s.nodes[0].c.ListCheckpoints(ctx, probeJob)
	if err != nil {
		s.t.Fatalf("list the probe job: %v", err)
	}
	st, err := localfs.OpenWith(s.store, localfs.Options{ReadOnly: true})
	if err != nil {
		s.t.Fatal(err)
	}
	defer st.Close()
	for _, id := range s.refused {
		for _, c := range plist {
			if c.GetCheckpointId() == id && c.GetState() == pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
				s.t.Fatalf("THE CUT-OFF SIDE MADE PROGRESS: probe checkpoint %d, refused by a cut-off node, is completed", id)
			}
		}
		name := catalog.CheckpointDir(probeJob, id) + "/" + catalog.ManifestName
		if _, err := st.Stat(ctx, name); !errors.Is(err, tiered.ErrNotFound) {
			s.t.Fatalf("THE CUT-OFF SIDE MADE PROGRESS: %s of a refused completion: %v (want not found)", name, err)
		}
	}
	s.t.Logf("catalog: %d checkpoints listed, retained %v (all verified), %d acknowledged so far, %d refused probes absent",
		len(list), retained, len(s.acked), len(s.refused))
}

// fenceZombies checks that the instances left on the healed nodes can no
// longer snapshot, and closes them.
func (s *suite) fenceZombies() {
	s.t.Helper()
	for _, z := range s.zombies {
		s.nextID++ // an id no live task uses: it must never complete
		ctx, cancel := context.WithTimeout(s.t.Context(), 30*time.Second)
		_, err := z.in.Snapshot(ctx, s.nextID, true)
		if err == nil {
			cancel()
			s.t.Fatalf("FENCING: the zombie of %s on n%d snapshotted checkpoint %d after the heal", z.in.Task(), z.node, s.nextID)
		}
		s.t.Logf("zombie of %s on n%d refused: %s", z.in.Task(), z.node, firstLine(err))
		_ = z.in.Close(ctx)
		cancel()
	}
	s.zombies = nil
}

func firstLine(err error) string {
	msg := err.Error()
	if len(msg) > 160 {
		msg = msg[:160] + "..."
	}
	return msg
}

// rebalance gives every node that holds no task one again (restored from
// the latest checkpoint), so that the next cut takes tasks with it.
func (s *suite) rebalance() {
	for i := range s.nodes {
		counts := make([]int, len(s.nodes))
		for _, tk := range s.tasks {
			counts[tk.node]++
		}
		if counts[i] > 0 {
			continue
		}
		from := slices.Index(counts, slices.Max(counts))
		for _, tk := range s.tasks {
			if tk.node == from {
				old := tk.in
				s.move(tk, i)
				ctx, cancel := context.WithTimeout(s.t.Context(), 10*time.Second)
				_ = old.Close(ctx)
				cancel()
				break
			}
		}
	}
}

// final checks every live task's state, then restores every retained
// checkpoint of every subtask and checks it against what was snapshotted.
func (s *suite) final() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.t.Context(), 2*time.Minute)
	defer cancel()
	for _, tk := range s.tasks {
		s.checkState(ctx, tk.in, tk, tk.model, s.nextID)
	}
	s.checkCatalog()
	list, err := s.nodes[0].c.ListCheckpoints(ctx, job)
	if err != nil {
		s.t.Fatal(err)
	}
	restored := 0
	for _, c := range list {
		if !c.GetRetained() {
			continue
		}
		id := c.GetCheckpointId()
		for _, tk := range s.tasks {
			in, err := s.nodes[tk.node].c.Open(ctx, s.spec(tk.sub, &client.Restore{CheckpointID: id, NoClaim: true}, true))
			if err != nil {
				s.t.Fatalf("REFERENCED FILE DELETED? restore subtask %d from retained checkpoint %d: %v", tk.sub, id, err)
			}
			s.checkState(ctx, in, tk, s.modelAt[id][tk.sub], id)
			restored++
		}
	}
	s.t.Logf("final: every live task holds its model; %d restores of retained checkpoints match what was snapshotted", restored)
}

// report prints the figures.
func (s *suite) report() {
	var b strings.Builder
	fmt.Fprintf(&b, "partition suite figures (%d nodes, %d acknowledged completions):\n", len(s.nodes), len(s.acked))
	fmt.Fprintf(&b, "%-34s %12s %16s %8s %22s %10s\n", "scenario", "new leader", "next completion", "refused", "refusal took", "converge")
	for _, f := range s.figs {
		nl := "-"
		if f.newLeader > 0 {
			nl = f.newLeader.Round(time.Millisecond).String()
		}
		var took []string
		for _, d := range f.refusedIn {
			took = append(took, d.Round(10*time.Millisecond).String())
		}
		fmt.Fprintf(&b, "%-34s %12s %16s %8d %22s %10s\n", f.name, nl, f.firstComplete.Round(time.Millisecond), f.refused,
			strings.Join(slices.Compact(took), ","), f.converge.Round(time.Millisecond))
	}
	s.t.Log("\n" + b.String())
}
