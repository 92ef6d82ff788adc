package daemon_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/tiered/memstore"
)

// clJob is one job of the property test: one instance in changelog mode,
// the model of its state, and the model at each completed checkpoint.
type clJob struct {
	name  string
	kind  backend.Kind
	in    *daemon.Instance
	model map[string]string
	snaps map[uint64]map[string]string
	next  uint64
	last  uint64 // last completed checkpoint
}

// TestChangelogLifecycleProperty: random writes, checkpoints (completed
// or aborted), materializations, restores and instance closes over two
// jobs sharing the daemon's log give state equal to a model; no segment a
// retained checkpoint references is ever missing; every segment in the
// store is referenced or held by the live log; and once every instance is
// closed, only the segments retained checkpoints reference are left.
func TestChangelogLifecycleProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		store := memstore.New()
		e := newEnvOn(t, store, func(o *host.Options) { o.Retain = 2; o.MaterializeInterval = time.Hour })
		ctx := context.Background()
		defer e.node.Close() // now, not at the end of the test: one node per run
		jobs := []*clJob{
			{name: "a", kind: backend.KindFile},
			{name: "b", kind: rapid.SampledFrom([]backend.Kind{backend.KindHeap, backend.KindFile, backend.KindLSM}).Draw(rt, "kind of b")},
		}
		open := func(j *clJob, restore bool) {
			var r *daemon.RestoreSpec
			if restore && j.last > 0 {
				r = &daemon.RestoreSpec{Latest: true}
			}
			in, err := e.d.Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: j.name, Operator: "op", Subtask: 0},
				KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, Kind: j.kind, States: valueState,
				Changelog: daemon.ChangelogOn, Restore: r, Replace: true})
			if err != nil {
				rt.Fatalf("open %s: %v", j.name, err)
			}
			j.in = in
			j.model = map[string]string{}
			if r != nil {
				j.model = maps.Clone(j.snaps[j.last])
			}
		}
		for _, j := range jobs {
			j.snaps = map[uint64]map[string]string{}
			j.next = 1
			open(j, false)
		}
		check := func(j *clJob) {
			for k, v := range j.model {
				got, ok, err := j.in.Backend.Get("v", backend.Key{KeyGroup: int(k[0]) % 128, Key: []byte(k)})
				if err != nil || !ok || string(got) != v {
					rt.Fatalf("%s: key %q = %q %v %v, want %q", j.name, k, got, ok, err, v)
				}
			}
		}
		rt.Repeat(map[string]func(*rapid.T){
			"write": func(rt *rapid.T) {
				j := rapid.SampledFrom(jobs).Draw(rt, "job")
				n := rapid.IntRange(1, 20).Draw(rt, "n")
				for range n {
					k := fmt.Sprintf("%c%d", 'a'+rapid.IntRange(0, 5).Draw(rt, "key"), rapid.IntRange(0, 9).Draw(rt, "k2"))
					v := fmt.Sprint(rapid.Uint32().Draw(rt, "value"))
					if err := j.in.Backend.Put("v", backend.Key{KeyGroup: int(k[0]) % 128, Key: []byte(k)}, []byte(v)); err != nil {
						rt.Fatal(err)
					}
					j.model[k] = v
				}
			},
			"checkpoint": func(rt *rapid.T) {
				j := rapid.SampledFrom(jobs).Draw(rt, "job")
				id := j.next
				j.next++
				if _, err := e.d.Snapshot(ctx, j.in, id, rapid.Bool().Draw(rt, "wait")); err != nil {
					rt.Fatalf("snapshot %d of %s: %v", id, j.name, err)
				}
				frozen := maps.Clone(j.model)
				if rapid.IntRange(0, 3).Draw(rt, "abort") == 0 {
					if err := e.d.AbortCheckpoint(ctx, j.name, id, "aborted: test"); err != nil {
						rt.Fatal(err)
					}
					return
				}
				if _, err := e.d.CompleteCheckpoint(ctx, j.name, id, nil); err != nil {
					rt.Fatalf("complete %d of %s: %v", id, j.name, err)
				}
				j.snaps[id], j.last = frozen, id
			},
			"materialize": func(rt *rapid.T) {
				j := rapid.SampledFrom(jobs).Draw(rt, "job")
				m, ok := j.in.Backend.(interface{ Materialize(context.Context) error })
				if !ok {
					rt.Fatalf("%T cannot materialize", j.in.Backend)
				}
				if err := m.Materialize(ctx); err != nil {
					rt.Fatal(err)
				}
			},
			"restore": func(rt *rapid.T) {
				j := rapid.SampledFrom(jobs).Draw(rt, "job")
				if err := e.d.CloseInstance(j.in.ID, j.name); err != nil {
					rt.Fatal(err)
				}
				open(j, true)
				check(j)
			},
			"": func(rt *rapid.T) {
				for _, j := range jobs {
					if _, err := segmentsSettled(e, j.name); err != nil {
						rt.Fatal(err)
					}
				}
			},
		})
		for _, j := range jobs {
			check(j)
			if err := e.d.CloseInstance(j.in.ID, j.name); err != nil {
				rt.Fatal(err)
			}
		}
		// Everything let go of: only what retained checkpoints reference is
		// left (after the release pass the closes asked for).
		referenced := map[string]bool{}
		for _, j := range jobs {
			for _, id := range e.cat.Retained(j.name) {
				m, _ := e.cat.Checkpoint(j.name, id)
				for _, h := range m.Tasks {
					if h.Log != nil {
						for _, s := range h.Log.Segments {
							referenced[s] = true
						}
					}
				}
			}
		}
		deadline := time.Now().Add(3 * time.Second)
		for {
			var extra []string
			for _, n := range storeNames(t, store, "_changelog/") {
				if !referenced[n] {
					extra = append(extra, n)
				}
			}
			if len(extra) == 0 {
				break
			}
			if time.Now().After(deadline) {
				rt.Fatalf("segments left that no retained checkpoint references: %v", extra)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}
