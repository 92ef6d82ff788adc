package catalog

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/refcount"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// crashScene is a store with some history: checkpoints 1 and 2 of job j
// retained, savepoint sp1 of checkpoint 2, checkpoint 3 aborted (its shared
// uploads are orphans), checkpoint 4 in flight with every handle added.
type crashScene struct {
	mem    *memstore.Store
	fs     *faultStore
	clk    *testClock
	c      *Catalog
	tasks  []*fakeTask
	h4     []*backend.Handle
	states map[string]map[backend.TaskID]map[string]string // manifest name -> model
}

func newCrashScene(t *testing.T) *crashScene {
	sc := &crashScene{mem: memstore.New(), clk: &testClock{}, states: map[string]map[backend.TaskID]map[string]string{}}
	c := openCat(t, sc.mem, sc.clk)
	sc.tasks = []*fakeTask{
		newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 63}),
		newFakeTask("j", "op", 1, backend.KeyGroupRange{Start: 64, End: 127}),
	}
	a, b := sc.tasks[0], sc.tasks[1]
	model := func() map[backend.TaskID]map[string]string {
		return map[backend.TaskID]map[string]string{a.task: cloneMap(a.state), b.task: cloneMap(b.state)}
	}
	for id := uint64(1); id <= 2; id++ {
		a.state["k"], b.state["k"+fmt.Sprint(id)] = fmt.Sprint(id), "x"
		checkpoint(t, c, sc.mem, id, a, b)
		sc.states[CheckpointManifest("j", id)] = model()
	}
	if _, err := c.SavepointFromCheckpoint(ctx, "sp1", "j", 2); err != nil {
		t.Fatal(err)
	}
	sc.states[SavepointDir("sp1")+"/"+ManifestName] = sc.states[CheckpointManifest("j", 2)]
	for _, id := range []uint64{3, 4} {
		a.state["k"] = fmt.Sprint(id)
		if err := c.BeginCheckpoint("j", id); err != nil {
			t.Fatal(err)
		}
		for _, tk := range sc.tasks {
			tk.snapshot(id)
			h, err := tk.upload(ctx, sc.mem, id)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.AddTaskHandle("j", id, h); err != nil {
				t.Fatal(err)
			}
			if id == 4 {
				sc.h4 = append(sc.h4, h)
			}
		}
		sc.states[CheckpointManifest("j", id)] = model()
	}
	if err := c.Abort(ctx, "j", 3, StatusAborted, "test"); err != nil {
		t.Fatal(err)
	}
	// Reopen over a fault store. Open forgets in-flight checkpoints (as a
	// restart does), so checkpoint 4 is begun again with its handles.
	c.Close()
	sc.fs = newFaultStore(sc.mem)
	sc.c = openCat(t, sc.fs, sc.clk)
	if err := sc.c.BeginCheckpoint("j", 4); err != nil {
		t.Fatal(err)
	}
	for _, h := range sc.h4 {
		if err := sc.c.AddTaskHandle("j", 4, h); err != nil {
			t.Fatal(err)
		}
	}
	return sc
}

var crashOps = map[string]func(sc *crashScene){
	"complete": func(sc *crashScene) { _, _ = sc.c.Complete(ctx, "j", 4) },
	"abort":    func(sc *crashScene) { _ = sc.c.Abort(ctx, "j", 4, StatusExpired, "test") },
	"gc": func(sc *crashScene) {
		sc.clk.Advance(3 * time.Hour)
		_, _ = sc.c.GC(ctx, false)
	},
	"savepoint": func(sc *crashScene) {
		sc.states[SavepointDir("sp2")+"/"+ManifestName] = sc.states[CheckpointManifest("j", 1)]
		_, _ = sc.c.SavepointFromCheckpoint(ctx, "sp2", "j", 1)
	},
	"liveSavepoint": func(sc *crashScene) {
		sc.states[SavepointDir("sp3")+"/"+ManifestName] = sc.states[CheckpointManifest("j", 4)]
		_, _ = sc.c.TriggerSavepoint(ctx, SavepointRequest{ID: "sp3", Job: "j", CheckpointID: 4, Handles: sc.h4})
		_ = sc.c.Release(ctx, "j", 4)
	},
	"deleteSavepoint":  func(sc *crashScene) { _ = sc.c.DeleteSavepoint(ctx, "sp1") },
	"deleteCheckpoint": func(sc *crashScene) { _ = sc.c.DeleteCheckpoint(ctx, "j", 1) },
	"claim": func(sc *crashScene) {
		_, _ = sc.c.RestoreSource(ctx, RestoreRequest{Job: "k", FromJob: "j", CheckpointID: 1, Mode: ModeClaim})
	},
}

