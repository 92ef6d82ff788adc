package host_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/tiered/memstore"
)

// clusterJob drives one job of 6 file subtasks over the nodes of a
// cluster as an engine would: each checkpoint writes to every task, takes
// every task's snapshot, then completes through the nodes holding tasks,
// retrying a completion that failed. A model says what every task holds.
type clusterJob struct {
	t     *testing.T
	nodes []*host.Host
	dead  map[int]bool
	// where is the node of each subtask, inst its instance there.
	where []int
	inst  []*daemon.Instance
	tasks []backend.TaskID
	model []map[string]string // per subtask: key -> value
	// completed is the last completed checkpoint and the model then.
	completed uint64
	atDone    []map[string]string
	// retried counts completions that failed and succeeded on retry.
	retried int
}

const clusterSubtasks = 6

func newClusterJob(t *testing.T, nodes []*host.Host) *clusterJob {
	j := &clusterJob{t: t, nodes: nodes, dead: map[int]bool{}}
	for i := range clusterSubtasks {
		j.tasks = append(j.tasks, backend.TaskID{Job: "job", Operator: "op", Subtask: i})
		j.model = append(j.model, map[string]string{})
		j.where = append(j.where, i%len(nodes))
		j.inst = append(j.inst, j.open(i, nil))
	}
	return j
}

func (j *clusterJob) kg(i int) backend.KeyGroupRange {
	return backend.KeyGroupRangeForOperator(128, clusterSubtasks, i)
}

func (j *clusterJob) open(i int, restore *daemon.RestoreSpec) *daemon.Instance {
	j.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in, err := j.nodes[j.where[i]].Daemon().Open(ctx, daemon.OpenParams{Task: j.tasks[i], KeyGroups: j.kg(i),
		Kind: backend.KindFile, States: valueState, Restore: restore})
	if err != nil {
		j.t.Fatalf("open %s on n%d: %v", j.tasks[i], j.where[i], err)
	}
	return in
}

// round writes to every task and snapshots checkpoint id everywhere
// (waiting for the uploads, so every handle is reported).
func (j *clusterJob) round(id uint64) {
	j.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, clusterSubtasks)
	for i, in := range j.inst {
		k, v := fmt.Sprintf("k%d", id%16), fmt.Sprintf("v%d.%d", id, i)
		if err := in.Backend.Put("v", backend.Key{KeyGroup: j.kg(i).Start, Key: []byte(k)}, []byte(v)); err != nil {
			j.t.Fatal(err)
		}
		j.model[i][k] = v
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = j.nodes[j.where[i]].Daemon().Snapshot(ctx, in, id, true)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			j.t.Fatalf("snapshot %d of %s on n%d: %v", id, j.tasks[i], j.where[i], err)
		}
	}
}

