package catalog

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"pgregory.net/rapid"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// stampStore is a store whose objects carry the test clock's time as
// their ModTime, so that moving the clock past the grace period ages
// them, and a lease written after the move is fresh.
type stampStore struct {
	tiered.Store
	clk *testClock
	mu  sync.Mutex
	at  map[string]time.Time
}

func (s *stampStore) stamp(name string) {
	s.mu.Lock()
	s.at[name] = s.clk.Now()
	s.mu.Unlock()
}

func (s *stampStore) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	err := s.Store.Put(ctx, name, r, size)
	if err == nil {
		s.stamp(name)
	}
	return err
}

func (s *stampStore) PutIfAbsent(ctx context.Context, name string, r io.Reader, size int64) error {
	err := s.Store.PutIfAbsent(ctx, name, r, size)
	if err == nil {
		s.stamp(name)
	}
	return err
}

func (s *stampStore) fix(o tiered.ObjectInfo) tiered.ObjectInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.at[o.Name]; ok {
		o.ModTime = t
	}
	return o
}

func (s *stampStore) Stat(ctx context.Context, name string) (tiered.ObjectInfo, error) {
	o, err := s.Store.Stat(ctx, name)
	return s.fix(o), err
}

func (s *stampStore) List(ctx context.Context, prefix, startAfter string, limit int) (tiered.ListPage, error) {
	p, err := s.Store.List(ctx, prefix, startAfter, limit)
	for i := range p.Objects {
		p.Objects[i] = s.fix(p.Objects[i])
	}
	return p, err
}

// remoteWorld is a catalog and the remote-mode lsm instances of job "a"
// (two subtasks), with the model: the state each instance holds and the
// state each checkpoint was taken with.
type remoteWorld struct {
	clk *testClock
	// store stamps objects with the test clock; its gate holds back the
	// instance markers that restores write in the background.
	store   *markerGate
	c       *Catalog
	fs      vfs.FS
	slots   [2]*lsm.Backend
	models  [2]map[string]string
	chk     map[uint64][2]map[string]string
	next    uint64
	pending uint64 // a checkpoint in flight (0: none)
	n       int
}

const rjob = "a"

func (w *remoteWorld) task(i int) backend.TaskID {
	return backend.TaskID{Job: rjob, Operator: "op", Subtask: i}
}

func (w *remoteWorld) groups(i int) backend.KeyGroupRange {
	return backend.KeyGroupRange{Start: i * 64, End: i*64 + 63}
}

// open starts slot i, restored by claim from the newest retained
// checkpoint that has its task, else empty.
func (w *remoteWorld) open(t *rapid.T, i int) {
	var restore []*backend.Handle
	model := map[string]string{}
	ids := w.c.Retained(rjob)
	for k := len(ids) - 1; k >= 0 && restore == nil; k-- {
		m, _ := w.c.Checkpoint(rjob, ids[k])
		for _, h := range m.Tasks {
			if h.Task == w.task(i) {
				restore = []*backend.Handle{h}
				model = clone(w.chk[ids[k]][i])
			}
		}
	}
	w.n++
	var held func(context.Context) error
	if restore != nil {
		name := CheckpointManifest(rjob, restore[0].CheckpointID)
		held = func(ctx context.Context) error { _, err := w.store.Stat(ctx, name); return err }
	}
	b, err := lsm.Open(backend.Options{Task: w.task(i), KeyGroups: w.groups(i), MaxParallelism: 128,
		States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}, Store: w.store, Restore: restore,
		RestoreHeld: held},
		lsm.Options{Dir: fmt.Sprintf("/inst-%d", w.n), FS: w.fs, MemTableSize: 64 << 10,
			Remote: &lsm.RemoteOptions{Store: w.store, CacheBytes: 1 << 20, LeaseInterval: time.Hour}})
	if err != nil {
		t.Fatalf("open slot %d from %d handles: %v", i, len(restore), err)
	}
	w.slots[i], w.models[i] = b, model
}

