package catalog

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// realWorld runs one job of two tasks on real backends (file or lsm; a
// restore from a canonical savepoint may switch the kind) over a catalog,
// with a model of every task's content at every checkpoint and savepoint.
type realWorld struct {
	s      *memstore.Store
	clk    *testClock
	c      *Catalog
	in     *instance
	kind   backend.Kind
	tasks  [2]backend.Backend
	live   [2]kvModel
	next   uint64
	ckpts  map[uint64][2]kvModel
	sps    map[string][2]kvModel
	spSeq  int
	ranges [2]backend.KeyGroupRange
}

var realKGs = [2][]int{{0, 37}, {64, 127}}

func (w *realWorld) opts(i int) backend.Options {
	return backend.Options{Task: backend.TaskID{Job: "j", Operator: "op", Subtask: i},
		KeyGroups: w.ranges[i], MaxParallelism: 128, Store: w.s}
}

func (w *realWorld) openCatalog(t *rapid.T) {
	c, err := Open(context.Background(), w.clk.opts(w.s))
	if err != nil {
		t.Fatal(err)
	}
	w.c = c
}

func (w *realWorld) closeTasks() {
	for _, b := range w.tasks {
		if b != nil {
			b.Close()
		}
	}
}

// restoreFrom replaces both tasks with instances of kind restored from r
// and checks a throwaway restore of each against the model.
func (w *realWorld) restoreFrom(t *rapid.T, r *Restore, kind backend.Kind, want [2]kvModel) {
	w.closeTasks()
	w.kind = kind
	for i := range w.tasks {
		o := w.opts(i)
		o.Restore, o.RestoreStore, o.NoClaim = r.HandlesFor("op", w.ranges[i]), r.Store, r.NoClaim
		probe := w.in.open(t, kind, o)
		got, err := dumpState(probe, realKGs[i])
		probe.Close()
		if err != nil {
			t.Fatalf("dump %s: %v", kind, err)
		}
		if !reflect.DeepEqual(got, want[i]) {
			t.Fatalf("%s task %d restored from %s %s/%d%s:\n got %v\nwant %v", kind, i, r.Manifest.Kind, r.Manifest.Job,
				r.Manifest.CheckpointID, r.Manifest.SavepointID, got, want[i])
		}
		w.tasks[i] = w.in.open(t, kind, o)
		w.live[i] = maps.Clone(want[i])
	}
}