// holders are the live nodes that hold a task.
func (j *clusterJob) holders() []int {
	var out []int
	for _, n := range j.where {
		if !j.dead[n] && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// complete completes id through every node holding a task, retrying
// each failed completion until it succeeds (the property under test:
// every failure is followed by a retry that succeeds).
func (j *clusterJob) complete(id uint64, during func()) {
	j.t.Helper()
	var once sync.Once
	for _, n := range j.holders() {
		deadline := time.Now().Add(60 * time.Second)
		for attempt := 0; !j.dead[n]; attempt++ {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			errc := make(chan error, 1)
			go func() {
				_, err := j.nodes[n].Daemon().CompleteCheckpoint(ctx, "job", id, j.tasks)
				errc <- err
			}()
			if during != nil {
				once.Do(during) // the leader dies while the completion runs
			}
			err := <-errc
			cancel()
			if j.dead[n] {
				break // it died with its tasks: the others complete
			}
			if err == nil {
				if attempt > 0 {
					j.retried++
				}
				break
			}
			if time.Now().After(deadline) {
				j.t.Fatalf("completion %d through n%d still fails after %d attempts: %v", id, n, attempt+1, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	j.completed = id
	j.atDone = make([]map[string]string, clusterSubtasks)
	for i := range j.model {
		j.atDone[i] = maps.Clone(j.model[i])
	}
}

// check reads every task's state and compares it with want.
func (j *clusterJob) check(i int, in *daemon.Instance, want map[string]string) {
	j.t.Helper()
	for k, v := range want {
		got, ok, err := in.Backend.Get("v", backend.Key{KeyGroup: j.kg(i).Start, Key: []byte(k)})
		if err != nil || !ok || string(got) != v {
			j.t.Fatalf("%s key %s: %q (found %v, %v), want %q", j.tasks[i], k, got, ok, err, v)
		}
	}
}

// killLeader stops the leader's raft member abruptly: the node is gone
// for the cluster, and its tasks with it. It returns the leader's index.
func (j *clusterJob) leader() int {
	j.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for i, nd := range j.nodes {
			if !j.dead[i] && nd.Cluster().IsLeader() {
				return i
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	j.t.Fatal("no leader")
	return -1
}

// failover reopens the dead node's tasks on live nodes, restoring the
// latest checkpoint, which must be the last one completed.
func (j *clusterJob) failover(rng *rand.Rand) {
	j.t.Helper()
	var live []int
	for i := range j.nodes {
		if !j.dead[i] {
			live = append(live, i)
		}
	}
	for i := range j.where {
		if !j.dead[j.where[i]] {
			continue
		}
		j.where[i] = live[rng.IntN(len(live))]
		in := j.open(i, &daemon.RestoreSpec{Latest: true})
		if in.RestoredFrom != j.completed {
			j.t.Fatalf("%s restored checkpoint %d on n%d, want the last completed %d", j.tasks[i], in.RestoredFrom, j.where[i], j.completed)
		}
		j.check(i, in, j.atDone[i])
		j.model[i] = maps.Clone(j.atDone[i])
		j.inst[i] = in
	}
}

// TestClusterCheckpointsThroughLeaderDeaths: 3 and 5 nodes on 127.0.0.1
// (real TCP raft), one shared store, a job of 6 subtasks spread over
// them, 100 checkpoints; the leader is killed while completions run, as
// often as a quorum survives. No completed checkpoint is lost (the dead
// node's tasks restore exactly the last completed one on other nodes),
// every failed completion succeeds on retry, no file a retained
// checkpoint references is deleted, and at the end every task restores
// the model.
func TestClusterCheckpointsThroughLeaderDeaths(t *testing.T) {
	for _, size := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d-nodes", size), func(t *testing.T) {
			clusterJobThroughLeaderDeaths(t, size, 100, nil)
		})
	}
}

// clusterJobThroughLeaderDeaths is TestClusterCheckpointsThroughLeaderDeaths
// with size nodes, rounds checkpoints and the nodes' options tuned by
// tune (nil: as they are). It returns the shared store and the nodes.
func clusterJobThroughLeaderDeaths(t *testing.T, size int, rounds uint64, tune func(int, *host.Options)) (*memstore.Store, []*host.Host, *clusterJob) {
	store := memstore.New()
	nodes := startNodesWith(t, store, size, "secret", tune)
	j := newClusterJob(t, nodes)
	rng := rand.New(rand.NewPCG(uint64(size), 7))
	kills := (size - 1) / 2
	killAt := map[uint64]bool{}
	for k := 1; k <= kills; k++ {
		killAt[uint64(k)*rounds/uint64(kills+1)] = true
	}
	var tRound, tComplete time.Duration
	for id := uint64(1); id <= rounds; id++ {
		t0 := time.Now()
		j.round(id)
		tRound += time.Since(t0)
		if !killAt[id] {
			t0 = time.Now()
			j.complete(id, nil)
			tComplete += time.Since(t0)
			continue
		}
		l := j.leader()
		t0 = time.Now()
		j.complete(id, func() {
			time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
			_ = nodes[l].Cluster().Close()
			j.dead[l] = true
		})
		t.Logf("leader n%d killed during completion %d, which took %v; %d completions needed a retry so far", l, id, time.Since(t0), j.retried)
		j.failover(rng)
	}
	for i, in := range j.inst {
		j.check(i, in, j.model[i])
	}
	// Every file of every retained checkpoint is still there.
	l := j.leader()
	cat := nodes[l].Catalog()
	for cat == nil {
		time.Sleep(10 * time.Millisecond)
		cat = nodes[l].Catalog()
	}
	retained := cat.Retained("job")
	if len(retained) == 0 || retained[len(retained)-1] != rounds {
		t.Fatalf("retained %v, want the last %d among them", retained, rounds)
	}
	for _, id := range retained {
		m, ok := cat.Checkpoint("job", id)
		if !ok {
			t.Fatalf("retained checkpoint %d has no manifest", id)
		}
		files := backend.PackedStore(store, m.Tasks) // packed files: in their packs
		for _, h := range m.Tasks {
			for _, f := range h.Files {
				if _, err := files.Stat(context.Background(), f.Path); err != nil {
					t.Fatalf("file %s of retained checkpoint %d: %v", f.Path, id, err)
				}
			}
			if h.Log != nil {
				for _, seg := range h.Log.Segments {
					if _, err := store.Stat(context.Background(), seg); err != nil {
						t.Fatalf("log segment %s of retained checkpoint %d: %v", seg, id, err)
					}
				}
			}
		}
		if _, err := store.Stat(context.Background(), catalog.CheckpointManifest("job", id)); err != nil {
			t.Fatalf("manifest of retained checkpoint %d: %v", id, err)
		}
	}
	// The whole job restores the model, each task on another node.
	var live []int
	for n := range nodes {
		if !j.dead[n] {
			live = append(live, n)
		}
	}
	for i, in := range j.inst {
		if err := nodes[j.where[i]].Daemon().CloseInstance(in.ID, "job"); err != nil {
			t.Fatal(err)
		}
		j.where[i] = live[(slices.Index(live, j.where[i])+1)%len(live)]
		moved := j.open(i, &daemon.RestoreSpec{Latest: true})
		if moved.RestoredFrom != rounds {
			t.Fatalf("%s restored %d, want %d", j.tasks[i], moved.RestoredFrom, rounds)
		}
		j.check(i, moved, j.model[i])
	}
	t.Logf("%d nodes: %d completions, %d leader kills, %d completions needed a retry; snapshots %v, completions %v",
		size, rounds, kills, j.retried, tRound, tComplete)
	return store, nodes, j
}
