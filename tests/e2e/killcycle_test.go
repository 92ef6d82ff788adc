package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
)

// killCycles is how many kill/restart cycles TestClusterKillCycles runs:
// STATED_KILL_CYCLES, or 20 (6 in a race build, whose driver is slower;
// 5 with -short).
// The long run (docs/cluster.md):
//
//	STATED_KILL_CYCLES=200 go test -count=1 -timeout 60m -run TestClusterKillCycles -v ./tests/e2e/
func killCycles(t *testing.T) int {
	if s := os.Getenv("STATED_KILL_CYCLES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("STATED_KILL_CYCLES=%q: want a positive number", s)
		}
		return n
	}
	if testing.Short() {
		return 5
	}
	if raceBuild {
		return 6
	}
	return 20
}

// TestClusterKillCycles: three "stated serve" cluster nodes, a writer
// that keeps opening and closing tasks through every node (each open and
// close a raft command), and kill -9 of the leader at a random moment,
// often while it holds entries the others have not stored; the killed
// node is restarted at once on its raft dir. Every restart must serve (a
// node whose log's tail was truncated at the start before never started
// again on raft-wal), no node may die on its own, and after each cycle a
// task opens through every node: the cluster makes progress with the
// restarted node in it.
func TestClusterKillCycles(t *testing.T) {
	cycles := killCycles(t)
	const token = "e2e-kill-cycles"
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("STATED_KILL_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (STATED_KILL_SEED), %d cycles", seed, cycles)
	rng := rand.New(rand.NewPCG(seed, 38))

	raft := freeAddrs(t, 3)
	var peers []string
	for i, a := range raft {
		peers = append(peers, fmt.Sprintf("n%d=%s", i, a))
	}
	shared := "file://" + filepath.Join(t.TempDir(), "shared")
	args := func(i int) []string {
		return []string{"--node-id", fmt.Sprintf("n%d", i), "--raft-addr", raft[i], "--raft-peers", strings.Join(peers, ","),
			"--cluster-token", token, "--checkpoint-store", shared}
	}
	dirs := make([]string, 3)
	procs := make([]*proc, 3)
	clients := make([]*client.Client, 3)
	var mu sync.Mutex // guards procs and clients against the writer
	for i := range 3 {
		dirs[i] = dataDir(t)
		procs[i] = start(t, dirs[i], args(i)...)
		clients[i] = procs[i].dial(client.Options{})
	}
	waitStatus(t, raft[0], token, func(out string, err error) bool { return err == nil && strings.Count(out, "  ok  ") == 3 })

	spec := func(name string) client.OpenSpec {
		return client.OpenSpec{Task: backend.TaskID{Job: "kc", Operator: name}, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127},
			Backend: backend.KindFile, States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}}
	}
	// openClose opens a task through node i and closes it.
	openClose := func(ctx context.Context, c *client.Client, name string) error {
		in, err := c.Open(ctx, spec(name))
		if err != nil {
			return err
		}
		return in.Close(ctx)
	}

	// The writers: open and close tasks through every node, all the
	// time, so that the leader is often killed holding entries the
	// others have not stored yet.
	const writers = 8
	var writes, writeErrs atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				c := clients[(w+k)%3]
				mu.Unlock()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				if err := openClose(ctx, c, fmt.Sprintf("w%d-%d", w, k%20)); err != nil {
					writeErrs.Add(1)
					time.Sleep(20 * time.Millisecond)
				} else {
					writes.Add(1)
				}
				cancel()
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()

	t0 := time.Now()
	truncations, afterTruncation := 0, 0
	var leaderGone []time.Duration
	var at atomic.Value // where a failure happened, for its report
	at.Store("before the first cycle")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("failed %v (seed %d)", at.Load(), seed)
		}
	})
	for cycle := range cycles {
		at.Store(fmt.Sprintf("in cycle %d", cycle))
		// A live node tells who leads.
		out := waitStatus(t, raft[rng.IntN(3)], token, func(out string, err error) bool { return err == nil && leaderRE.MatchString(out) })
		leader := int(leaderRE.FindStringSubmatch(out)[1][1] - '0')
		time.Sleep(time.Duration(rng.IntN(800)) * time.Millisecond)
		mu.Lock()
		for i, p := range procs {
			select {
			case <-p.done:
				mu.Unlock()
				t.Fatalf("cycle %d: n%d died on its own: %v", cycle, i, p.err)
			default:
			}
		}
		mu.Unlock()
		restart := func(i int) {
			at.Store(fmt.Sprintf("in cycle %d, restarting n%d", cycle, i))
			procs[i].kill()
			p := start(t, dirs[i], args(i)...)
			c := p.dial(client.Options{})
			mu.Lock()
			old := procs[i]
			procs[i], clients[i] = p, c
			mu.Unlock()
			old.mu.Lock()
			for _, l := range old.logs {
				if strings.Contains(l, "clearing log suffix") {
					truncations++
				}
			}
			old.mu.Unlock()
		}
		// Restarted at once, on its raft dir: it must serve.
		killed := time.Now()
		restart(leader)
		// A node that truncated its log's tail since it started is
		// killed and restarted too: on raft-wal v0.4.0 that start
		// panicked, and every one after it.
		for i := range 3 {
			if i != leader && procs[i].logged("clearing log suffix") {
				restart(i)
				afterTruncation++
			}
		}
		// Progress, through every node, the restarted one too.
		for i := range 3 {
			mu.Lock()
			c := clients[i]
			mu.Unlock()
			var err error
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err = openClose(ctx, c, fmt.Sprintf("c%d-%d", cycle, i))
				cancel()
				if err == nil {
					break
				}
			}
			if err != nil {
				t.Fatalf("cycle %d (n%d killed): no task opens through n%d within 30s: %v", cycle, leader, i, err)
			}
		}
		leaderGone = append(leaderGone, time.Since(killed))
	}
	// Truncations the last restarts logged are counted too.
	mu.Lock()
	for _, p := range procs {
		p.mu.Lock()
		for _, l := range p.logs {
			if strings.Contains(l, "clearing log suffix") {
				truncations++
			}
		}
		p.mu.Unlock()
	}
	mu.Unlock()
	var total time.Duration
	for _, d := range leaderGone {
		total += d
	}
	t.Logf("%d kill/restart cycles of the leader in %v: every restart served; %d tail truncations (\"clearing log suffix\") at restarts, %d restarts of a node after its truncation; "+
		"writer: %d opens+closes acknowledged, %d failed (during elections); mean time from a kill to a task opened through all 3 nodes %v",
		cycles, time.Since(t0).Round(time.Second), truncations, afterTruncation, writes.Load(), writeErrs.Load(), (total / time.Duration(len(leaderGone))).Round(time.Millisecond))
}

// logged reports whether the process printed a line containing s.
func (p *proc) logged(s string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.logs {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}
