package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

func (e *env) openCL(t *testing.T, job string, sub int, kind backend.Kind, mode daemon.ChangelogMode, restore *daemon.RestoreSpec) *daemon.Instance {
	t.Helper()
	in, err := e.d.Open(context.Background(), daemon.OpenParams{
		Task:      backend.TaskID{Job: job, Operator: "op", Subtask: sub},
		KeyGroups: backend.KeyGroupRangeForOperator(128, 2, sub), Kind: kind, States: valueState,
		Changelog: mode, Restore: restore})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func putN(t *testing.T, in *daemon.Instance, from, to int, val string) {
	t.Helper()
	for i := from; i < to; i++ {
		k := backend.Key{KeyGroup: in.KeyGroups.Start + i%in.KeyGroups.Len(), Key: []byte(fmt.Sprintf("k%d", i))}
		if err := in.Backend.Put("v", k, []byte(fmt.Sprintf("%s%d", val, i))); err != nil {
			t.Fatal(err)
		}
	}
}

func checkN(t *testing.T, in *daemon.Instance, from, to int, val string) {
	t.Helper()
	for i := from; i < to; i++ {
		k := backend.Key{KeyGroup: in.KeyGroups.Start + i%in.KeyGroups.Len(), Key: []byte(fmt.Sprintf("k%d", i))}
		v, ok, err := in.Backend.Get("v", k)
		if want := fmt.Sprintf("%s%d", val, i); err != nil || !ok || string(v) != want {
			t.Fatalf("key %d: %q %v %v, want %q", i, v, ok, err, want)
		}
	}
}

func (e *env) checkpoint(t *testing.T, job string, id uint64, ins ...*daemon.Instance) {
	t.Helper()
	ctx := context.Background()
	for _, in := range ins {
		if _, err := e.d.Snapshot(ctx, in, id, false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.d.CompleteCheckpoint(ctx, job, id, nil); err != nil {
		t.Fatal(err)
	}
}

// segmentsOK checks the log's lifecycle invariant: every segment a retained
// checkpoint references is in the store, and every segment in the store is
// referenced by one or held by the live log. It returns the segments in
// the store.
func segmentsOK(t *testing.T, e *env, job string) (inStore int) {
	t.Helper()
	n, err := segmentsSettled(e, job)
	if err != nil {
		t.Error(err)
	}
	return n
}

// segmentsSettled is segmentsOK's check. Segments the log let go of are
// deleted by the daemon's next release pass, a moment later: it waits up
// to 3s for those.
func segmentsSettled(e *env, job string) (inStore int, err error) {
	deadline := time.Now().Add(3 * time.Second)
	for {
		n, err := segmentsCheck(e, job)
		if err == nil || time.Now().After(deadline) {
			return n, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func segmentsCheck(e *env, job string) (inStore int, err error) {
	// Segments are shared by every job of the daemon: job's must be there,
	// and any job's reference keeps one.
	referenced, mine := map[string]bool{}, map[string]bool{}
	for _, j := range e.cat.Jobs() {
		for _, id := range e.cat.Retained(j) {
			m, _ := e.cat.Checkpoint(j, id)
			for _, h := range m.Tasks {
				if h.Log != nil {
					for _, s := range h.Log.Segments {
						referenced[s] = true
						mine[s] = mine[s] || j == job
					}
				}
			}
		}
	}
	present := map[string]bool{}
	var bad []error
	werr := tiered.Walk(context.Background(), e.store, catalog.LogDir+"/", func(o tiered.ObjectInfo) error {
		present[o.Name] = true
		if !referenced[o.Name] && !e.node.ChangelogWriter().Holds(o.Name) {
			bad = append(bad, fmt.Errorf("segment %s is neither referenced by a retained checkpoint nor held by the log", o.Name))
		}
		return nil
	})
	if werr != nil {
		return 0, werr
	}
	for s := range mine {
		if !present[s] {
			// Never transient: a missing segment is lost data.
			return len(present), fmt.Errorf("segment %s of a retained checkpoint of %s is missing", s, job)
		}
	}
	return len(present), errors.Join(bad...)
}

// TestChangelogCheckpointAndRestore: an instance in changelog mode writes
// handles with a log, a second daemon restores them equal in changelog
// mode and with it switched off, for every backend kind (heap included:
// in changelog mode its checkpoints outlive the daemon).
func TestChangelogCheckpointAndRestore(t *testing.T) {
	for _, kind := range []backend.Kind{backend.KindHeap, backend.KindFile, backend.KindLSM} {
		t.Run(string(kind), func(t *testing.T) {
			store := memstore.New()
			e := newEnvOn(t, store, nil)
			in := e.openCL(t, "j", 0, kind, daemon.ChangelogOn, nil)
			if !in.Changelog() {
				t.Fatal("instance opened with the changelog on is not in changelog mode")
			}
			putN(t, in, 0, 50, "a")
			e.checkpoint(t, "j", 1, in)
			putN(t, in, 25, 80, "b")
			e.checkpoint(t, "j", 2, in)
			m, _ := e.cat.Checkpoint("j", 2)
			h := m.Tasks[0]
			if h.Log == nil || len(h.Log.Segments) == 0 || h.Log.Bytes == 0 {
				t.Fatalf("checkpoint 2 of an instance in changelog mode has no log: %+v", h.Log)
			}
			segmentsOK(t, e, "j")
			// Every kind restores in another daemon process: a heap instance in
			// changelog mode keeps its bases and log in the checkpoint store.
			for _, mode := range []daemon.ChangelogMode{daemon.ChangelogOn, daemon.ChangelogOff} {
				e2 := newEnvOn(t, store, nil)
				r := e2.openCL(t, "j", 0, kind, mode, &daemon.RestoreSpec{Latest: true, NoClaim: true})
				checkN(t, r, 0, 25, "a")
				checkN(t, r, 25, 80, "b")
				if r.Changelog() != (mode == daemon.ChangelogOn) {
					t.Fatalf("restored with mode %d: changelog %v", mode, r.Changelog())
				}
				sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if err := e2.node.Shutdown(sctx); err != nil {
					t.Fatal(err)
				}
				cancel()
			}
		})
	}
}

// TestChangelogMaterializationTruncates: background materializations let
// the log be truncated, segments nothing needs any more are deleted, and
// the log store holds only what retained checkpoints reference or the log
// holds — also after the instance closes.
func TestChangelogMaterializationTruncates(t *testing.T) {
	e := newEnv(t, func(o *host.Options) {
		o.MaterializeInterval = 20 * time.Millisecond
		o.Retain = 1
	})
	in := e.openCL(t, "j", 0, backend.KindFile, daemon.ChangelogOn, nil)
	m := e.d.Metrics()
	for id := uint64(1); id <= 12; id++ {
		putN(t, in, 0, 40, fmt.Sprintf("v%d-", id))
		e.checkpoint(t, "j", id, in)
		time.Sleep(15 * time.Millisecond)
		segmentsOK(t, e, "j")
	}
	if m.Materializations.Load() == 0 {
		t.Fatal("no background materialization ran")
	}
	// Once materialized and confirmed, the log before the base is gone: the
	// newest checkpoint reads only the changes since its base.
	last, _ := e.cat.Checkpoint("j", 12)
	if l := last.Tasks[0].Log; l != nil && l.Bytes > 12*40*32 {
		t.Errorf("the log of checkpoint 12 covers %d bytes: it was never truncated", l.Bytes)
	}
	if err := e.d.CloseInstance(in.ID, "j"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := segmentsOK(t, e, "j")
		ref := 0
		if l := last.Tasks[0].Log; l != nil {
			ref = len(l.Segments)
		}
		if n == ref {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d segments in the store after the instance closed; only the %d checkpoint 12 references should be left", n, ref)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// failingBases fails every write of a materialized base while on.
type failingBases struct {
	tiered.Store
	on atomic.Bool
}

func (f *failingBases) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	if f.on.Load() && strings.Contains(name, "/shared/changelog/") {
		return errors.New("injected: base upload refused")
	}
	return f.Store.Put(ctx, name, r, size)
}

func (f *failingBases) PutIfAbsent(ctx context.Context, name string, r io.Reader, size int64) error {
	if f.on.Load() && strings.Contains(name, "/shared/changelog/") {
		return errors.New("injected: base upload refused")
	}
	return f.Store.PutIfAbsent(ctx, name, r, size)
}

// TestChangelogMaterializeFailures: after MaxMaterializeFailures failed
// materializations in a row the instance's checkpoints fail with that
// reason, and they work again once one succeeds.
func TestChangelogMaterializeFailures(t *testing.T) {
	fs := &failingBases{Store: memstore.New()}
	e := newEnv(t, func(o *host.Options) {
		o.Store = fs
		o.MaterializeInterval = 10 * time.Millisecond
		o.MaxMaterializeFailures = 2
	})
	in := e.openCL(t, "j", 0, backend.KindHeap, daemon.ChangelogOn, nil)
	putN(t, in, 0, 10, "a")
	e.checkpoint(t, "j", 1, in)
	fs.on.Store(true)
	// A change since checkpoint 1's base: without one there is nothing to
	// materialize (an idle instance is not materialized again).
	putN(t, in, 100, 101, "c")
	m := e.d.Metrics()
	waitFor(t, func() bool { return m.MaterializeFailures.Load() >= 2 })
	_, err := e.d.Snapshot(context.Background(), in, 2, true)
	if !errors.Is(err, daemon.ErrCheckpointFailed) || !strings.Contains(err.Error(), "materializations") || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("snapshot after failed materializations: %v", err)
	}
	fs.on.Store(false)
	done := m.Materializations.Load()
	waitFor(t, func() bool { return m.Materializations.Load() > done })
	putN(t, in, 10, 20, "b")
	e.checkpoint(t, "j", 3, in)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestChangelogModeChecked: a mode that does not exist is refused; native
// and canonical savepoints of an instance in changelog mode restore, the
// native one also after it is moved to another store and the log store is
// emptied (it is self-contained).
func TestChangelogModeChecked(t *testing.T) {
	e := newEnv(t, nil)
	_, err := e.d.Open(context.Background(), daemon.OpenParams{
		Task:      backend.TaskID{Job: "j", Operator: "op", Subtask: 0},
		KeyGroups: backend.KeyGroupRangeForOperator(128, 2, 0), Kind: backend.KindHeap, Changelog: daemon.ChangelogMode(7)})
	if !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("mode 7: %v", err)
	}
	in := e.openCL(t, "j", 0, backend.KindFile, daemon.ChangelogOn, nil)
	putN(t, in, 0, 5, "a")
	e.checkpoint(t, "j", 1, in) // a base
	putN(t, in, 3, 9, "b")      // and a log after it
	nsp, err := e.d.TriggerSavepoint(context.Background(), "j", true, 99)
	if err != nil {
		t.Fatalf("native savepoint of a changelog instance: %v", err)
	}
	spm, ok := e.cat.Savepoint(strings.TrimPrefix(nsp.Dir, "savepoints/"))
	if !ok || spm.Tasks[0].Log == nil || len(spm.Tasks[0].Log.Segments) != 0 || spm.Tasks[0].Log.Bytes == 0 {
		t.Fatalf("native savepoint of a changelog instance: manifest %v; want a log copied into the savepoint", spm)
	}
	// Copy it alone into another store and restore it in a daemon there:
	// its log store holds no segment.
	moved := memstore.New()
	for _, n := range storeNames(t, e.store, nsp.Dir+"/") {
		data, err := tiered.ReadAll(context.Background(), e.store, n, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		if err := tiered.PutBytes(context.Background(), moved, n, data); err != nil {
			t.Fatal(err)
		}
	}
	e3 := newEnvOn(t, moved, nil)
	for _, mode := range []daemon.ChangelogMode{daemon.ChangelogOn, daemon.ChangelogOff} {
		r := e3.openCL(t, "j", 0, backend.KindLSM, mode, &daemon.RestoreSpec{Savepoint: nsp.Dir})
		checkN(t, r, 0, 3, "a")
		checkN(t, r, 3, 9, "b")
		if err := e3.d.CloseInstance(r.ID, "j"); err != nil {
			t.Fatal(err)
		}
	}
	// The savepoint took no materialization from the checkpoints: the next
	// checkpoint still works, and the savepoint outlives its log segments.
	e.checkpoint(t, "j", 100, in)
	sp, err := e.d.TriggerSavepoint(context.Background(), "j", false, 0)
	if err != nil {
		t.Fatalf("canonical savepoint of a changelog instance: %v", err)
	}
	if err := e.d.CloseInstance(in.ID, "j"); err != nil {
		t.Fatal(err)
	}
	r := e.openCL(t, "j", 0, backend.KindLSM, daemon.ChangelogDefault, &daemon.RestoreSpec{Savepoint: sp.Dir})
	checkN(t, r, 0, 3, "a")
	checkN(t, r, 3, 9, "b")
	if r.Changelog() {
		t.Fatal("the default mode of a daemon without --changelog is on")
	}
}

// TestChangelogSharedSegmentOutlivesOneJob: a segment holds the records of
// two jobs; when one job's retention drops the only checkpoint that
// references it, it stays as long as the other job's log still needs it,
// and that job's next checkpoint restores.
func TestChangelogSharedSegmentOutlivesOneJob(t *testing.T) {
	store := memstore.New()
	e := newEnvOn(t, store, func(o *host.Options) { o.Retain = 1; o.MaterializeInterval = time.Hour })
	a := e.openCL(t, "a", 0, backend.KindFile, daemon.ChangelogOn, nil)
	b := e.openCL(t, "b", 0, backend.KindFile, daemon.ChangelogOn, nil)
	putN(t, a, 0, 10, "a1-")
	putN(t, b, 0, 10, "b1-")
	e.checkpoint(t, "a", 1, a)
	e.checkpoint(t, "b", 1, b)
	// One segment gets the records of both: a's snapshot cuts every
	// writer's buffered changes.
	putN(t, b, 0, 10, "b2-")
	putN(t, a, 0, 10, "a2-")
	e.checkpoint(t, "a", 2, a)
	m2, _ := e.cat.Checkpoint("a", 2)
	shared := m2.Tasks[0].Log.Segments
	if len(shared) == 0 {
		t.Fatal("checkpoint 2 of a has no log segment")
	}
	// a moves to a new base; its retention drops checkpoint 2.
	cb, ok := a.Backend.(interface{ Materialize(context.Context) error })
	if !ok {
		t.Fatalf("backend %T of an instance in changelog mode cannot materialize", a.Backend)
	}
	if err := cb.Materialize(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.checkpoint(t, "a", 3, a)
	if _, ok := e.cat.Checkpoint("a", 2); ok {
		t.Fatal("retention kept checkpoint 2 of a")
	}
	segmentsOK(t, e, "a")
	e.checkpoint(t, "b", 2, b)
	mb, _ := e.cat.Checkpoint("b", 2)
	if !slices.Equal(mb.Tasks[0].Log.Segments, shared) {
		t.Fatalf("b's checkpoint 2 reads %v, want the shared segments %v", mb.Tasks[0].Log.Segments, shared)
	}
	segmentsOK(t, e, "b")
	e2 := newEnvOn(t, store, nil)
	r := e2.openCL(t, "b", 0, backend.KindFile, daemon.ChangelogOn, &daemon.RestoreSpec{Latest: true, NoClaim: true})
	checkN(t, r, 0, 10, "b2-")
}

// flakyStore fails a share of the calls that reach it and delays them.
type flakyStore struct {
	tiered.Store
	on    atomic.Bool
	n     atomic.Uint64
	fails atomic.Uint64
}

func (f *flakyStore) fault() error {
	if !f.on.Load() {
		return nil
	}
	n := f.n.Add(1)
	time.Sleep(time.Duration(n%3) * time.Millisecond)
	if n%10 == 7 { // 10% of the calls
		f.fails.Add(1)
		return errors.New("injected: log store call failed")
	}
	return nil
}

func (f *flakyStore) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	if err := f.fault(); err != nil {
		return err
	}
	return f.Store.Put(ctx, name, r, size)
}

func (f *flakyStore) GetRange(ctx context.Context, name string, off, n int64) (io.ReadCloser, error) {
	if err := f.fault(); err != nil {
		return nil, err
	}
	return f.Store.GetRange(ctx, name, off, n)
}

func (f *flakyStore) DeleteBatch(ctx context.Context, names []string) error {
	if err := f.fault(); err != nil {
		return err
	}
	return f.Store.DeleteBatch(ctx, names)
}

// TestChangelogFaultyLogStore: with a log store that fails 10% of its
// calls and adds latency, every checkpoint completes or fails with a
// reason, and the last completed one restores exactly what was
// acknowledged.
func TestChangelogFaultyLogStore(t *testing.T) {
	store, logs := memstore.New(), &flakyStore{Store: memstore.New()}
	logs.on.Store(true)
	mod := func(o *host.Options) { o.LogStore = logs; o.MaterializeInterval = 30 * time.Millisecond }
	e := newEnvOn(t, store, mod)
	ctx := context.Background()
	ins := []*daemon.Instance{
		e.openCL(t, "j", 0, backend.KindFile, daemon.ChangelogOn, nil),
		e.openCL(t, "j", 1, backend.KindLSM, daemon.ChangelogOn, nil),
	}
	completed, failed := 0, 0
	var lastGood uint64
	for id := uint64(1); id <= 60; id++ {
		for _, in := range ins {
			putN(t, in, 0, 30, fmt.Sprintf("c%d-", id))
			time.Sleep(3 * time.Millisecond) // a segment of its own now and then
		}
		var err error
		for _, in := range ins {
			if _, err = e.d.Snapshot(ctx, in, id, false); err != nil {
				break
			}
		}
		if err == nil {
			_, err = e.d.CompleteCheckpoint(ctx, "j", id, nil)
		}
		if err != nil {
			failed++
			if !errors.Is(err, daemon.ErrCheckpointFailed) || strings.TrimSpace(err.Error()) == "" {
				t.Fatalf("checkpoint %d failed without a reason the caller can act on: %v", id, err)
			}
			_ = e.d.AbortCheckpoint(ctx, "j", id, "aborted: test")
			continue
		}
		completed++
		lastGood = id
	}
	t.Logf("%d checkpoints completed, %d failed, %d injected store failures", completed, failed, logs.fails.Load())
	if completed == 0 || logs.fails.Load() == 0 {
		t.Fatalf("%d completed, %d injected failures: the test did not test", completed, logs.fails.Load())
	}
	logs.on.Store(false)
	e2 := newEnvOn(t, store, mod)
	for sub, kind := range []backend.Kind{backend.KindFile, backend.KindLSM} {
		r := e2.openCL(t, "j", sub, kind, daemon.ChangelogOn, &daemon.RestoreSpec{Latest: true, NoClaim: true})
		if r.RestoredFrom != lastGood {
			t.Fatalf("restored %d, want the last completed %d", r.RestoredFrom, lastGood)
		}
		checkN(t, r, 0, 30, fmt.Sprintf("c%d-", lastGood))
	}
}
