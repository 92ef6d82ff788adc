package catalog

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// world is the system under test plus its model: two jobs ("a", "b") of two
// fake incremental tasks each, one catalog over a crash-injecting store,
// and the state every checkpoint and savepoint was taken with.
type world struct {
	mem    *memstore.Store
	fs     *faultStore
	clk    *testClock
	c      *Catalog
	jobs   map[string]*wjob
	states map[ref]map[backend.TaskID]map[string]string
	spStat map[string]map[backend.TaskID]map[string]string
	spSeq  int
	retain int
}

// modelTimeout stands for the daemon's checkpoint timeout: past it, the
// daemon's timer (not the catalog) aborts a checkpoint as expired, which
// expireAll models.
const modelTimeout = 10 * time.Minute

type wjob struct {
	name     string
	tasks    []*fakeTask
	next     uint64
	inflight map[uint64]map[backend.TaskID]*backend.Handle // uploaded so far
	// base are the handles the tasks build on: of the last completed
	// checkpoint or of a claim restore (nil: none). Their shared files
	// must exist whoever owns the checkpoint now.
	base []*backend.Handle
}

func newWorld() *world {
	w := &world{mem: memstore.New(), clk: &testClock{}, jobs: map[string]*wjob{},
		states: map[ref]map[backend.TaskID]map[string]string{}, spStat: map[string]map[backend.TaskID]map[string]string{}}
	for _, name := range []string{"a", "b"} {
		w.jobs[name] = &wjob{name: name, next: 1, inflight: map[uint64]map[backend.TaskID]*backend.Handle{},
			tasks: []*fakeTask{
				newFakeTask(name, "op", 0, backend.KeyGroupRange{Start: 0, End: 63}),
				newFakeTask(name, "op", 1, backend.KeyGroupRange{Start: 64, End: 127}),
			}}
	}
	return w
}

