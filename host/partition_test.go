package host_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/cluster"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/internal/netcut"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestPartitionedLeaderDeletesNothing: the leader is cut off just as it
// is about to delete (a DeleteCheckpoint of the checkpoint the job's next
// ones build on). Its catalog refuses (its quorum check fails, or it has
// stopped hosting); the new leader completes the next checkpoints on the
// files the old one wanted gone, and every file they reference is there.
func TestPartitionedLeaderDeletesNothing(t *testing.T) {
	store := memstore.New()
	const size = 3
	cuts := make([]*netcut.Cut, size)
	lns := make([]net.Listener, size)
	var peers []string
	for i := range size {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cuts[i] = &netcut.Cut{}
		lns[i] = cuts[i].Listener(ln)
		peers = append(peers, fmt.Sprintf("n%d=%s", i, ln.Addr()))
	}
	nodes := make([]*host.Host, size)
	for i := range size {
		nd, err := host.Open(context.Background(), host.Options{DataDir: filepath.Join(t.TempDir(), "d"), Logger: clusterLog(i), Store: store,
			NodeID: fmt.Sprintf("n%d", i), RaftAddr: lns[i].Addr().String(), RaftPeers: strings.Join(peers, ","), ClusterToken: "secret",
			TuneCluster: func(o *cluster.Options) {
				fastRaft(lns[i])(o)
				o.Dial = cuts[i].Dial
			}})
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = nd
		t.Cleanup(func() { _ = nd.Close() })
	}
	j := &clusterJob{t: t, nodes: nodes, dead: map[int]bool{}}
	l := j.leader()
	// Two lsm tasks, on the other nodes: the cut leader takes none with it.
	var ins []*daemon.Instance
	var where []int
	for i, n := 0, 0; i < 2; n++ {
		if n == l {
			continue
		}
		in, err := nodes[n].Daemon().Open(context.Background(), daemon.OpenParams{Task: backend.TaskID{Job: "job", Operator: "op", Subtask: i},
			KeyGroups: backend.KeyGroupRangeForOperator(128, 2, i), Kind: backend.KindLSM, States: valueState})
		if err != nil {
			t.Fatal(err)
		}
		ins, where = append(ins, in), append(where, n)
		i++
	}
	tasks := []backend.TaskID{ins[0].Task, ins[1].Task}
	checkpoint := func(id uint64) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for i, in := range ins {
			// Checkpoint 4 writes nothing: it must share checkpoint 3's
			// files, and a fourth flush could start a compaction that
			// rewrites them first.
			writes := 50
			if id == 4 {
				writes = 0
			}
			for k := range writes {
				key := backend.Key{KeyGroup: in.KeyGroups.Start, Key: fmt.Appendf(nil, "c%d-k%d", id, k)}
				if err := in.Backend.Put("v", key, fmt.Appendf(nil, "v%d", id)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := nodes[where[i]].Daemon().Snapshot(ctx, in, id, true); err != nil {
				t.Fatalf("snapshot %d: %v", id, err)
			}
		}
		for _, n := range where {
			for attempt := 0; ; attempt++ {
				_, err := nodes[n].Daemon().CompleteCheckpoint(ctx, "job", id, tasks)
				if err == nil {
					break
				}
				if attempt == 20 {
					t.Fatalf("complete %d through n%d: %v", id, n, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	for id := uint64(1); id <= 3; id++ {
		checkpoint(id)
	}
	cat := nodes[l].Catalog()
	if cat == nil {
		t.Fatal("the leader hosts no catalog")
	}
	m3, ok := cat.Checkpoint("job", 3)
	if !ok {
		t.Fatal("checkpoint 3 is not retained")
	}
	cuts[l].CutOff()
	// In the old leader's view, checkpoint 3's files belong to it alone:
	// deleting it would delete what checkpoint 4 builds on.
	dctx, dcancel := context.WithTimeout(context.Background(), 3*time.Second)
	err := cat.DeleteCheckpoint(dctx, "job", 3)
	dcancel()
	if err == nil {
		t.Fatal("a leader cut off from its quorum deleted a checkpoint")
	}
	t.Logf("the cut-off leader's delete: %v", err)
	j.dead[l] = true
	nl := j.leader()
	t.Logf("n%d cut off; n%d leads", l, nl)
	for id := uint64(4); id <= 5; id++ {
		checkpoint(id)
	}
	var newCat = nodes[nl].Catalog()
	for newCat == nil {
		time.Sleep(10 * time.Millisecond)
		newCat = nodes[nl].Catalog()
	}
	// Checkpoint 4 builds on checkpoint 3's files.
	shared := 0
	m4, ok := newCat.Checkpoint("job", 4)
	if !ok {
		t.Fatal("checkpoint 4 is not retained")
	}
	for _, h := range m4.Tasks {
		for _, f := range h.Files {
			if _, err := store.Stat(context.Background(), f.Path); err != nil {
				t.Fatalf("file %s of checkpoint 4: %v", f.Path, err)
			}
			for _, h3 := range m3.Tasks {
				for _, f3 := range h3.Files {
					if f3.Path == f.Path {
						shared++
					}
				}
			}
		}
	}
	if shared == 0 {
		t.Fatal("checkpoint 4 shares no file with checkpoint 3: the test proves nothing")
	}
	for _, id := range newCat.Retained("job") {
		m, _ := newCat.Checkpoint("job", id)
		for _, h := range m.Tasks {
			for _, f := range h.Files {
				if _, err := store.Stat(context.Background(), f.Path); err != nil {
					t.Fatalf("file %s of retained checkpoint %d: %v", f.Path, id, err)
				}
			}
		}
	}
	t.Logf("checkpoint 4 reuses %d files of checkpoint 3, all present", shared)
}
