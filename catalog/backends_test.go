package catalog

import (
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/file"
	"github.com/statedhq/stated/backend/heap"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// These tests run the catalog with the real backends: restores must give
// back exactly what was written, whatever the backend kind.

var testStates = []backend.StateDescriptor{
	{Name: "a", Kind: backend.KindAggregate, Aggregate: backend.AggSum, Number: backend.NumInt64},
	{Name: "l", Kind: backend.KindList},
	{Name: "m", Kind: backend.KindMap},
	{Name: "t", Kind: backend.KindTimers},
	{Name: "v", Kind: backend.KindValue},
}

// kvModel is the expected content of a task, in the same canonical form
// dumpState reads back: one string per entry.
type kvModel map[string]string

// kvOp is one write, applied to a backend and to a model alike.
type kvOp struct {
	kind    int // 0 put, 1 delete, 2 list append, 3 map put, 4 map remove, 5 add, 6 timer, 7 delete timer
	kg      int
	key, uk string
	val     string
	n       int64
}

func (o kvOp) apply(b backend.Backend, m kvModel) error {
	k := backend.Key{KeyGroup: o.kg, Key: []byte(o.key)}
	p := fmt.Sprintf("%d/%s", o.kg, o.key)
	var err error
	switch o.kind {
	case 0:
		err = b.Put("v", k, []byte(o.val))
		m["v/"+p] = o.val
	case 1:
		err = b.Delete("v", k)
		delete(m, "v/"+p)
	case 2:
		err = b.ListAppend("l", k, []byte(o.val))
		if old, ok := m["l/"+p]; ok {
			m["l/"+p] = old + "," + o.val
		} else {
			m["l/"+p] = o.val
		}
	case 3:
		err = b.MapPut("m", k, []byte(o.uk), []byte(o.val))
		m["m/"+p+"/"+o.uk] = o.val
	case 4:
		err = b.MapRemove("m", k, []byte(o.uk))
		delete(m, "m/"+p+"/"+o.uk)
	case 5:
		err = b.AggregateAdd("a", k, backend.Int64(o.n))
		var old int64
		if s, ok := m["a/"+p]; ok {
			fmt.Sscan(s, &old)
		}
		m["a/"+p] = fmt.Sprint(old + o.n)
	case 6:
		err = b.RegisterTimer("t", backend.Timer{KeyGroup: o.kg, Key: []byte(o.key), Timestamp: o.n})
		m[fmt.Sprintf("t/%s/%d", p, o.n)] = "1"
	case 7:
		err = b.DeleteTimer("t", backend.Timer{KeyGroup: o.kg, Key: []byte(o.key), Timestamp: o.n})
		delete(m, fmt.Sprintf("t/%s/%d", p, o.n))
	}
	return err
}

var testKeys = []string{"k0", "k1", "k2", "k3", "k4", "k5"}

// dumpState reads everything in the key domain back through the Backend
// API. It polls the timers, so it is only run on throwaway instances.
func dumpState(b backend.Backend, kgs []int) (kvModel, error) {
	m := kvModel{}
	for _, kg := range kgs {
		for _, key := range testKeys {
			k := backend.Key{KeyGroup: kg, Key: []byte(key)}
			p := fmt.Sprintf("%d/%s", kg, key)
			if v, ok, err := b.Get("v", k); err != nil {
				return nil, err
			} else if ok {
				m["v/"+p] = string(v)
			}
			l, err := b.ListGet("l", k)
			if err != nil {
				return nil, err
			}
			if len(l) > 0 {
				parts := make([]string, len(l))
				for i, e := range l {
					parts[i] = string(e)
				}
				m["l/"+p] = strings.Join(parts, ",")
			}
			es, _, err := b.MapIterate("m", k, nil, 0)
			if err != nil {
				return nil, err
			}
			for _, e := range es {
				m["m/"+p+"/"+string(e.UserKey)] = string(e.Value)
			}
			if n, ok, err := b.AggregateGet("a", k); err != nil {
				return nil, err
			} else if ok {
				m["a/"+p] = fmt.Sprint(n.Int)
			}
		}
	}
	ts, err := b.PollTimers("t", math.MaxInt64, 0)
	if err != nil {
		return nil, err
	}
	for _, t := range ts {
		m[fmt.Sprintf("t/%d/%s/%d", t.KeyGroup, t.Key, t.Timestamp)] = "1"
	}
	return m, nil
}

// instance opens backends of one kind for tests.
type instance struct {
	heapStore *memstore.Store
}

// tb is what the helpers need of *testing.T and *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

func (in *instance) open(t tb, kind backend.Kind, opts backend.Options) backend.Backend {
	t.Helper()
	opts.States = testStates
	var b backend.Backend
	var err error
	switch kind {
	case backend.KindHeap:
		b, err = heap.Open(opts, heap.Options{Snapshots: in.heapStore})
	case backend.KindFile:
		b, err = file.Open(opts, file.Options{})
	case backend.KindLSM:
		b, err = lsm.Open(opts, lsm.Options{Dir: "/lsm", FS: vfs.NewMem(), CacheSize: 1 << 20, MemTableSize: 1 << 20})
	}
	if err != nil {
		t.Fatalf("open %s: %v", kind, err)
	}
	return b
}

// snapshotRun takes and uploads one snapshot.
func snapshotRun(t testing.TB, b backend.Backend, id uint64) *backend.Handle {
	t.Helper()
	p, err := b.Snapshot(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	h, err := p.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// realCheckpoint runs checkpoint id of one backend through the catalog.
func realCheckpoint(t testing.TB, c *Catalog, b backend.Backend, id uint64) *Manifest {
	t.Helper()
	job := b.Info().Task.Job
	if err := c.BeginCheckpoint(job, id); err != nil {
		t.Fatal(err)
	}
	if err := c.AddTaskHandle(job, id, snapshotRun(t, b, id)); err != nil {
		t.Fatal(err)
	}
	m, err := c.Complete(ctx, job, id)
	if err != nil {
		t.Fatal(err)
	}
	b.NotifyCheckpointComplete(id)
	return m
}

var allKGs = []int{0, 37, 64, 127}

func writeSome(t testing.TB, b backend.Backend, m kvModel, seed int) {
	t.Helper()
	for i := 0; i < 40; i++ {
		x := seed*1000 + i
		op := kvOp{kind: x % 8, kg: allKGs[x%len(allKGs)], key: testKeys[(x/3)%len(testKeys)],
			uk: fmt.Sprint("u", x%3), val: fmt.Sprint("s", seed, "-", i), n: int64(x%5 + 1)}
		if err := op.apply(b, m); err != nil {
			t.Fatal(err)
		}
	}
}

func taskOpts(job string, s tiered.Store) backend.Options {
	return backend.Options{Task: backend.TaskID{Job: job, Operator: "op", Subtask: 0},
		KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, MaxParallelism: 128, Store: s}
}

// TestCanonicalSavepointAcrossBackends: a canonical savepoint taken from
// lsm restores into heap and file with identical contents, also after the
// savepoint directory was moved; and one taken from heap restores into lsm.
func TestCanonicalSavepointAcrossBackends(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk)
	in := &instance{heapStore: memstore.New()}
	want := kvModel{}
	src := in.open(t, backend.KindLSM, taskOpts("j", s))
	defer src.Close()
	writeSome(t, src, want, 1)
	realCheckpoint(t, c, src, 1) // SSTs on disk and in the store, then more in the memtable
	writeSome(t, src, want, 2)

	if len(want) < 20 {
		t.Fatalf("the test writes too little: %v", want)
	}
	sp, err := c.TriggerSavepoint(ctx, SavepointRequest{ID: "from-lsm", Job: "j", CheckpointID: 2,
		Format: FormatCanonical, Backends: []backend.Backend{src}})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := c.VerifySavepoint(ctx, sp.SavepointID); err != nil || !rep.OK() {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	r, err := c.RestoreSource(ctx, RestoreRequest{Job: "j2", SavepointID: "from-lsm"})
	if err != nil {
		t.Fatal(err)
	}
	rm, err := LoadSavepoint(ctx, relocate(t, s, "savepoints/from-lsm/"))
	if err != nil {
		t.Fatal(err)
	}
	var fromHeap backend.Backend
	for _, kind := range []backend.Kind{backend.KindHeap, backend.KindFile, backend.KindLSM} {
		for _, src := range []*Restore{r, rm} {
			o := taskOpts("j2", s)
			o.Restore, o.RestoreStore, o.NoClaim = src.Handles, src.Store, src.NoClaim
			b := in.open(t, kind, o)
			got, err := dumpState(b, allKGs)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s restored from the canonical savepoint of lsm:\n got %v\nwant %v", kind, got, want)
			}
			b.Close()
		}
		if kind == backend.KindHeap {
			o := taskOpts("j2", s)
			o.Restore, o.RestoreStore, o.NoClaim = r.Handles, r.Store, true
			fromHeap = in.open(t, kind, o)
		}
	}
	// And back: heap -> canonical savepoint -> lsm.
	defer fromHeap.Close()
	if _, err := c.TriggerSavepoint(ctx, SavepointRequest{ID: "from-heap", Job: "j2", CheckpointID: 1,
		Format: FormatCanonical, Backends: []backend.Backend{fromHeap}}); err != nil {
		t.Fatal(err)
	}
	r2, err := c.RestoreSource(ctx, RestoreRequest{Job: "j3", SavepointID: "from-heap"})
	if err != nil {
		t.Fatal(err)
	}
	checkRestored(t, in, "j3", r2, want, "lsm restored from the canonical savepoint of heap")
}

// relocate copies the objects under dir into a new store, rooted there.
func relocate(t *testing.T, s tiered.Store, dir string) tiered.Store {
	t.Helper()
	moved := memstore.New()
	for name, data := range storeSnapshot(t, s, dir) {
		if err := tiered.PutBytes(ctx, moved, strings.TrimPrefix(name, dir), []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	return moved
}

// checkRestored restores job's task into lsm from r and compares it with
// want.
func checkRestored(t *testing.T, in *instance, job string, r *Restore, want kvModel, what string) {
	t.Helper()
	o := taskOpts(job, r.Store)
	o.Restore, o.RestoreStore, o.NoClaim = r.Handles, r.Store, r.NoClaim
	b := in.open(t, backend.KindLSM, o)
	defer b.Close()
	got, err := dumpState(b, allKGs)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: %v\n got %v\nwant %v", what, err, got, want)
	}
}

// TestNoClaimRestoreLSM is the no-claim rule with the incremental backend:
// after restoring no-claim and completing new checkpoints, the original
// checkpoint's directory and files are byte-for-byte unchanged and no new
// checkpoint references any of its files.
func TestNoClaimRestoreLSM(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk)
	in := &instance{}
	model := kvModel{}
	a := in.open(t, backend.KindLSM, taskOpts("j", s))
	writeSome(t, a, model, 1)
	realCheckpoint(t, c, a, 1)
	writeSome(t, a, model, 2)
	orig := realCheckpoint(t, c, a, 2)
	a.Close()
	at2 := maps.Clone(model)
	origFiles := map[string]string{}
	for _, p := range filesOf(orig) {
		origFiles[p] = storeSnapshot(t, s, p)[p]
	}
	origDir := storeSnapshot(t, s, CheckpointDir("j", 2)+"/")
	shared := 0
	for _, h := range orig.Tasks {
		for _, f := range h.Files {
			if f.Shared {
				shared++
			}
		}
	}
	if shared == 0 || len(origDir) == 0 {
		t.Fatalf("checkpoint 2 has %d shared files and %d private objects; the test needs both", shared, len(origDir))
	}

	r, err := c.RestoreSource(ctx, RestoreRequest{Job: "j", CheckpointID: 2, Mode: ModeNoClaim})
	if err != nil {
		t.Fatal(err)
	}
	o := taskOpts("j", s)
	o.Restore, o.RestoreStore, o.NoClaim = r.Handles, r.Store, r.NoClaim
	b := in.open(t, backend.KindLSM, o)
	var news []*Manifest
	for id := uint64(3); id <= 6; id++ {
		writeSome(t, b, model, int(id))
		news = append(news, realCheckpoint(t, c, b, id))
	}
	b.Close()
	for _, m := range news {
		for _, p := range filesOf(m) {
			if _, ok := origFiles[p]; ok {
				t.Fatalf("checkpoint %d references %s of the no-claim source", m.CheckpointID, p)
			}
		}
	}
	clk.Advance(5 * 3600e9)
	if _, err := c.GC(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got := storeSnapshot(t, s, CheckpointDir("j", 2)+"/"); !reflect.DeepEqual(got, origDir) {
		t.Fatal("the no-claim source's directory changed")
	}
	for p, data := range origFiles {
		if got := storeSnapshot(t, s, p)[p]; got != data {
			t.Fatalf("file %s of the no-claim source changed or vanished", p)
		}
	}
	// It still restores to what it held.
	o = taskOpts("j", s)
	o.Restore, o.RestoreStore, o.NoClaim = r.Handles, r.Store, true
	chk := in.open(t, backend.KindLSM, o)
	got, err := dumpState(chk, allKGs)
	chk.Close()
	if err != nil || !reflect.DeepEqual(got, at2) {
		t.Fatalf("no-claim source restores to %v (%v), want %v", got, err, at2)
	}

	// Claim the newest: the next checkpoint may build on its files (the
	// catalog accepts references to them; whether lsm reuses a file depends
	// on its compactions, which the lsm tests cover), and it restores to
	// the model.
	r, err = c.RestoreSource(ctx, RestoreRequest{Job: "j", Mode: ModeClaim})
	if err != nil {
		t.Fatal(err)
	}
	o = taskOpts("j", s)
	o.Restore, o.RestoreStore, o.NoClaim = r.Handles, r.Store, r.NoClaim
	d := in.open(t, backend.KindLSM, o)
	writeSome(t, d, model, 9)
	realCheckpoint(t, c, d, 7)
	d.Close()
	if rep, err := c.Verify(ctx, "j", 7); err != nil || !rep.OK() {
		t.Fatalf("verify 7: %+v %v", rep, err)
	}
	r, err = c.RestoreSource(ctx, RestoreRequest{Job: "j", CheckpointID: 7, Mode: ModeNoClaim})
	if err != nil {
		t.Fatal(err)
	}
	o = taskOpts("j", s)
	o.Restore, o.RestoreStore, o.NoClaim = r.Handles, r.Store, r.NoClaim
	chk = in.open(t, backend.KindLSM, o)
	got, err = dumpState(chk, allKGs)
	chk.Close()
	if err != nil || !reflect.DeepEqual(got, model) {
		t.Fatalf("checkpoint 7 restores to %v (%v), want %v", got, err, model)
	}
}

// TestHeapCheckpointsAndNativeSavepoint: heap snapshots live in the heap
// backend's own store; the catalog records them without touching their
// files, and a native savepoint copies them out of that store, after which
// the savepoint restores without it.
func TestHeapCheckpointsAndNativeSavepoint(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk)
	in := &instance{heapStore: memstore.New()}
	model := kvModel{}
	b := in.open(t, backend.KindHeap, taskOpts("j", s))
	defer b.Close()
	writeSome(t, b, model, 1)
	m := realCheckpoint(t, c, b, 1)
	if len(storeSnapshot(t, s, "j/chk-1/")) != 1 { // only the manifest
		t.Fatalf("heap files in the checkpoint store: %v", names(storeSnapshot(t, s, "j/")))
	}
	clk.Advance(5 * 3600e9)
	if _, err := c.GC(ctx, false); err != nil {
		t.Fatal(err)
	}
	if rep, err := c.Verify(ctx, "j", 1); err != nil || !rep.OK() || rep.Skipped != len(filesOf(m)) {
		t.Fatalf("verify of a heap checkpoint: %+v %v", rep, err)
	}
	if _, err := c.TriggerSavepoint(ctx, SavepointRequest{ID: "heap-sp", Job: "j", CheckpointID: 1,
		Handles: m.Tasks, Source: in.heapStore}); err != nil {
		t.Fatal(err)
	}
	r, err := c.RestoreSource(ctx, RestoreRequest{Job: "j", SavepointID: "heap-sp"})
	if err != nil {
		t.Fatal(err)
	}
	fresh := &instance{heapStore: memstore.New()} // a new daemon: the old snapshots are gone
	o := taskOpts("j", s)
	o.Restore, o.RestoreStore, o.NoClaim = r.Handles, r.Store, r.NoClaim
	rb := fresh.open(t, backend.KindHeap, o)
	defer rb.Close()
	got, err := dumpState(rb, allKGs)
	if err != nil || !reflect.DeepEqual(got, model) {
		t.Fatalf("heap restored from its native savepoint: %v\n got %v\nwant %v", err, got, model)
	}
}

// TestNativeSavepointLSMRelocatable: a native savepoint of a real lsm
// backend (incremental: its snapshot reuses SSTs of checkpoint 1) is
// self-contained. Once every checkpoint of the job is gone and a GC past
// the grace period ran, the savepoint still verifies and, moved to another
// store, restores into lsm with the state at the savepoint; the next
// incremental checkpoint of the source still builds on checkpoint 1, not
// on the savepoint (FLINK-23949).
func TestNativeSavepointLSMRelocatable(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk)
	in := &instance{}
	want := kvModel{}
	src := in.open(t, backend.KindLSM, taskOpts("j", s))
	defer src.Close()
	writeSome(t, src, want, 1)
	m1 := realCheckpoint(t, c, src, 1)
	// No write in between: the savepoint's snapshot reuses checkpoint 1's
	// tables (with writes, a compaction of this tiny store may rewrite
	// them all).
	atSavepoint := maps.Clone(want)

	// The savepoint's snapshot runs as checkpoint 2, released afterwards.
	if err := c.BeginCheckpoint("j", 2); err != nil {
		t.Fatal(err)
	}
	h := snapshotRun(t, src, 2)
	reused := 0
	for _, f := range h.Files {
		if slices.Contains(filesOf(m1), f.Path) {
			reused++
		}
	}
	if reused == 0 {
		t.Fatalf("the savepoint's snapshot reuses no file of checkpoint 1; the test shows nothing of an incremental source: %v vs %v", filesOf(m1), h.Files)
	}
	if _, err := c.TriggerSavepoint(ctx, SavepointRequest{ID: "native-lsm", Job: "j", CheckpointID: 2, Handles: []*backend.Handle{h}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx, "j", 2); err != nil {
		t.Fatal(err)
	}
	src.NotifyCheckpointAborted(2)

	// The next checkpoint builds on checkpoint 1, not on the savepoint.
	writeSome(t, src, want, 2)
	m3 := realCheckpoint(t, c, src, 3)
	for _, f := range filesOf(m3) {
		if strings.HasPrefix(f, SavepointsDir+"/") {
			t.Fatalf("checkpoint 3 references savepoint file %s", f)
		}
	}
	// Drop every checkpoint of the job and collect everything past grace.
	for _, id := range c.Retained("j") {
		if err := c.DeleteCheckpoint(ctx, "j", id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.RestoreSource(ctx, RestoreRequest{Job: "j", SavepointID: "native-lsm"}); err != nil {
		t.Fatal(err) // moves j's base off its deleted checkpoint
	}
	clk.Advance(5 * time.Hour)
	if _, err := c.GC(ctx, false); err != nil {
		t.Fatal(err)
	}
	if left := storeSnapshot(t, s, "j/shared/"); len(left) != 0 {
		t.Fatalf("shared files of the job survive the deletion of all its checkpoints: %v", names(left))
	}
	if rep, err := c.VerifySavepoint(ctx, "native-lsm"); err != nil || !rep.OK() {
		t.Fatalf("verify the savepoint after its checkpoints are gone: %+v %v", rep, err)
	}
	r, err := LoadSavepoint(ctx, relocate(t, s, "savepoints/native-lsm/"))
	if err != nil {
		t.Fatal(err)
	}
	checkRestored(t, in, "j2", r, atSavepoint, "lsm restored from its moved native savepoint")
}