func (w *world) open(t *rapid.T) {
	w.fs = newFaultStore(w.mem)
	o := w.clk.opts(w.fs)
	o.Retain = w.retain
	c, err := Open(context.Background(), o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	w.c = c
}

func (w *world) jobNames() []string { return []string{"a", "b"} }

// expireAll is the daemon's timer firing for every checkpoint in flight
// once the clock passed modelTimeout: abort as expired, tell the tasks.
func (w *world) expireAll(t *rapid.T) {
	for _, name := range w.jobNames() {
		j := w.jobs[name]
		for _, id := range inflightIDs(j) {
			if err := w.c.Abort(context.Background(), j.name, id, StatusExpired, "not completed within the timeout"); err != nil {
				t.Fatalf("expire %s/%d: %v", j.name, id, err)
			}
			for _, tk := range j.tasks {
				tk.notifyAborted(id)
			}
			delete(j.inflight, id)
		}
	}
}

func inflightIDs(j *wjob) []uint64 {
	ids := slices.Collect(maps.Keys(j.inflight))
	slices.Sort(ids)
	return ids
}

func (w *world) abortAll(t *rapid.T, j *wjob) {
	for id := range j.inflight {
		if err := w.c.Abort(context.Background(), j.name, id, StatusAborted, "job restarts"); err != nil {
			t.Fatalf("abort %s/%d: %v", j.name, id, err)
		}
		for _, tk := range j.tasks {
			tk.notifyAborted(id)
		}
		delete(j.inflight, id)
	}
}

// restoreTasks restores every task of j from r and checks the result
// against the model.
func (w *world) restoreTasks(t *rapid.T, j *wjob, r *Restore, want map[backend.TaskID]map[string]string) {
	for _, tk := range j.tasks {
		var h *backend.Handle
		for _, x := range r.Handles {
			if x.Task.Operator == tk.task.Operator && x.Task.Subtask == tk.task.Subtask {
				h = x
			}
		}
		if h == nil {
			t.Fatalf("restore of %s: no handle for %s", j.name, tk.task)
		}
		if err := tk.restore(context.Background(), r.Store, h, r.NoClaim); err != nil {
			t.Fatalf("restore %s from %s: %v", tk.task, h.Task, err)
		}
		if !reflect.DeepEqual(tk.state, want[h.Task]) {
			t.Fatalf("restore %s from %s/%d: state %v, model %v", tk.task, h.Task, h.CheckpointID, tk.state, want[h.Task])
		}
	}
}

// crash drops the catalog (and the tasks' in-flight work) without any
// cleanup, opens a new one from the store and restarts every job from its
// newest checkpoint, checking the restore against the model.
func (w *world) crash(t *rapid.T) {
	w.c.Close()
	w.open(t)
	for _, name := range w.jobNames() {
		j := w.jobs[name]
		j.inflight = map[uint64]map[backend.TaskID]*backend.Handle{}
		r, err := w.c.RestoreSource(context.Background(), RestoreRequest{Job: name, Mode: ModeClaim})
		if errors.Is(err, ErrNotFound) {
			for i, tk := range j.tasks {
				j.tasks[i] = newFakeTask(name, tk.task.Operator, tk.task.Subtask, tk.kg)
			}
			j.base = nil
			continue
		}
		if err != nil {
			t.Fatalf("restart %s: %v", name, err)
		}
		w.restoreTasks(t, j, r, w.states[ref{r.Manifest.Job, r.Manifest.CheckpointID}])
		j.base = r.Handles
	}
}

func allStates(j *wjob) map[backend.TaskID]map[string]string {
	out := map[backend.TaskID]map[string]string{}
	for _, tk := range j.tasks {
		out[tk.task] = maps.Clone(tk.state)
	}
	return out
}

// manifestsInStore decodes every manifest in the store.
func (w *world) manifestsInStore(t *rapid.T) map[string]*Manifest {
	out := map[string]*Manifest{}
	err := tiered.Walk(context.Background(), w.mem, "", func(o tiered.ObjectInfo) error {
		k := classify(o.Name).kind
		if k != objCheckpointManifest && k != objSavepointManifest {
			return nil
		}
		data, err := tiered.ReadAll(context.Background(), w.mem, o.Name, 0)
		if err != nil {
			return err
		}
		m, err := DecodeManifest(data)
		if err != nil {
			return fmt.Errorf("manifest %s: %w", o.Name, err)
		}
		out[o.Name] = m
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// check asserts the invariants that hold after every step.
func (w *world) check(t *rapid.T) {
	ms := w.manifestsInStore(t)
	// 1. Every file of every manifest in the store exists and verifies,
	//    and every retained checkpoint and savepoint restores to the model.
	for name, m := range ms {
		dir := strings.TrimSuffix(name, "/"+ManifestName)
		rep, err := Verify(context.Background(), w.mem, dir, 2)
		if err != nil || !rep.OK() {
			t.Fatalf("verify %s: %+v %v", name, rep, err)
		}
		var want map[backend.TaskID]map[string]string
		var root tiered.Store = w.mem
		if m.Kind == KindSavepoint {
			want = w.spStat[m.SavepointID]
			root = tiered.WithPrefix(w.mem, dir)
		} else {
			want = w.states[ref{m.Job, m.CheckpointID}]
		}
		for _, h := range m.Tasks {
			got, _, err := readHandle(context.Background(), root, h)
			if err != nil {
				t.Fatalf("read %s of %s: %v", h.Task, name, err)
			}
			if !reflect.DeepEqual(got, want[h.Task]) {
				t.Fatalf("%s task %s holds %v, model %v", name, h.Task, got, want[h.Task])
			}
		}
	}
	// 2. The shared files every job builds on exist, whoever owns (or
	//    dropped) the checkpoint they came from.
	for _, name := range w.jobNames() {
		for _, h := range w.jobs[name].base {
			for _, f := range h.Files {
				if _, err := w.mem.Stat(context.Background(), f.Path); f.Shared && err != nil {
					t.Fatalf("job %s builds on %s (from %s/%d), which is gone: %v", name, f.Path, h.Task.Job, h.CheckpointID, err)
				}
			}
		}
	}
	// 3. The catalog's view is the store's: the same manifests.
	known := map[string]bool{}
	w.c.mu.Lock()
	for r := range w.c.mu.entries {
		known[r.manifest()] = true
	}
	for id := range w.c.mu.savepoints {
		known[SavepointDir(id)+"/"+ManifestName] = true
	}
	w.c.mu.Unlock()
	for name := range ms {
		if !known[name] {
			t.Fatalf("manifest %s in the store is unknown to the catalog", name)
		}
	}
	for name := range known {
		if ms[name] == nil {
			t.Fatalf("catalog lists %s, which is not in the store", name)
		}
	}
}

// baseFiles adds the shared files the jobs build on to live.
func (w *world) baseFiles(live map[string]bool) {
	for _, j := range w.jobs {
		for _, h := range j.base {
			for _, f := range h.Files {
				if f.Shared {
					live[f.Path] = true
				}
			}
		}
	}
}

// referenced computes, from the manifests in the store alone, every object
// that must exist.
func referenced(ms map[string]*Manifest) map[string]bool {
	out := map[string]bool{}
	for name, m := range ms {
		out[name] = true
		prefix := ""
		if m.Kind == KindSavepoint {
			prefix = SavepointDir(m.SavepointID) + "/"
		}
		for _, h := range m.Tasks {
			for _, f := range h.Files {
				out[prefix+f.Path] = true
			}
		}
	}
	return out
}

func TestCatalogProperties(t *testing.T) {
	old := retryBackoff
	retryBackoff = 0
	defer func() { retryBackoff = old }()
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		w := newWorld()
		// Retain 1 makes every completion subsume one: the discard path
		// (and crashes inside it) runs often.
		w.retain = rapid.IntRange(1, 2).Draw(t, "retain")
		w.open(t)
		defer func() { w.c.Close() }()
		jobGen := rapid.SampledFrom(w.jobNames())

		complete := func(t *rapid.T, j *wjob, id uint64) error {
			m, err := w.c.Complete(ctx, j.name, id)
			if err != nil {
				return err
			}
			moved := true
			for _, tk := range j.tasks {
				tk.notifyComplete(id)
				moved = moved && tk.baseID == id
			}
			delete(j.inflight, id)
			// The tasks build on the completed checkpoint only if it moved
			// their base: a completion older than the one they build on
			// (a late one, after a newer completed) leaves them where they
			// are, as lsm's NotifyCheckpointComplete does.
			if moved {
				j.base = m.Tasks
			}
			// The catalog keeps the shared files of the base it knows:
			// it must be the one the tasks build on.
			if len(j.base) > 0 {
				want := ref{j.base[0].Task.Job, j.base[0].CheckpointID}
				w.c.mu.Lock()
				got := w.c.mu.job(j.name).base
				w.c.mu.Unlock()
				if got != want {
					t.Fatalf("after completing %s/%d the catalog's base of %s is %s, the tasks build on %s", j.name, id, j.name, got, want)
				}
			}
			if len(m.Tasks) != len(j.tasks) {
				t.Fatalf("manifest of %s/%d has %d tasks", j.name, id, len(m.Tasks))
			}
			return nil
		}
		// prepare begins a checkpoint of j and uploads every task's part.
		prepare := func(t *rapid.T, j *wjob) uint64 {
			id := j.next
			j.next++
			if err := w.c.BeginCheckpoint(j.name, id); err != nil {
				t.Fatalf("begin %s/%d: %v", j.name, id, err)
			}
			w.states[ref{j.name, id}] = allStates(j)
			j.inflight[id] = map[backend.TaskID]*backend.Handle{}
			for _, tk := range j.tasks {
				tk.snapshot(id)
				h, err := tk.upload(ctx, w.fs, id)
				if err != nil {
					t.Fatal(err)
				}
				if err := w.c.AddTaskHandle(j.name, id, h); err != nil {
					t.Fatalf("add handle of %s to %d: %v", tk.task, id, err)
				}
				j.inflight[id][tk.task] = h
			}
			return id
		}
		savepoint := func(t *rapid.T, live bool) (string, error) {
			j := w.jobs[jobGen.Draw(t, "job")]
			w.spSeq++
			id := fmt.Sprintf("sp%d", w.spSeq)
			if !live {
				ids := w.c.Retained(j.name)
				if len(ids) == 0 {
					return "", nil
				}
				n := rapid.SampledFrom(ids).Draw(t, "checkpoint")
				w.spStat[id] = w.states[ref{j.name, n}]
				_, err := w.c.SavepointFromCheckpoint(ctx, id, j.name, n)
				return id, err
			}
			n := j.next
			j.next++
			if err := w.c.BeginCheckpoint(j.name, n); err != nil {
				t.Fatal(err)
			}
			var hs []*backend.Handle
			var err error
			for _, tk := range j.tasks {
				tk.snapshot(n)
				var h *backend.Handle
				if h, err = tk.upload(ctx, w.fs, n); err != nil {
					break // a crash test: the store is gone
				}
				hs = append(hs, h)
			}
			w.spStat[id] = allStates(j)
			if err == nil {
				_, err = w.c.TriggerSavepoint(ctx, SavepointRequest{ID: id, Job: j.name, CheckpointID: n, Handles: hs})
			}
			if rerr := w.c.Release(ctx, j.name, n); err == nil {
				err = rerr
			}
			for _, tk := range j.tasks {
				tk.notifyAborted(n)
			}
			return id, err
		}
		restore := func(t *rapid.T) error {
			j := w.jobs[jobGen.Draw(t, "target")]
			type src struct {
				job string
				id  uint64
				sp  string
			}
			var srcs []src
			for _, name := range w.jobNames() {
				for _, id := range w.c.Retained(name) {
					srcs = append(srcs, src{job: name, id: id})
				}
			}
			for _, m := range w.c.Savepoints() {
				srcs = append(srcs, src{sp: m.SavepointID})
			}
			if len(srcs) == 0 {
				return nil
			}
			s := rapid.SampledFrom(srcs).Draw(t, "source")
			mode := rapid.SampledFrom([]Mode{ModeClaim, ModeNoClaim}).Draw(t, "mode")
			w.abortAll(t, j)
			r, err := w.c.RestoreSource(ctx, RestoreRequest{Job: j.name, FromJob: s.job, CheckpointID: s.id, SavepointID: s.sp, Mode: mode})
			if err != nil {
				return err
			}
			want := w.states[ref{s.job, s.id}]
			if s.sp != "" {
				want = w.spStat[s.sp]
			}
			w.restoreTasks(t, j, r, want)
			j.base = nil
			if !r.NoClaim {
				j.base = r.Handles
			}
			return nil
		}

		t.Repeat(map[string]func(*rapid.T){
			"": func(t *rapid.T) { w.check(t) },
			"write": func(t *rapid.T) {
				j := w.jobs[jobGen.Draw(t, "job")]
				tk := j.tasks[rapid.IntRange(0, len(j.tasks)-1).Draw(t, "task")]
				k := rapid.SampledFrom([]string{"k1", "k2", "k3", "k4", "k5", "k6"}).Draw(t, "key")
				if rapid.IntRange(0, 4).Draw(t, "del") == 0 {
					delete(tk.state, k)
				} else {
					tk.state[k] = rapid.StringMatching(`[a-z]{1,8}`).Draw(t, "value")
				}
			},
			"begin": func(t *rapid.T) {
				j := w.jobs[jobGen.Draw(t, "job")]
				id := j.next
				j.next++
				if err := w.c.BeginCheckpoint(j.name, id); err != nil {
					t.Fatalf("begin %s/%d: %v", j.name, id, err)
				}
				for _, tk := range j.tasks {
					tk.snapshot(id)
				}
				w.states[ref{j.name, id}] = allStates(j)
				j.inflight[id] = map[backend.TaskID]*backend.Handle{}
			},
			"upload": func(t *rapid.T) {
				j := w.jobs[jobGen.Draw(t, "job")]
				ids := inflightIDs(j)
				if len(ids) == 0 {
					t.Skip("nothing in flight")
				}
				id := rapid.SampledFrom(ids).Draw(t, "checkpoint")
				for _, tk := range j.tasks {
					if j.inflight[id][tk.task] != nil {
						continue
					}
					h, err := tk.upload(ctx, w.fs, id)
					if err != nil {
						t.Fatal(err)
					}
					if err := w.c.AddTaskHandle(j.name, id, h); err != nil {
						t.Fatalf("add handle of %s to %d: %v", tk.task, id, err)
					}
					j.inflight[id][tk.task] = h
					return
				}
			},
			"checkpoint": func(t *rapid.T) {
				j := w.jobs[jobGen.Draw(t, "job")]
				id := prepare(t, j)
				if err := complete(t, j, id); err != nil {
					t.Fatalf("complete %s/%d: %v", j.name, id, err)
				}
			},
			"complete": func(t *rapid.T) {
				j := w.jobs[jobGen.Draw(t, "job")]
				var ready []uint64
				for _, id := range inflightIDs(j) {
					if len(j.inflight[id]) == len(j.tasks) {
						ready = append(ready, id)
					}
				}
				if len(ready) == 0 {
					t.Skip("nothing ready")
				}
				id := rapid.SampledFrom(ready).Draw(t, "checkpoint")
				if err := complete(t, j, id); err != nil {
					t.Fatalf("complete %s/%d: %v", j.name, id, err)
				}
				w.c.mu.Lock()
				n := 0
				for _, e := range w.c.mu.owned(j.name) {
					if !e.pinned {
						n++
					}
				}
				w.c.mu.Unlock()
				if n > w.c.opts.Retain {
					t.Fatalf("job %s owns %d unpinned checkpoints after a completion (retain %d)", j.name, n, w.c.opts.Retain)
				}
			},
			"abort": func(t *rapid.T) {
				j := w.jobs[jobGen.Draw(t, "job")]
				ids := inflightIDs(j)
				if len(ids) == 0 {
					t.Skip("nothing in flight")
				}
				id := rapid.SampledFrom(ids).Draw(t, "checkpoint")
				why := rapid.SampledFrom([]Status{StatusAborted, StatusDeclined, StatusExpired}).Draw(t, "why")
				if err := w.c.Abort(ctx, j.name, id, why, "test"); err != nil {
					t.Fatalf("abort: %v", err)
				}
				for _, tk := range j.tasks {
					tk.notifyAborted(id)
				}
				delete(j.inflight, id)
			},
			"savepoint": func(t *rapid.T) {
				if _, err := savepoint(t, rapid.Bool().Draw(t, "live")); err != nil {
					t.Fatalf("savepoint: %v", err)
				}
			},
			"deleteSavepoint": func(t *rapid.T) {
				sps := w.c.Savepoints()
				if len(sps) == 0 {
					t.Skip("no savepoint")
				}
				id := rapid.SampledFrom(sps).Draw(t, "savepoint").SavepointID
				before := referenced(w.manifestsInStore(t))
				if err := w.c.DeleteSavepoint(ctx, id); err != nil {
					t.Fatal(err)
				}
				for name := range before {
					if !strings.HasPrefix(name, SavepointDir(id)+"/") {
						if _, err := w.mem.Stat(ctx, name); err != nil {
							t.Fatalf("deleting savepoint %s removed %s", id, name)
						}
					}
				}
			},
			"restore": func(t *rapid.T) {
				if err := restore(t); err != nil {
					t.Fatalf("restore: %v", err)
				}
			},
			"advance": func(t *rapid.T) {
				w.clk.Advance(rapid.SampledFrom([]time.Duration{time.Minute, 20 * time.Minute, 2 * time.Hour}).Draw(t, "by"))
			},
			"gc": func(t *rapid.T) {
				_, err := w.c.GC(ctx, rapid.Bool().Draw(t, "dry"))
				if err != nil {
					t.Fatalf("gc: %v", err)
				}
			},
			"gcPastGrace": func(t *rapid.T) {
				w.clk.Advance(w.c.opts.GCGrace + modelTimeout + time.Minute)
				w.expireAll(t)
				if _, err := w.c.GC(ctx, false); err != nil {
					t.Fatalf("gc: %v", err)
				}
				ms := w.manifestsInStore(t)
				live := referenced(ms)
				w.baseFiles(live)
				err := tiered.Walk(ctx, w.mem, "", func(o tiered.ObjectInfo) error {
					k := classify(o.Name).kind
					if k != objJobFile && !live[o.Name] {
						return fmt.Errorf("unreferenced %s survives a gc past the grace period", o.Name)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			},
			"crash": func(t *rapid.T) { w.crash(t) },
			"crashDuring": func(t *rapid.T) {
				// The first calls of an operation are where the ordering
				// matters (manifest before data), so crash there most.
				k := rapid.SampledFrom([]int{0, 1, 1, 1, 2, 2, 3, 4, 6}).Draw(t, "after")
				land := rapid.IntRange(0, 2).Draw(t, "land") > 0
				op := rapid.SampledFrom([]string{"complete", "abort", "gc", "savepoint", "deleteSavepoint", "restore"}).Draw(t, "op")
				j := w.jobs[jobGen.Draw(t, "job")]
				if op == "gc" {
					w.clk.Advance(w.c.opts.GCGrace + modelTimeout + time.Minute)
					w.expireAll(t)
				}
				if op == "complete" {
					prepare(t, j) // something to complete, and so retention to apply
				}
				w.fs.arm(k, land)
				switch op {
				case "complete":
					_ = complete(t, j, j.next-1)
				case "abort":
					for _, id := range inflightIDs(j) {
						_ = w.c.Abort(ctx, j.name, id, StatusAborted, "crash test")
						break
					}
				case "gc":
					_, _ = w.c.GC(ctx, false)
				case "savepoint":
					_, _ = savepoint(t, rapid.Bool().Draw(t, "live"))
				case "deleteSavepoint":
					if sps := w.c.Savepoints(); len(sps) > 0 {
						_ = w.c.DeleteSavepoint(ctx, sps[0].SavepointID)
					}
				case "restore":
					// A crashed store fails the restore's reads, so only the
					// ownership bookkeeping is exercised; state is checked
					// by the restart.
					_ = restoreNoCheck(ctx, w, t)
				}
				w.crash(t)
			},
		})
	})
}

// restoreNoCheck asks for a claim restore of another job's checkpoint (the
// path that writes two job files) without restoring tasks.
func restoreNoCheck(ctx context.Context, w *world, t *rapid.T) error {
	var srcs []ref
	for _, name := range w.jobNames() {
		for _, id := range w.c.Retained(name) {
			srcs = append(srcs, ref{name, id})
		}
	}
	if len(srcs) == 0 {
		return nil
	}
	sort.Slice(srcs, func(i, j int) bool { return srcs[i].String() < srcs[j].String() })
	s := rapid.SampledFrom(srcs).Draw(t, "source")
	target := "a"
	if s.job == "a" {
		target = "b"
	}
	_, err := w.c.RestoreSource(ctx, RestoreRequest{Job: target, FromJob: s.job, CheckpointID: s.id, Mode: ModeClaim})
	return err
}