func clone(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (w *remoteWorld) live() []int {
	var out []int
	for i, b := range w.slots {
		if b != nil {
			out = append(out, i)
		}
	}
	return out
}

// check reads every key of every live instance through a full scan (a
// deleted object fails the read) and compares it with the model.
func (w *remoteWorld) check(t *rapid.T) {
	for _, i := range w.live() {
		got := map[string]string{}
		for k := range w.models[i] {
			v, ok, err := w.slots[i].Get("v", rkey(k))
			if err != nil || !ok {
				t.Fatalf("slot %d: get %q: %v, present %v (an object it needs is gone?)", i, k, err, ok)
			}
			got[k] = string(v)
		}
		it, err := w.slots[i].DB().NewIter(nil)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for it.First(); it.Valid(); it.Next() {
			n++
		}
		if err := it.Close(); err != nil {
			t.Fatalf("slot %d: full scan: %v (an object it needs is gone?)", i, err)
		}
		for k, v := range w.models[i] {
			if got[k] != v {
				t.Fatalf("slot %d: %q = %q, want %q", i, k, got[k], v)
			}
		}
	}
	// Every object of every retained checkpoint is in the store.
	for _, id := range w.c.Retained(rjob) {
		m, _ := w.c.Checkpoint(rjob, id)
		for _, h := range m.Tasks {
			for _, f := range h.Files {
				if _, err := w.store.Stat(context.Background(), f.Path); err != nil {
					t.Fatalf("checkpoint %d is retained but its object %s: %v", id, f.Path, err)
				}
			}
		}
	}
}

func rkey(k string) backend.Key {
	var kg int
	fmt.Sscanf(k, "%d/", &kg)
	return backend.Key{KeyGroup: kg, Key: []byte(k)}
}

// lsmObjects lists everything under the job's lsm directory.
func (w *remoteWorld) lsmObjects(t *rapid.T) []string {
	var names []string
	err := tiered.Walk(context.Background(), w.store, rjob+"/shared/lsm/", func(o tiered.ObjectInfo) error {
		names = append(names, o.Name)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestRemoteOwnershipProperty: random sequences of writes, compactions,
// checkpoints (completed, aborted, or lost with the catalog), retention,
// sweeps before and after the grace period, instance closes and crashes,
// catalog restarts and restores. After every step no object a retained
// checkpoint or a live instance needs is gone; at the end, once nothing
// references anything, a sweep past the grace period leaves nothing.
func TestRemoteOwnershipProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		clk := &testClock{}
		w := &remoteWorld{clk: clk, store: &markerGate{Store: &stampStore{Store: memstore.New(), clk: clk, at: map[string]time.Time{}}},
			fs: vfs.NewMem(), chk: map[uint64][2]map[string]string{}, next: 1}
		openCatalog := func() {
			o := clk.opts(w.store)
			c, err := Open(ctx, o)
			if err != nil {
				t.Fatalf("open catalog: %v", err)
			}
			w.c = c
		}
		openCatalog()
		defer func() {
			w.store.release()
			for _, b := range w.slots {
				if b != nil {
					_ = b.Close()
				}
			}
			_ = w.c.Close()
		}()
		w.open(t, 0)
		sweep := func(pastGrace bool) {
			if pastGrace {
				clk.Advance(2 * time.Hour)
				// The live instances' lease timers fire meanwhile.
				for _, i := range w.live() {
					if err := w.slots[i].RefreshLease(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			if _, err := w.c.GC(ctx, false); err != nil {
				t.Fatalf("gc: %v", err)
			}
		}
		endPending := func(complete bool) {
			id := w.pending
			w.pending = 0
			if complete {
				if _, err := w.c.Complete(ctx, rjob, id); err != nil {
					t.Fatalf("complete %d: %v", id, err)
				}
				for _, i := range w.live() {
					w.slots[i].NotifyCheckpointComplete(id)
				}
				return
			}
			if err := w.c.Abort(ctx, rjob, id, StatusAborted, "test"); err != nil {
				t.Fatalf("abort %d: %v", id, err)
			}
		}
		t.Repeat(map[string]func(*rapid.T){
			"write": func(t *rapid.T) {
				live := w.live()
				if len(live) == 0 {
					t.Skip("no instance")
				}
				i := rapid.SampledFrom(live).Draw(t, "slot")
				n := rapid.IntRange(1, 300).Draw(t, "keys")
				tag := rapid.IntRange(0, 1000).Draw(t, "tag")
				for j := 0; j < n; j++ {
					kg := w.groups(i).Start + j%64
					k := fmt.Sprintf("%d/k%04d", kg, (j*7+tag)%500)
					v := fmt.Sprintf("%d-%s", tag, strings.Repeat("x", 100))
					if err := w.slots[i].Put("v", rkey(k), []byte(v)); err != nil {
						t.Fatal(err)
					}
					w.models[i][k] = v
				}
				if err := w.slots[i].DB().Flush(); err != nil {
					t.Fatal(err)
				}
			},
			"compact": func(t *rapid.T) {
				live := w.live()
				if len(live) == 0 {
					t.Skip("no instance")
				}
				i := rapid.SampledFrom(live).Draw(t, "slot")
				if err := w.slots[i].DB().Compact(ctx, []byte{0}, []byte{0xff, 0xff}, false); err != nil {
					t.Fatal(err)
				}
			},
			"checkpoint": func(t *rapid.T) {
				if w.pending != 0 || len(w.live()) == 0 {
					t.Skip("a checkpoint is in flight, or no instance")
				}
				id := w.next
				w.next++
				if err := w.c.BeginCheckpoint(rjob, id); err != nil {
					t.Fatal(err)
				}
				var snap [2]map[string]string
				for _, i := range w.live() {
					p, err := w.slots[i].Snapshot(ctx, id)
					if err != nil {
						t.Fatalf("snapshot %d of slot %d: %v", id, i, err)
					}
					h, err := p.Run(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if err := w.c.AddTaskHandle(rjob, id, h); err != nil {
						t.Fatal(err)
					}
					snap[i] = clone(w.models[i])
				}
				w.chk[id] = snap
				w.pending = id
			},
			"complete": func(t *rapid.T) {
				if w.pending == 0 {
					t.Skip("nothing in flight")
				}
				endPending(true)
			},
			"abort": func(t *rapid.T) {
				if w.pending == 0 {
					t.Skip("nothing in flight")
				}
				endPending(false)
			},
			"sweep": func(t *rapid.T) { sweep(rapid.Bool().Draw(t, "pastGrace")) },
			"close": func(t *rapid.T) {
				live := w.live()
				if len(live) == 0 {
					t.Skip("no instance")
				}
				i := rapid.SampledFrom(live).Draw(t, "slot")
				if err := w.slots[i].Close(); err != nil {
					t.Fatal(err)
				}
				w.slots[i] = nil
			},
			"crash": func(t *rapid.T) {
				live := w.live()
				if len(live) == 0 {
					t.Skip("no instance")
				}
				i := rapid.SampledFrom(live).Draw(t, "slot")
				if err := w.slots[i].Abandon(); err != nil {
					t.Fatal(err)
				}
				w.slots[i] = nil
			},
			"open": func(t *rapid.T) {
				var free []int
				for i, b := range w.slots {
					if b == nil {
						free = append(free, i)
					}
				}
				if len(free) == 0 || w.pending != 0 {
					t.Skip("no free slot, or a checkpoint in flight")
				}
				w.open(t, rapid.SampledFrom(free).Draw(t, "slot"))
			},
			// Restores opened while the gate is shut serve with their
			// instance markers pending, held by their holds only, while
			// retention, deletes and sweeps go on.
			"holdMarkers":    func(t *rapid.T) { w.store.shut() },
			"releaseMarkers": func(t *rapid.T) { w.store.release() },
			"deleteCheckpoint": func(t *rapid.T) {
				ids := w.c.Retained(rjob)
				if len(ids) == 0 {
					t.Skip("nothing retained")
				}
				id := rapid.SampledFrom(ids).Draw(t, "id")
				if err := w.c.DeleteCheckpoint(ctx, rjob, id); err != nil {
					t.Fatalf("delete checkpoint %d: %v", id, err)
				}
			},
			"restartCatalog": func(t *rapid.T) {
				// The in-flight checkpoint is lost with the catalog's
				// memory: its markers are the sweep's.
				if err := w.c.Close(); err != nil {
					t.Fatal(err)
				}
				w.pending = 0
				openCatalog()
			},
			"": func(t *rapid.T) { w.check(t) },
		})

		// Nothing references anything any more: every instance closed (or
		// crashed), every checkpoint ended and discarded. A sweep past the
		// grace period leaves nothing behind.
		w.store.release()
		for _, i := range w.live() {
			if rapid.Bool().Draw(t, "crashAtEnd") {
				_ = w.slots[i].Abandon()
			} else if err := w.slots[i].Close(); err != nil {
				t.Fatal(err)
			}
			w.slots[i] = nil
		}
		if w.pending != 0 {
			endPending(false)
		}
		for _, id := range w.c.Retained(rjob) {
			if err := w.c.DeleteCheckpoint(ctx, rjob, id); err != nil {
				t.Fatalf("delete checkpoint %d: %v", id, err)
			}
		}
		sweep(true)
		if left := w.lsmObjects(t); len(left) != 0 {
			slices.Sort(left)
			t.Logf("retained %v", w.c.Retained(rjob))
			for _, n := range left {
				o, _ := w.store.Stat(ctx, n)
				w.c.mu.Lock()
				t.Logf("%s: modtime %v (now %v), referenced %v, count %d, owners %q", n, o.ModTime, clk.Now(), w.c.mu.referenced(n, w.c.opts.LogHeld), w.c.mu.reg.Count(n), w.c.mu.reg.Owners())
				w.c.mu.Unlock()
			}
			t.Fatalf("%d lsm objects left once nothing references them: %q", len(left), left)
		}
	})
}