func (w *realWorld) checkStore(t *rapid.T) {
	err := tiered.Walk(context.Background(), w.s, "", func(o tiered.ObjectInfo) error {
		n := classify(o.Name)
		if n.kind != objCheckpointManifest && n.kind != objSavepointManifest {
			return nil
		}
		rep, err := Verify(context.Background(), w.s, n.dir(), 2)
		if err != nil || !rep.OK() {
			return fmt.Errorf("verify %s: %+v %v", o.Name, rep, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestCatalogWithRealBackends(t *testing.T) {
	if testing.Short() {
		t.Skip("opens many Pebble instances; covered by TestCatalogProperties in -short")
	}
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		w := &realWorld{s: memstore.New(), clk: &testClock{}, in: &instance{}, next: 1,
			ckpts: map[uint64][2]kvModel{}, sps: map[string][2]kvModel{},
			ranges: [2]backend.KeyGroupRange{{Start: 0, End: 63}, {Start: 64, End: 127}}}
		w.kind = rapid.SampledFrom([]backend.Kind{backend.KindFile, backend.KindLSM}).Draw(t, "kind")
		w.openCatalog(t)
		for i := range w.tasks {
			w.tasks[i] = w.in.open(t, w.kind, w.opts(i))
			w.live[i] = kvModel{}
		}
		defer func() { w.closeTasks(); w.c.Close() }()

		snapshotAll := func(t *rapid.T, id uint64) []*backend.Handle {
			var ps []backend.PendingSnapshot
			for _, b := range w.tasks {
				p, err := b.Snapshot(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				ps = append(ps, p)
			}
			var hs []*backend.Handle
			for _, p := range ps {
				h, err := p.Run(ctx)
				if err != nil {
					t.Fatal(err)
				}
				hs = append(hs, h)
			}
			return hs
		}

		t.Repeat(map[string]func(*rapid.T){
			"": func(t *rapid.T) { w.checkStore(t) },
			"write": func(t *rapid.T) {
				i := rapid.IntRange(0, 1).Draw(t, "task")
				for n := rapid.IntRange(1, 8).Draw(t, "n"); n > 0; n-- {
					op := kvOp{kind: rapid.IntRange(0, 7).Draw(t, "op"), kg: rapid.SampledFrom(realKGs[i]).Draw(t, "kg"),
						key: rapid.SampledFrom(testKeys[:3]).Draw(t, "key"), uk: rapid.SampledFrom([]string{"x", "y"}).Draw(t, "uk"),
						val: rapid.StringMatching(`[a-z]{1,6}`).Draw(t, "val"), n: int64(rapid.IntRange(1, 4).Draw(t, "n"))}
					if err := op.apply(w.tasks[i], w.live[i]); err != nil {
						t.Fatal(err)
					}
				}
			},
			"checkpoint": func(t *rapid.T) {
				id := w.next
				w.next++
				if err := w.c.BeginCheckpoint("j", id); err != nil {
					t.Fatal(err)
				}
				state := [2]kvModel{maps.Clone(w.live[0]), maps.Clone(w.live[1])}
				for _, h := range snapshotAll(t, id) {
					if err := w.c.AddTaskHandle("j", id, h); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := w.c.Complete(ctx, "j", id); err != nil {
					t.Fatalf("complete %d: %v", id, err)
				}
				for _, b := range w.tasks {
					b.NotifyCheckpointComplete(id)
				}
				w.ckpts[id] = state
			},
			"abort": func(t *rapid.T) {
				id := w.next
				w.next++
				if err := w.c.BeginCheckpoint("j", id); err != nil {
					t.Fatal(err)
				}
				snapshotAll(t, id) // uploaded, never confirmed
				if err := w.c.Abort(ctx, "j", id, StatusDeclined, "test"); err != nil {
					t.Fatal(err)
				}
				for _, b := range w.tasks {
					b.NotifyCheckpointAborted(id)
				}
			},
			"savepoint": func(t *rapid.T) {
				w.spSeq++
				spID := fmt.Sprintf("sp%d", w.spSeq)
				state := [2]kvModel{maps.Clone(w.live[0]), maps.Clone(w.live[1])}
				if rapid.Bool().Draw(t, "canonical") {
					if _, err := w.c.TriggerSavepoint(ctx, SavepointRequest{ID: spID, Job: "j", CheckpointID: w.next,
						Format: FormatCanonical, Backends: w.tasks[:]}); err != nil {
						t.Fatal(err)
					}
				} else {
					id := w.next
					w.next++
					if err := w.c.BeginCheckpoint("j", id); err != nil {
						t.Fatal(err)
					}
					hs := snapshotAll(t, id)
					if _, err := w.c.TriggerSavepoint(ctx, SavepointRequest{ID: spID, Job: "j", CheckpointID: id, Handles: hs}); err != nil {
						t.Fatal(err)
					}
					if err := w.c.Release(ctx, "j", id); err != nil {
						t.Fatal(err)
					}
					for _, b := range w.tasks {
						b.NotifyCheckpointAborted(id)
					}
				}
				w.sps[spID] = state
			},
			"deleteSavepoint": func(t *rapid.T) {
				sps := w.c.Savepoints()
				if len(sps) == 0 {
					t.Skip("no savepoint")
				}
				if err := w.c.DeleteSavepoint(ctx, rapid.SampledFrom(sps).Draw(t, "sp").SavepointID); err != nil {
					t.Fatal(err)
				}
			},
			"restore": func(t *rapid.T) {
				type src struct {
					id uint64
					sp string
				}
				var srcs []src
				for _, id := range w.c.Retained("j") {
					srcs = append(srcs, src{id: id})
				}
				for _, m := range w.c.Savepoints() {
					srcs = append(srcs, src{sp: m.SavepointID})
				}
				if len(srcs) == 0 {
					t.Skip("nothing to restore")
				}
				s := rapid.SampledFrom(srcs).Draw(t, "source")
				mode := rapid.SampledFrom([]Mode{ModeClaim, ModeNoClaim}).Draw(t, "mode")
				r, err := w.c.RestoreSource(ctx, RestoreRequest{Job: "j", CheckpointID: s.id, SavepointID: s.sp, Mode: mode})
				if err != nil {
					t.Fatal(err)
				}
				kind := w.kind
				want := w.ckpts[s.id]
				if s.sp != "" {
					want = w.sps[s.sp]
					if r.Manifest.Format == FormatCanonical {
						// Any backend kind restores a canonical savepoint.
						kind = rapid.SampledFrom([]backend.Kind{backend.KindFile, backend.KindLSM}).Draw(t, "newKind")
					} else {
						kind = r.Handles[0].Backend
					}
				} else {
					kind = r.Handles[0].Backend
				}
				w.restoreFrom(t, r, kind, want)
			},
			"crash": func(t *rapid.T) {
				// The daemon dies: backends and catalog go without any
				// cleanup; the restart restores from the newest checkpoint.
				w.closeTasks()
				w.c.Close()
				w.openCatalog(t)
				r, err := w.c.RestoreSource(ctx, RestoreRequest{Job: "j", Mode: ModeClaim})
				if err != nil {
					w.tasks = [2]backend.Backend{}
					for i := range w.tasks {
						w.tasks[i] = w.in.open(t, w.kind, w.opts(i))
						w.live[i] = kvModel{}
					}
					return
				}
				w.restoreFrom(t, r, r.Handles[0].Backend, w.ckpts[r.Manifest.CheckpointID])
			},
			"gcPastGrace": func(t *rapid.T) {
				w.clk.Advance(3 * time.Hour)
				if _, err := w.c.GC(ctx, false); err != nil {
					t.Fatal(err)
				}
				live := map[string]bool{}
				for _, id := range w.c.Retained("j") {
					m, _ := w.c.Checkpoint("j", id)
					live[CheckpointManifest("j", id)] = true
					for _, p := range filesOf(m) {
						live[p] = true
					}
				}
				for _, m := range w.c.Savepoints() {
					live[SavepointDir(m.SavepointID)+"/"+ManifestName] = true
					for _, p := range filesOf(m) {
						live[SavepointDir(m.SavepointID)+"/"+p] = true
					}
				}
				var left []string
				_ = tiered.Walk(ctx, w.s, "", func(o tiered.ObjectInfo) error {
					if classify(o.Name).kind != objJobFile && !live[o.Name] {
						left = append(left, o.Name)
					}
					return nil
				})
				if len(left) > 0 {
					t.Fatalf("unreferenced objects survive a gc past the grace period: %v", left)
				}
				// Every retained checkpoint and savepoint still restores to
				// the model.
				for _, id := range w.c.Retained("j") {
					m, _ := w.c.Checkpoint("j", id)
					for i := range w.tasks {
						o := w.opts(i)
						r := &Restore{Manifest: m, Handles: m.Tasks}
						o.Restore, o.RestoreStore, o.NoClaim = r.HandlesFor("op", w.ranges[i]), w.s, true
						probe := w.in.open(t, m.Tasks[0].Backend, o)
						got, err := dumpState(probe, realKGs[i])
						probe.Close()
						if err != nil || !reflect.DeepEqual(got, w.ckpts[id][i]) {
							t.Fatalf("checkpoint %d task %d after gc: %v\n got %v\nwant %v", id, i, err, got, w.ckpts[id][i])
						}
					}
				}
			},
		})
	})
}
