package changelog_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/backendtest"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/dstl"
	"github.com/statedhq/stated/dstl/changelog"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// env is a plain-test world: one heap-inner instance over a shared writer
// with small segments.
type env struct {
	t     *testing.T
	ctx   context.Context
	store *memstore.Store
	ls    dstl.LogStore
	w     *dstl.Writer
	clock *backendtest.Clock
	ids   uint64
	// kind is the inner backend (default heap); inner, when set, opens
	// it instead.
	kind  backend.Kind
	inner func(testing.TB, backend.Options) (backend.Backend, error)
}

func newEnv(t *testing.T) *env {
	ls := dstl.TieredLogStore{Store: memstore.New()}
	w, err := dstl.NewWriter(ls, dstl.Options{FlushDelay: time.Millisecond, BlockSize: 256, FlushSize: 1024, PreemptiveFlushSize: 512})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return &env{t: t, ctx: context.Background(), store: memstore.New(), ls: ls, w: w, clock: backendtest.NewClock()}
}

func (e *env) open(restore ...*backend.Handle) *changelog.Backend {
	b, err := changelog.Open(backend.Options{
		Task: propTask, KeyGroups: backend.KeyGroupRange{Start: 0, End: propMaxP - 1}, MaxParallelism: propMaxP,
		States: propStates, Store: e.store, Clock: e.clock.Now, Restore: restore,
	}, changelog.Options{
		OpenInner: func(o backend.Options) (backend.Backend, error) {
			if e.inner != nil {
				return e.inner(e.t, o)
			}
			kind := e.kind
			if kind == "" {
				kind = backend.KindHeap
			}
			return inners[kind](e.t, o)
		},
		Writer: e.w, Log: e.ls,
	})
	if err != nil {
		e.t.Fatalf("open: %v", err)
	}
	e.t.Cleanup(func() { _ = b.Close() })
	return b
}

func (e *env) checkpoint(b *changelog.Backend) (*backend.Handle, *changelog.Layout) {
	e.t.Helper()
	e.ids++
	p, err := b.Snapshot(e.ctx, e.ids)
	if err != nil {
		e.t.Fatalf("snapshot %d: %v", e.ids, err)
	}
	h, err := p.Run(e.ctx)
	if err != nil {
		e.t.Fatalf("snapshot %d: run: %v", e.ids, err)
	}
	l, err := changelog.ReadLayout(e.ctx, e.store, h)
	if err != nil {
		e.t.Fatalf("layout of %d: %v", e.ids, err)
	}
	return h, l
}

// puts writes n values and mirrors them in m.
func (e *env) puts(b *changelog.Backend, m *backendtest.Model, n int) {
	e.t.Helper()
	for i := 0; i < n; i++ {
		k := backend.Key{KeyGroup: i % propMaxP, Key: []byte(fmt.Sprint(i % 37))}
		v := []byte(strings.Repeat(fmt.Sprint(i), 8))
		if err := b.Put("v", k, v); err != nil {
			e.t.Fatal(err)
		}
		m.Put("v", k, v, e.clock.Ms())
	}
}

// logFrom is the first seq the writer still holds for b: where it was
// truncated.
func (e *env) logFrom(b *changelog.Backend) uint64 {
	e.t.Helper()
	h, err := e.w.Persist(e.ctx, b.WriterID(), math.MaxUint64)
	if err != nil {
		e.t.Fatal(err)
	}
	return h.From
}

func baseDir(l *changelog.Layout) string {
	if len(l.Base.Files) == 0 {
		return ""
	}
	f := l.Base.Files[0].Path
	return f[:strings.LastIndex(f, "/")]
}

func (e *env) check(h *backend.Handle, m *backendtest.Model, what string) {
	e.t.Helper()
	checkValues(e.t, e.open(h), m, e.clock.Ms(), what)
}

