package host_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/cluster"
	"github.com/statedhq/stated/tiered/memstore"
)

// catIn is one catalog operation: the completion of a checkpoint, or a
// read of the job's latest one.
type catIn struct {
	complete bool
	id       uint64
}

// catOut is its answer; unknown: the call failed, so a completion may or
// may not have taken effect.
type catOut struct {
	unknown bool
	latest  uint64 // read: the latest checkpoint (0: none)
}

// catState: cur is the latest checkpoint known completed; maybe are the
// completions whose answers were lost, above cur, sorted.
type catState struct {
	cur   uint64
	maybe string // sorted ids, comma-separated (comparable)
}

func (s catState) maybes() []uint64 {
	var out []uint64
	for _, f := range strings.Split(s.maybe, ",") {
		var id uint64
		if _, err := fmt.Sscan(f, &id); err == nil {
			out = append(out, id)
		}
	}
	return out
}

func withMaybes(cur uint64, ids []uint64) catState {
	var keep []string
	slices.Sort(ids)
	for _, id := range slices.Compact(ids) {
		if id > cur {
			keep = append(keep, fmt.Sprint(id))
		}
	}
	return catState{cur: cur, maybe: strings.Join(keep, ",")}
}

// catModel: the job's latest checkpoint is the highest one completed.
var catModel = porcupine.Model{
	Init: func() any { return catState{} },
	Step: func(s, in, out any) (bool, any) {
		st, i, o := s.(catState), in.(catIn), out.(catOut)
		if i.complete {
			if o.unknown {
				return true, withMaybes(st.cur, append(st.maybes(), i.id))
			}
			return true, withMaybes(max(st.cur, i.id), st.maybes())
		}
		if o.unknown {
			return true, st
		}
		if o.latest == st.cur {
			return true, st
		}
		// A lost completion's effect shows: it must be one of them.
		if o.latest > st.cur && slices.Contains(st.maybes(), o.latest) {
			return true, withMaybes(o.latest, st.maybes())
		}
		return false, st
	},
	Equal: func(a, b any) bool { return a.(catState) == b.(catState) },
}

// TestCatalogLinearizable: clients on every node of a 3-node cluster
// complete checkpoints and read the latest one concurrently while the
// leader is killed; porcupine finds the history linearizable against the
// model of a job's latest checkpoint.
func TestCatalogLinearizable(t *testing.T) {
	store := memstore.New()
	nodes := startNodesOn(t, store, 3, "secret")
	var (
		mu      sync.Mutex
		history []porcupine.Operation
		start   = time.Now()
		nextID  atomic.Uint64
		dead    atomic.Int64
	)
	dead.Store(-1)
	now := func() int64 { return int64(time.Since(start)) }
	record := func(client int, in catIn, out catOut, call int64) {
		ret := now()
		if out.unknown {
			ret = math.MaxInt64
		}
		mu.Lock()
		history = append(history, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
		mu.Unlock()
	}
	clients := make([]*cluster.CatalogClient, len(nodes))
	for i, nd := range nodes {
		c, err := cluster.NewCatalogClient(cluster.CatalogClientOptions{Caller: nd.Cluster(), Store: store})
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = c
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for client := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			task := backend.TaskID{Job: "job", Operator: "op", Subtask: client}
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				n := client % len(nodes)
				if int64(n) == dead.Load() {
					n = (n + 1) % len(nodes)
				}
				c := clients[n]
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				if k%2 == 1 {
					call := now()
					m, ok, err := c.LatestContext(ctx, "job")
					switch {
					case err != nil:
						record(client, catIn{}, catOut{unknown: true}, call)
					case ok:
						record(client, catIn{}, catOut{latest: m.CheckpointID}, call)
					default:
						record(client, catIn{}, catOut{}, call)
					}
					cancel()
					continue
				}
				id := nextID.Add(1)
				if err := c.BeginCheckpoint("job", id); err != nil {
					cancel()
					continue // never begun: no completion to record
				}
				name := fmt.Sprintf("%s/t%d", catalog.CheckpointDir("job", id), client)
				body := fmt.Sprint(id)
				if err := store.Put(ctx, name, strings.NewReader(body), int64(len(body))); err != nil {
					t.Error(err)
				}
				h := &backend.Handle{Version: 1, Backend: backend.KindFile, Task: task, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127},
					MaxParallelism: 128, CheckpointID: id, Files: []backend.FileRef{{Path: name, Size: int64(len(body))}}, FullSize: int64(len(body))}
				if err := c.AddTaskHandle("job", id, h); err != nil {
					cancel()
					continue
				}
				call := now()
				_, err := c.CompleteTasks(ctx, "job", id, []backend.TaskID{task})
				record(client, catIn{complete: true, id: id}, catOut{unknown: err != nil}, call)
				cancel()
			}
		}()
	}
	time.Sleep(700 * time.Millisecond)
	l := -1
	for i, nd := range nodes {
		if nd.Cluster().IsLeader() {
			l = i
		}
	}
	if l >= 0 {
		dead.Store(int64(l))
		_ = nodes[l].Cluster().Close()
	}
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()
	known, completes := 0, 0
	for _, op := range history {
		if !op.Output.(catOut).unknown {
			known++
			if op.Input.(catIn).complete {
				completes++
			}
		}
	}
	t.Logf("%d operations (%d answered, %d completions) over the death of leader n%d", len(history), known, completes, l)
	if known < 50 || completes < 10 {
		t.Fatalf("only %d answered operations, %d completions", known, completes)
	}
	if res := porcupine.CheckOperationsTimeout(catModel, history, 30*time.Second); res != porcupine.Ok {
		t.Fatalf("history not linearizable: %v", res)
	}
}

// TestCatalogModelRejectsStaleLatest: the model catches a read of an
// older latest checkpoint after a newer completion returned.
func TestCatalogModelRejectsStaleLatest(t *testing.T) {
	h := []porcupine.Operation{
		{ClientId: 0, Input: catIn{complete: true, id: 1}, Call: 0, Output: catOut{}, Return: 1},
		{ClientId: 1, Input: catIn{complete: true, id: 2}, Call: 2, Output: catOut{}, Return: 3},
		{ClientId: 0, Input: catIn{}, Call: 4, Output: catOut{latest: 1}, Return: 5},
	}
	if porcupine.CheckOperations(catModel, h) {
		t.Fatal("a stale read passed the model")
	}
	h[2].Output = catOut{latest: 2}
	if !porcupine.CheckOperations(catModel, h) {
		t.Fatal("a correct history failed the model")
	}
	// A lost completion may show later, but only one that was made.
	h = []porcupine.Operation{
		{ClientId: 0, Input: catIn{complete: true, id: 5}, Call: 0, Output: catOut{unknown: true}, Return: math.MaxInt64},
		{ClientId: 1, Input: catIn{}, Call: 2, Output: catOut{latest: 5}, Return: 3},
	}
	if !porcupine.CheckOperations(catModel, h) {
		t.Fatal("a lost completion that took effect failed the model")
	}
	h[1].Output = catOut{latest: 6}
	if porcupine.CheckOperations(catModel, h) {
		t.Fatal("a read of a checkpoint never completed passed the model")
	}
}