// TestCrashAtEveryCall crashes the store at every mutating call of every
// operation that writes or deletes (the call landing or not), restarts, and
// checks: every manifest in the store verifies and holds the model's state,
// and a GC past the grace period leaves nothing unreferenced.
func TestCrashAtEveryCall(t *testing.T) {
	old := retryBackoff
	retryBackoff = 0
	defer func() { retryBackoff = old }()
	for name, op := range crashOps {
		t.Run(name, func(t *testing.T) {
			sc := newCrashScene(t)
			sc.fs.mutations = 0
			op(sc)
			calls := sc.fs.mutations
			if calls == 0 {
				t.Fatal("operation made no mutating call")
			}
			for k := 0; k <= calls; k++ {
				for _, land := range []bool{false, true} {
					sc := newCrashScene(t)
					sc.fs.arm(k, land)
					op(sc)
					sc.c.Close()
					what := fmt.Sprintf("%s crashed at call %d of %d (landed %v)", name, k, calls, land)
					c := openCat(t, sc.mem, sc.clk)
					if p := c.Problems(); len(p) != 0 {
						t.Fatalf("%s: problems after restart: %v", what, p)
					}
					sameRegistry(t, what, c.mu.reg, rebuiltFromManifests(t, sc.mem))
					sc.checkManifests(t, what)
					sc.clk.Advance(5 * time.Hour)
					if _, err := c.GC(ctx, false); err != nil {
						t.Fatalf("%s: gc: %v", what, err)
					}
					live := sc.checkManifests(t, what+", after gc")
					err := tiered.Walk(ctx, sc.mem, "", func(o tiered.ObjectInfo) error {
						if classify(o.Name).kind != objJobFile && !live[o.Name] {
							return fmt.Errorf("%s: unreferenced %s survives a gc past the grace period", what, o.Name)
						}
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}

// checkManifests verifies every manifest in the store against its files
// and the model and returns every object they reference.
func (sc *crashScene) checkManifests(t *testing.T, what string) map[string]bool {
	t.Helper()
	live := map[string]bool{}
	err := tiered.Walk(ctx, sc.mem, "", func(o tiered.ObjectInfo) error {
		n := classify(o.Name)
		if n.kind != objCheckpointManifest && n.kind != objSavepointManifest {
			return nil
		}
		rep, err := Verify(ctx, sc.mem, n.dir(), 2)
		if err != nil || !rep.OK() {
			return fmt.Errorf("%s: verify %s: %+v %v", what, o.Name, rep, err)
		}
		live[o.Name] = true
		var root tiered.Store = sc.mem
		prefix := ""
		if n.kind == objSavepointManifest {
			root, prefix = tiered.WithPrefix(sc.mem, n.dir()), n.dir()+"/"
		}
		want, ok := sc.states[o.Name]
		if !ok {
			return fmt.Errorf("%s: unexpected manifest %s", what, o.Name)
		}
		for _, h := range rep.Manifest.Tasks {
			for _, f := range h.Files {
				live[prefix+f.Path] = true
			}
			got, _, err := readHandle(ctx, root, h)
			if err != nil || !reflect.DeepEqual(got, want[h.Task]) {
				return fmt.Errorf("%s: %s task %s restores %v (%v), model %v", what, o.Name, h.Task, got, err, want[h.Task])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name := range sc.states {
		if strings.HasPrefix(name, "j/chk-2/") && !live[name] {
			t.Fatalf("%s: checkpoint 2 (newest retained, savepoint source) vanished", what)
		}
	}
	return live
}

// rebuiltFromManifests is the registry refcount.Rebuild makes of the
// retained manifests in s, read here without the catalog.
func rebuiltFromManifests(t *testing.T, s tiered.Store) *refcount.Registry {
	t.Helper()
	owners := map[string][]refcount.Object{}
	err := tiered.Walk(ctx, s, "", func(o tiered.ObjectInfo) error {
		n := classify(o.Name)
		if n.kind != objCheckpointManifest && n.kind != objSavepointManifest {
			return nil
		}
		data, err := tiered.ReadAll(ctx, s, o.Name, maxMetaSize)
		if err != nil {
			return err
		}
		m, err := DecodeManifest(data)
		if err != nil {
			return err
		}
		if n.kind == objSavepointManifest {
			owners[SavepointDir(n.sp)] = savepointObjects(m, data)
		} else {
			owners[CheckpointDir(n.job, n.id)] = checkpointObjects(m, data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r, refused := refcount.Rebuild(owners)
	if refused != nil {
		t.Fatalf("rebuild from the manifests refused %v", refused)
	}
	return r
}

// sameRegistry fails unless got and want have the same owners, each with
// the same objects.
func sameRegistry(t *testing.T, what string, got, want *refcount.Registry) {
	t.Helper()
	if g, w := got.Owners(), want.Owners(); !reflect.DeepEqual(g, w) {
		t.Fatalf("%s: registry owners %v, rebuilt from the manifests %v", what, g, w)
	}
	for _, o := range want.Owners() {
		if g, w := got.Objects(o), want.Objects(o); !reflect.DeepEqual(g, w) {
			t.Fatalf("%s: registry objects of %s %v, rebuilt from the manifests %v", what, o, g, w)
		}
	}
	if g, w := got.Stats(), want.Stats(); g != w {
		t.Fatalf("%s: registry stats %+v, rebuilt from the manifests %+v", what, g, w)
	}
}