// checkValues compares every key puts writes with the model at now.
func checkValues(t interface {
	Helper()
	Fatalf(string, ...any)
}, b backend.Backend, m *backendtest.Model, now int64, what string) {
	t.Helper()
	for kg := 0; kg < propMaxP; kg++ {
		for i := 0; i < 37; i++ {
			k := backend.Key{KeyGroup: kg, Key: []byte(fmt.Sprint(i))}
			got, ok, err := b.Get("v", k)
			want, wok := m.Get("v", k, now)
			if err != nil || ok != wok || string(got) != string(want) {
				t.Fatalf("%s: %v: got %q %v %v, want %q %v", what, k, got, ok, err, want, wok)
			}
		}
	}
}

// TestMaterializeTruncates: the first checkpoint takes the base; later
// ones add log; a materialization becomes the next checkpoint's base
// without being uploaded by it, and once that checkpoint completes the log
// before the base is truncated and its segments released.
func TestMaterializeTruncates(t *testing.T) {
	e := newEnv(t)
	b := e.open()
	m := backendtest.NewModel(propStates...)
	e.puts(b, m, 200)
	h1, l1 := e.checkpoint(b)
	if l1.BaseSeq != 200 || l1.Log != nil || h1.CheckpointedSize != h1.FullSize {
		t.Fatalf("first checkpoint: base seq %d, log %+v, checkpointed %d of %d; want a base at 200 it uploaded, no log",
			l1.BaseSeq, l1.Log, h1.CheckpointedSize, h1.FullSize)
	}
	m1 := m.Clone()
	if !changelog.IsChangelog(h1) {
		t.Fatal("IsChangelog is false for a changelog handle")
	}
	if got := e.logFrom(b); got != 1 {
		t.Fatalf("log starts at %d before any confirmation, want 1", got)
	}
	b.NotifyCheckpointComplete(h1.CheckpointID)
	if got := e.logFrom(b); got != 201 {
		t.Fatalf("log starts at %d after the first checkpoint completed, want 201", got)
	}
	if rel := e.w.TakeReleased(); len(rel) == 0 {
		t.Fatal("truncating 200 changes released no segment")
	}
	e.puts(b, m, 100)
	h2, l2 := e.checkpoint(b)
	if baseDir(l2) != baseDir(l1) || l2.Log == nil || l2.Log.From != 201 || l2.Log.To != 300 {
		t.Fatalf("second checkpoint: base %s (first %s), log %+v; want the confirmed first base and log 201..300", baseDir(l2), baseDir(l1), l2.Log)
	}
	m2 := m.Clone()
	e.puts(b, m, 50)
	if err := b.Materialize(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.puts(b, m, 10)
	h3, l3 := e.checkpoint(b)
	if l3.BaseSeq != 350 || baseDir(l3) == baseDir(l1) || l3.Log == nil || l3.Log.From != 351 || l3.Log.To != 360 {
		t.Fatalf("checkpoint after a materialization: base %s at %d, log %+v; want a new base at 350 and log 351..360", baseDir(l3), l3.BaseSeq, l3.Log)
	}
	if h3.CheckpointedSize >= h3.FullSize {
		t.Fatalf("checkpoint after a materialization uploaded %d of %d bytes: it must only reference the base", h3.CheckpointedSize, h3.FullSize)
	}
	b.NotifyCheckpointComplete(h3.CheckpointID)
	if got := e.logFrom(b); got != 351 {
		t.Fatalf("log starts at %d after the checkpoint with the new base completed, want 351", got)
	}
	if st := b.Stats(); st != (changelog.Stats{LastSeq: 360, TruncatedSeq: 350, ConfirmedBaseSeq: 350, Materializations: 2}) {
		t.Fatalf("stats %+v", st)
	}
	e.check(h1, m1, "first checkpoint")
	e.check(h2, m2, "second checkpoint")
	e.check(h3, m, "third checkpoint")
}

// TestSavepointKeepsMaterialization is FLINK-40302: a savepoint between a
// materialization and the next checkpoint neither takes nor consumes a
// materialization, so that checkpoint still uses it and confirms it.
func TestSavepointKeepsMaterialization(t *testing.T) {
	e := newEnv(t)
	b := e.open()
	m := backendtest.NewModel(propStates...)
	e.puts(b, m, 50)
	h1, l1 := e.checkpoint(b)
	b.NotifyCheckpointComplete(h1.CheckpointID)
	e.puts(b, m, 50)
	if err := b.Materialize(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.puts(b, m, 5)
	e.ids++
	sp := memstore.New()
	p, err := b.CanonicalSnapshot(e.ctx, e.ids, sp, "savepoints/sp-1")
	if err != nil {
		t.Fatal(err)
	}
	sh, err := p.Run(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sh.Backend != backend.KindFile || sh.CheckpointID != e.ids || changelog.IsChangelog(sh) {
		t.Fatalf("savepoint handle %s checkpoint %d: want a plain canonical handle of checkpoint %d", sh.Backend, sh.CheckpointID, e.ids)
	}
	e.puts(b, m, 5)
	h2, l2 := e.checkpoint(b)
	if l2.BaseSeq != 100 || baseDir(l2) == baseDir(l1) || !strings.HasSuffix(baseDir(l2), "-2/op-0") {
		t.Fatalf("checkpoint after a savepoint: base %s at seq %d; want materialization 2 at seq 100", baseDir(l2), l2.BaseSeq)
	}
	b.NotifyCheckpointComplete(h2.CheckpointID)
	if got := e.logFrom(b); got != 101 {
		t.Fatalf("log starts at %d after the checkpoint completed, want 101: the materialization was not confirmed", got)
	}
	if err := b.Materialize(e.ctx); err != nil {
		t.Fatal(err)
	}
	_, l3 := e.checkpoint(b)
	if !strings.HasSuffix(baseDir(l3), "-3/op-0") {
		t.Fatalf("next materialization is %s, want number 3: a savepoint must not consume one", baseDir(l3))
	}
	e.check(h2, m, "checkpoint after the savepoint")
}

// TestAbortedBaseNotReused: a materialization claimed by a checkpoint
// that is aborted may have been deleted by the registry, so no later
// checkpoint references it.
func TestAbortedBaseNotReused(t *testing.T) {
	e := newEnv(t)
	b := e.open()
	m := backendtest.NewModel(propStates...)
	e.puts(b, m, 30)
	h1, l1 := e.checkpoint(b)
	b.NotifyCheckpointComplete(h1.CheckpointID)
	e.puts(b, m, 30)
	if err := b.Materialize(e.ctx); err != nil {
		t.Fatal(err)
	}
	h2, l2 := e.checkpoint(b)
	if baseDir(l2) == baseDir(l1) {
		t.Fatal("the checkpoint after a materialization did not use it")
	}
	b.NotifyCheckpointAborted(h2.CheckpointID)
	for _, f := range l2.Base.Files {
		_ = e.store.Delete(e.ctx, f.Path) // the registry's part
	}
	e.puts(b, m, 3)
	h3, l3 := e.checkpoint(b)
	if baseDir(l3) != baseDir(l1) || l3.Log == nil || l3.Log.From != 31 {
		t.Fatalf("after the abort the base is %s with log %+v; want the confirmed %s and the log after it", baseDir(l3), l3.Log, baseDir(l1))
	}
	e.check(h3, m, "checkpoint after an aborted one")
}

// openHeapForBigChanges opens a heap instance in changelog mode whose
// values may be larger than the log takes (dstl.MaxChangeSize); it closes
// with the test.
func (e *env) openHeapForBigChanges(t *testing.T) *changelog.Backend {
	t.Helper()
	b, err := changelog.Open(backend.Options{
		Task: propTask, KeyGroups: backend.KeyGroupRange{Start: 0, End: propMaxP - 1}, MaxParallelism: propMaxP,
		States: propStates, Store: e.store, Clock: e.clock.Now, MaxValueSize: dstl.MaxChangeSize + 1024,
	}, changelog.Options{
		OpenInner: func(o backend.Options) (backend.Backend, error) { return inners[backend.KindHeap](t, o) },
		Writer:    e.w, Log: e.ls,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// TestRefusedChangeRematerializes: a change the log refuses (larger than
// dstl.MaxChangeSize) is applied but not logged, so the instance drops its
// base and the next checkpoint materializes a view that holds it.
func TestRefusedChangeRematerializes(t *testing.T) {
	e := newEnv(t)
	b := e.openHeapForBigChanges(t)
	m := backendtest.NewModel(propStates...)
	e.puts(b, m, 20)
	h1, l1 := e.checkpoint(b)
	b.NotifyCheckpointComplete(h1.CheckpointID)
	big := make([]byte, dstl.MaxChangeSize)
	k := backend.Key{KeyGroup: 3, Key: []byte("big")}
	if err := b.Put("v", k, big); err != nil {
		t.Fatal(err)
	}
	m.Put("v", k, big, e.clock.Ms())
	e.puts(b, m, 5)
	h2, l2 := e.checkpoint(b)
	if baseDir(l2) == baseDir(l1) || l2.BaseSeq != 25 || l2.Log != nil {
		t.Fatalf("after a refused change: base %s at %d, log %+v; want a new base at seq 25 (the refused change has no seq) and no log",
			baseDir(l2), l2.BaseSeq, l2.Log)
	}
	e.check(h2, m, "checkpoint after a refused change")
	r := e.open(h2)
	if got, ok, err := r.Get("v", k); err != nil || !ok || len(got) != len(big) {
		t.Fatalf("restored big value: %d bytes, %v, %v; want %d bytes", len(got), ok, err, len(big))
	}
}

// TestDamagedLogFailsRestore: a flipped byte in a log segment fails the
// restore with ErrCorrupt, a missing segment with ErrNotFound; neither
// restores a partial state.
func TestDamagedLogFailsRestore(t *testing.T) {
	e := newEnv(t)
	b := e.open()
	m := backendtest.NewModel(propStates...)
	e.puts(b, m, 10)
	h1, _ := e.checkpoint(b)
	b.NotifyCheckpointComplete(h1.CheckpointID)
	e.puts(b, m, 40)
	h2, l2 := e.checkpoint(b)
	if l2.Log == nil || len(l2.Log.Ranges) == 0 {
		t.Fatalf("no log in %+v", l2)
	}
	r := l2.Log.Ranges[0]
	raw, err := e.ls.GetRange(e.ctx, r.Segment, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	var orig []byte
	if orig, err = io.ReadAll(raw); err != nil {
		t.Fatal(err)
	}
	_ = raw.Close()
	restore := func() error {
		rb, err := changelog.Open(backend.Options{
			Task: propTask, KeyGroups: backend.KeyGroupRange{Start: 0, End: propMaxP - 1}, MaxParallelism: propMaxP,
			States: propStates, Store: e.store, Clock: e.clock.Now, Restore: []*backend.Handle{h2},
		}, changelog.Options{
			OpenInner: func(o backend.Options) (backend.Backend, error) { return inners[backend.KindHeap](t, o) },
			Writer:    e.w, Log: e.ls,
		})
		if err == nil {
			_ = rb.Close()
		}
		return err
	}
	bad := bytes.Clone(orig)
	bad[r.Offset+r.Length/2] ^= 0x40
	if err := e.ls.Put(e.ctx, r.Segment, bad); err != nil {
		t.Fatal(err)
	}
	if err := restore(); !errors.Is(err, backend.ErrCorrupt) {
		t.Fatalf("restore with a flipped byte in %s: %v, want ErrCorrupt", r.Segment, err)
	}
	if err := e.ls.Delete(e.ctx, r.Segment); err != nil {
		t.Fatal(err)
	}
	if err := restore(); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("restore without %s: %v, want ErrNotFound", r.Segment, err)
	}
	if err := e.ls.Put(e.ctx, r.Segment, orig); err != nil {
		t.Fatal(err)
	}
	e.check(h2, m, "restore from the repaired log")
}

// TestNativeLSMBase: over lsm, a materialization is the lsm's own
// incremental snapshot: the second base reuses the SSTs of the confirmed
// first one and uploads only what changed, and a checkpoint on it restores.
func TestNativeLSMBase(t *testing.T) {
	e := newEnv(t)
	e.kind = backend.KindLSM
	// A compaction merging the two flushes leaves nothing to reuse, and
	// whether one runs before the second base depends on timing.
	e.inner = func(t testing.TB, o backend.Options) (backend.Backend, error) {
		return lsm.Open(o, lsm.Options{Dir: t.TempDir(), DisableAutomaticCompactions: true})
	}
	b := e.open()
	m := backendtest.NewModel(propStates...)
	for i := 0; i < 3000; i++ {
		k := backend.Key{KeyGroup: i % propMaxP, Key: []byte(fmt.Sprint("k", i))}
		v := bytes.Repeat([]byte{byte(i)}, 100)
		if err := b.Put("v", k, v); err != nil {
			t.Fatal(err)
		}
		m.Put("v", k, v, e.clock.Ms())
	}
	h1, l1 := e.checkpoint(b)
	if l1.Base.Backend != backend.KindLSM {
		t.Fatalf("the base over lsm is a %s handle, want lsm's own", l1.Base.Backend)
	}
	b.NotifyCheckpointComplete(h1.CheckpointID)
	e.puts(b, m, 10)
	if err := b.Materialize(e.ctx); err != nil {
		t.Fatal(err)
	}
	h2, l2 := e.checkpoint(b)
	if baseDir(l2) == baseDir(l1) {
		t.Fatal("the checkpoint after a materialization kept the old base")
	}
	old := map[string]bool{}
	var full int64
	for _, f := range h1.Files {
		old[f.Path] = true
		full += f.Size
	}
	var reused, fresh int64
	for _, f := range h2.Files {
		if old[f.Path] {
			reused += f.Size
		} else {
			fresh += f.Size
		}
	}
	if reused == 0 || fresh*4 > full {
		t.Fatalf("second base: %d bytes reused, %d new, of a %d-byte first base: not incremental", reused, fresh, full)
	}
	e.check(h2, m, "checkpoint on the second base")
}

// An instance whose log has nothing new since its newest base is not
// materialized again: an idle instance makes no request to its store
// (the daemon materializes every instance every --materialize-interval).
func TestIdleInstanceIsNotMaterializedAgain(t *testing.T) {
	e := newEnv(t)
	b := e.open()
	m := backendtest.NewModel(propStates...)
	objects := func() int {
		n := 0
		if err := tiered.Walk(e.ctx, e.store, "", func(tiered.ObjectInfo) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	materialize := func() {
		t.Helper()
		if err := b.Materialize(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	e.puts(b, m, 50)
	materialize()
	n, mats := objects(), b.Stats().Materializations
	for range 3 {
		materialize()
	}
	if objects() != n || b.Stats().Materializations != mats {
		t.Fatalf("idle materializations: %d objects (was %d), %d materializations (was %d)", objects(), n, b.Stats().Materializations, mats)
	}
	// A checkpoint takes the base and its completion confirms it: still
	// nothing new to materialize.
	h, _ := e.checkpoint(b)
	b.NotifyCheckpointComplete(h.CheckpointID)
	n = objects()
	materialize()
	if objects() != n || b.Stats().Materializations != mats {
		t.Fatalf("materialization after the base was confirmed: %d objects (was %d), %d materializations (was %d)", objects(), n, b.Stats().Materializations, mats)
	}
	// One change: the next materialization takes a new base.
	e.puts(b, m, 1)
	materialize()
	if b.Stats().Materializations != mats+1 {
		t.Fatalf("after a change: %d materializations, want %d", b.Stats().Materializations, mats+1)
	}
	h2, _ := e.checkpoint(b)
	e.check(h2, m, "checkpoint after the new base")
}
