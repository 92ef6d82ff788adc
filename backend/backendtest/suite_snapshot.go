package backendtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// checkpointAt is checkpoint with a given id (tasks of one job snapshot the
// same checkpoint id).
func (e *env) checkpointAt(t tester, b *guarded, id uint64) *backend.Handle {
	t.Helper()
	p, err := b.Snapshot(e.ctx, id)
	if err != nil {
		t.Fatalf("snapshot %d: %v", id, err)
	}
	states := b.States()
	h, err := p.Run(e.ctx)
	if err != nil {
		t.Fatalf("snapshot %d: run: %v", id, err)
	}
	e.checkHandle(t, b.Info(), h, id, states)
	return h
}

func (e *env) optsFor(subtask int, r backend.KeyGroupRange, states ...backend.StateDescriptor) backend.Options {
	o := e.opts(r, states...)
	o.Task.Subtask = subtask
	return o
}

// fileSet is the set of paths of handles' files.
func fileSet(hs ...*backend.Handle) map[string]bool {
	s := map[string]bool{}
	for _, h := range hs {
		for _, f := range h.Files {
			s[f.Path] = true
		}
	}
	return s
}

// deleteOnly deletes from store every file of h that none of keep
// references, as the registry does for an aborted checkpoint.
func (e *env) deleteOnly(t tester, h *backend.Handle, keep ...*backend.Handle) {
	t.Helper()
	kept := fileSet(keep...)
	for _, f := range h.Files {
		// A table referenced in place (lsm remote mode) is released by
		// the catalog through its ref markers, never deleted outright: a
		// live instance may still hold it.
		if !kept[f.Path] && f.Table == nil {
			must(t, e.store.Delete(e.ctx, f.Path), "delete %s", f.Path)
		}
	}
}

// shareNone fails t if h references any uploaded file in forbidden. A
// table referenced in place (lsm remote mode) is no checkpoint's upload:
// the live instance created and holds it (its Pebble marker) whichever
// checkpoint first listed it, so a later checkpoint may list it too
// whether or not that one was aborted (when it does depends on
// compactions).
func shareNone(t tester, h *backend.Handle, forbidden map[string]bool, why string) {
	t.Helper()
	for _, f := range h.Files {
		if forbidden[f.Path] && f.Table == nil {
			t.Fatalf("checkpoint %d references %s, which %s", h.CheckpointID, f.Path, why)
		}
	}
}

func minus(a, b map[string]bool) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		if !b[k] {
			out[k] = true
		}
	}
	return out
}

func testSnapshotRestore(t *testing.T, e *env) {
	c := newRand(1)
	b := e.mustOpen(t, e.opts(testRange, modelStates...))
	m := NewModel(modelStates...)
	var hs []*backend.Handle
	var ms []*Model
	take := func() {
		// Snapshot, keep writing, then run the snapshot: it holds the
		// state at the snapshot.
		id := e.nextID()
		p, err := b.Snapshot(e.ctx, id)
		must(t, err, "snapshot %d", id)
		ms = append(ms, m.Clone())
		e.randomOps(t, c, b, m, testRange, 50)
		h, err := p.Run(e.ctx)
		must(t, err, "run snapshot %d", id)
		e.checkHandle(t, b.Info(), h, id, modelStates)
		hs = append(hs, h)
		b.NotifyCheckpointComplete(h.CheckpointID)
	}
	take() // empty
	e.randomOps(t, c, b, m, testRange, 400)
	take()
	e.randomOps(t, c, b, m, testRange, 400)
	take()
	e.randomOps(t, c, b, m, testRange, 100)
	for i, h := range hs {
		r := e.restore(t, testRange, modelStates, h)
		compareAll(t, r, ms[i].Clone(), testRange, modelDomain, e.clock.Ms(), true, fmt.Sprintf("restored from checkpoint %d", h.CheckpointID))
	}
	// A restored instance keeps working and checkpoints again (incremental
	// backends build on the restored files).
	r := e.restore(t, testRange, modelStates, hs[1])
	mr := ms[1].Clone()
	e.randomOps(t, c, r, mr, testRange, 300)
	m3 := mr.Clone()
	h3 := e.checkpoint(t, r)
	r.NotifyCheckpointComplete(h3.CheckpointID)
	e.randomOps(t, c, r, mr, testRange, 300)
	m4 := mr.Clone()
	h4 := e.checkpoint(t, r)
	compareAll(t, e.restore(t, testRange, modelStates, h3), m3, testRange, modelDomain, e.clock.Ms(), true, "restored from the restored instance's first checkpoint")
	compareAll(t, e.restore(t, testRange, modelStates, h4), m4, testRange, modelDomain, e.clock.Ms(), true, "restored from the restored instance's second checkpoint")
	// The original instance was not disturbed by any of it.
	compareAll(t, b, m, testRange, modelDomain, e.clock.Ms(), true, "original instance")
	compareAll(t, r, mr, testRange, modelDomain, e.clock.Ms(), true, "restored instance")
}

func testPendingSnapshots(t *testing.T, e *env) {
	c := newRand(2)
	b := e.mustOpen(t, e.opts(testRange, modelStates...))
	m := NewModel(modelStates...)
	type pending struct {
		id uint64
		p  backend.PendingSnapshot
		m  *Model
		h  *backend.Handle
	}
	var ps []*pending
	snap := func() *pending {
		id := e.nextID()
		p, err := b.Snapshot(e.ctx, id)
		must(t, err, "snapshot %d", id)
		x := &pending{id: id, p: p, m: m.Clone()}
		ps = append(ps, x)
		return x
	}
	e.randomOps(t, c, b, m, testRange, 100)
	p1 := snap()
	e.randomOps(t, c, b, m, testRange, 100)
	p2 := snap()
	e.randomOps(t, c, b, m, testRange, 100)
	p3 := snap()
	e.randomOps(t, c, b, m, testRange, 50)
	released := snap()
	released.p.Release()
	ps = ps[:3]
	// Run two of them concurrently, out of order, while the task writes.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, x := range []*pending{p3, p1} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x.h, errs[i] = x.p.Run(e.ctx)
		}()
	}
	e.randomOps(t, c, b, m, testRange, 100)
	wg.Wait()
	for _, err := range errs {
		must(t, err, "concurrent run")
	}
	var err error
	p2.h, err = p2.p.Run(e.ctx)
	must(t, err, "run %d", p2.id)
	p2.p.Release() // a no-op after Run
	info := b.Info()
	for _, x := range ps {
		e.checkHandle(t, info, x.h, x.id, modelStates)
	}
	// Confirmations arrive out of order; later snapshots build on them.
	b.NotifyCheckpointComplete(p3.id)
	b.NotifyCheckpointComplete(p1.id)
	b.NotifyCheckpointAborted(released.id)
	e.randomOps(t, c, b, m, testRange, 100)
	p5 := snap()
	p5.h, err = p5.p.Run(e.ctx)
	must(t, err, "run %d", p5.id)
	e.checkHandle(t, info, p5.h, p5.id, modelStates)
	for _, x := range ps {
		r := e.restore(t, testRange, modelStates, x.h)
		compareAll(t, r, x.m.Clone(), testRange, modelDomain, e.clock.Ms(), true, fmt.Sprintf("restored from checkpoint %d", x.id))
	}
	compareAll(t, b, m, testRange, modelDomain, e.clock.Ms(), true, "live instance")
}

func testRestoreSubRange(t *testing.T, e *env) {
	c := newRand(3)
	b := e.mustOpen(t, e.opts(testRange, modelStates...))
	m := NewModel(modelStates...)
	e.randomOps(t, c, b, m, testRange, 600)
	h := e.checkpoint(t, b)
	for _, sub := range []backend.KeyGroupRange{{Start: 6, End: 8}, {Start: 4, End: 4}, {Start: 11, End: 11}, {Start: 4, End: 10}} {
		r := e.restore(t, sub, modelStates, h)
		if got := r.Info().KeyGroups; got != sub {
			t.Fatalf("restored into %s, Info says %s", sub, got)
		}
		for _, kg := range []int{sub.Start - 1, sub.End + 1} {
			wantErr(t, r.Put("v", key(kg, "k", ""), nil), backend.ErrKeyGroupOutOfRange, "put on key group %d of a restore into %s", kg, sub)
		}
		mr := m.Restrict(sub)
		what := fmt.Sprintf("restored into %s", sub)
		compareAll(t, r, mr, sub, modelDomain, e.clock.Ms(), false, what)
		// The restored sub-range checkpoints as itself and restores again,
		// into a smaller range still.
		hs := e.checkpoint(t, r)
		inner := backend.KeyGroupRange{Start: sub.End, End: sub.End}
		compareAll(t, e.restore(t, inner, modelStates, hs), mr.Restrict(inner), inner, modelDomain, e.clock.Ms(), true, what+" then into "+inner.String())
		compareAll(t, r, mr, sub, modelDomain, e.clock.Ms(), true, what)
	}
}

func testRestoreSeveralHandles(t *testing.T, e *env) {
	c := newRand(4)
	ra, rb := backend.KeyGroupRange{Start: 0, End: 7}, backend.KeyGroupRange{Start: 8, End: 15}
	a := e.mustOpen(t, e.optsFor(0, ra, modelStates...))
	b := e.mustOpen(t, e.optsFor(1, rb, modelStates...))
	ma, mb := NewModel(modelStates...), NewModel(modelStates...)
	e.randomOps(t, c, a, ma, ra, 500)
	e.randomOps(t, c, b, mb, rb, 500)
	id := e.nextID()
	ha, hb := e.checkpointAt(t, a, id), e.checkpointAt(t, b, id)
	ab := Union([]*Model{ma, mb}, []backend.KeyGroupRange{ra, rb})
	// Scale in to one task and out to a task straddling both.
	all := backend.KeyGroupRange{Start: 0, End: testMaxP - 1}
	compareAll(t, e.restore(t, all, modelStates, hb, ha), ab.Clone(), all, modelDomain, e.clock.Ms(), true, "both handles restored into "+all.String())
	mid := backend.KeyGroupRange{Start: 4, End: 11}
	rc := e.restore(t, mid, modelStates, ha, hb)
	mc := ab.Restrict(mid)
	compareAll(t, rc, mc, mid, modelDomain, e.clock.Ms(), false, "both handles restored into "+mid.String())
	// Overlapping handles: the first listed wins for a key group both hold.
	e.randomOps(t, c, rc, mc, mid, 300)
	hc := e.checkpoint(t, rc)
	low := backend.KeyGroupRange{Start: 0, End: 11}
	compareAll(t, e.restore(t, low, modelStates, hc, ha), Union([]*Model{mc, ma}, []backend.KeyGroupRange{mid, ra}), low, modelDomain, e.clock.Ms(), true,
		"restored from overlapping handles, the newer first")
	compareAll(t, e.restore(t, low, modelStates, ha, hc), Union([]*Model{ma, mc}, []backend.KeyGroupRange{ra, mid}), low, modelDomain, e.clock.Ms(), true,
		"restored from overlapping handles, the older first")
	// Handles that do not cover the range are refused.
	o := e.opts(all, modelStates...)
	o.Restore = []*backend.Handle{ha}
	_, err := e.open(t, o)
	wantErr(t, err, backend.ErrInvalidArgument, "restore %s from a handle of %s only", all, ra)
}

func testRestoreStates(t *testing.T, e *env) {
	late := backend.StateDescriptor{Name: "late", Kind: backend.KindAggregate, Aggregate: backend.AggMax, Number: backend.NumInt64}
	b := e.mustOpen(t, e.opts(testRange, sValue))
	must(t, b.RegisterState(sList), "register")
	must(t, b.RegisterState(late), "register")
	m := NewModel(sValue, sList, late)
	k := key(6, "k", "")
	apply(t, b, m, op{kind: opPut, state: "value", k: k, v: []byte("v")}, 0)
	apply(t, b, m, op{kind: opListAppend, state: "list", k: k, vals: bs("l")}, 0)
	apply(t, b, m, op{kind: opAggAdd, state: "late", k: k, n: backend.Int64(9)}, 0)
	h := e.checkpoint(t, b)
	// States registered after open are restored even when the new
	// instance's options name only some of them.
	dom := Domain{Keys: bs("k"), Namespaces: bs("")}
	compareAll(t, e.restore(t, testRange, []backend.StateDescriptor{sValue}, h), m.Clone(), testRange, dom, e.clock.Ms(), true, "restored")
	compareAll(t, e.restore(t, testRange, nil, h), m.Clone(), testRange, dom, e.clock.Ms(), true, "restored without states in the options")
	m2 := m.Clone()
	m2.Register(sMap)
	compareAll(t, e.restore(t, testRange, []backend.StateDescriptor{sMap, sValue}, h), m2, testRange, dom, e.clock.Ms(), true, "restored with one more state")
	// A state the options register with another kind than the snapshot's
	// is refused.
	for _, d := range []backend.StateDescriptor{
		{Name: "list", Kind: backend.KindValue},
		{Name: "late", Kind: backend.KindAggregate, Aggregate: backend.AggMin, Number: backend.NumInt64},
		{Name: "late", Kind: backend.KindAggregate, Aggregate: backend.AggMax, Number: backend.NumFloat64},
	} {
		o := e.opts(testRange, d)
		o.Restore = []*backend.Handle{h}
		_, err := e.open(t, o)
		wantErr(t, err, backend.ErrIncompatible, "restore registering %+v over the snapshot's %s", d, d.Name)
	}
}

func testAbortedCheckpoint(t *testing.T, e *env) {
	c := newRand(5)
	b := e.mustOpen(t, e.opts(testRange, modelStates...))
	m := NewModel(modelStates...)
	e.randomOps(t, c, b, m, testRange, 300)
	m1 := m.Clone()
	h1 := e.checkpoint(t, b)
	b.NotifyCheckpointComplete(h1.CheckpointID)
	e.randomOps(t, c, b, m, testRange, 300)
	h2 := e.checkpoint(t, b)
	b.NotifyCheckpointAborted(h2.CheckpointID)
	// The registry drops what only the aborted checkpoint uploaded.
	e.deleteOnly(t, h2, h1)
	e.randomOps(t, c, b, m, testRange, 300)
	h3 := e.checkpoint(t, b)
	shareNone(t, h3, minus(fileSet(h2), fileSet(h1)), "only aborted checkpoint "+fmt.Sprint(h2.CheckpointID)+" uploaded")
	// An unconfirmed checkpoint's uploads are not reused either.
	e.randomOps(t, c, b, m, testRange, 300)
	m4 := m.Clone()
	h4 := e.checkpoint(t, b)
	shareNone(t, h4, minus(fileSet(h3), fileSet(h1)), "unconfirmed checkpoint "+fmt.Sprint(h3.CheckpointID)+" uploaded")
	b.NotifyCheckpointComplete(h4.CheckpointID)
	b.NotifyCheckpointAborted(h3.CheckpointID)
	e.deleteOnly(t, h3, h1, h4)
	compareAll(t, e.restore(t, testRange, modelStates, h4), m4, testRange, modelDomain, e.clock.Ms(), true, "restored after aborted checkpoints' files were deleted")
	compareAll(t, e.restore(t, testRange, modelStates, h1), m1, testRange, modelDomain, e.clock.Ms(), true, "restored from the first checkpoint")
}

func testNoClaim(t *testing.T, e *env) {
	c := newRand(6)
	b := e.mustOpen(t, e.opts(testRange, modelStates...))
	m := NewModel(modelStates...)
	e.randomOps(t, c, b, m, testRange, 400)
	h1 := e.checkpoint(t, b)
	b.NotifyCheckpointComplete(h1.CheckpointID)
	m1 := m.Clone()
	for _, noClaim := range []bool{true, false} {
		o := e.opts(testRange, modelStates...)
		o.Restore, o.NoClaim = []*backend.Handle{h1}, noClaim
		r := e.mustOpen(t, o)
		mr := m1.Clone()
		e.randomOps(t, c, r, mr, testRange, 200)
		h2 := e.checkpoint(t, r)
		if noClaim {
			shareNone(t, h2, fileSet(h1), "belongs to the checkpoint restored in no-claim mode")
		}
		r.NotifyCheckpointComplete(h2.CheckpointID)
		e.randomOps(t, c, r, mr, testRange, 200)
		m3 := mr.Clone()
		h3 := e.checkpoint(t, r)
		r.NotifyCheckpointComplete(h3.CheckpointID)
		if noClaim {
			shareNone(t, h3, fileSet(h1), "belongs to the checkpoint restored in no-claim mode")
		}
		compareAll(t, e.restore(t, testRange, modelStates, h3), m3, testRange, modelDomain, e.clock.Ms(), true,
			fmt.Sprintf("checkpoint of an instance restored with NoClaim=%v", noClaim))
	}
}

func testCanonical(t *testing.T, e *env) {
	c := newRand(7)
	b := e.mustOpen(t, e.opts(testRange, modelStates...))
	cs, ok := b.canonical()
	if !ok {
		t.Fatalf("%s backend does not implement backend.CanonicalSnapshotter (every backend must)", e.h.Kind)
	}
	m := NewModel(modelStates...)
	e.randomOps(t, c, b, m, testRange, 400)
	h1 := e.checkpoint(t, b)
	b.NotifyCheckpointComplete(h1.CheckpointID)
	e.randomOps(t, c, b, m, testRange, 200)
	ms := m.Clone()
	sp := memstore.New()
	const dir = "savepoints/sp-1"
	id := e.nextID()
	p, err := cs(e.ctx, id, sp, dir)
	must(t, err, "canonical snapshot")
	e.randomOps(t, c, b, m, testRange, 100) // not in the savepoint
	h, err := p.Run(e.ctx)
	must(t, err, "canonical snapshot: run")
	if h == nil || h.Backend != backend.KindFile || h.Task != e.task || h.KeyGroups != testRange || h.CheckpointID != id || !sameStates(h.States, modelStates) {
		t.Fatalf("canonical handle %+v: want backend file, task %s, range %s, checkpoint %d and the registered states", h, e.task, testRange, id)
	}
	if err := h.Validate(); err != nil {
		t.Fatalf("canonical handle: %v", err)
	}
	e.checkFiles(t, sp, h, dir+"/", dir+"/")
	restoreSP := func(r backend.KeyGroupRange) *guarded {
		o := e.opts(r, modelStates...)
		o.Restore, o.RestoreStore, o.NoClaim = []*backend.Handle{h}, sp, true
		return e.mustOpen(t, o)
	}
	compareAll(t, restoreSP(testRange), ms.Clone(), testRange, modelDomain, e.clock.Ms(), true, "restored from a canonical savepoint")
	sub := backend.KeyGroupRange{Start: 7, End: 9}
	compareAll(t, restoreSP(sub), ms.Restrict(sub), sub, modelDomain, e.clock.Ms(), true, "restored from a canonical savepoint into "+sub.String())
	// The savepoint does not disturb the checkpoint chain.
	e.randomOps(t, c, b, m, testRange, 100)
	m2 := m.Clone()
	h2 := e.checkpoint(t, b)
	compareAll(t, e.restore(t, testRange, modelStates, h2), m2, testRange, modelDomain, e.clock.Ms(), true, "checkpoint after a savepoint")
}

// testConcurrent runs writers, a reader and snapshots at once; every
// snapshot must be a consistent cut: each writer appends i to list A, then
// to list B, then puts i, so a cut sees len(A) = len(B) or len(B)+1 and the
// value one or two behind.
func testConcurrent(t *testing.T, e *env) {
	const writers, n = 4, 150
	b := e.mustOpen(t, e.opts(testRange, basicStates...))
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, writers+1)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kg := testRange.Start + w
			for i := 0; i < n; i++ {
				v := []byte(fmt.Sprint(i))
				if err := errors.Join(
					b.ListAppend("list", key(kg, "A", ""), v),
					b.ListAppend("list", key(kg, "B", ""), v),
					b.Put("value", key(kg, "V", ""), v)); err != nil {
					errc <- fmt.Errorf("writer %d step %d: %w", w, i, err)
					return
				}
			}
		}()
	}
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for ctx.Err() == nil {
			for w := 0; w < writers; w++ {
				if _, _, err := b.Get("value", key(testRange.Start+w, "V", "")); err != nil {
					errc <- fmt.Errorf("reader: %w", err)
					return
				}
			}
		}
	}()
	var hs []*backend.Handle
	for i := 0; i < 3; i++ {
		hs = append(hs, e.checkpoint(t, b))
	}
	wg.Wait()
	cancel()
	<-readerDone
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	check := func(r *guarded, what string, final bool) {
		t.Helper()
		for w := 0; w < writers; w++ {
			kg := testRange.Start + w
			la, errA := r.ListGet("list", key(kg, "A", ""))
			lb, errB := r.ListGet("list", key(kg, "B", ""))
			v, ok, errV := r.Get("value", key(kg, "V", ""))
			if err := errors.Join(errA, errB, errV); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			for i, x := range la {
				if string(x) != fmt.Sprint(i) {
					t.Fatalf("%s: writer %d list A = %q", what, w, la)
				}
			}
			for i, x := range lb {
				if string(x) != fmt.Sprint(i) {
					t.Fatalf("%s: writer %d list B = %q", what, w, lb)
				}
			}
			got := -1
			if ok {
				fmt.Sscan(string(v), &got)
			}
			a, bl := len(la), len(lb)
			consistent := (a == bl+1 && got == a-2) || (a == bl && (got == a-1 || got == a-2))
			if !consistent || (final && (a != n || got != n-1)) {
				t.Fatalf("%s: writer %d: list A has %d, list B %d elements, value %d: not a consistent cut", what, w, a, bl, got)
			}
		}
	}
	check(b, "live instance", true)
	for _, h := range hs {
		check(e.restore(t, testRange, basicStates, h), fmt.Sprintf("checkpoint %d", h.CheckpointID), false)
	}
}

// storeFiles lists the store (for messages).
func (e *env) storeFiles(t tester) string {
	var names []string
	_ = tiered.Walk(e.ctx, e.store, "", func(o tiered.ObjectInfo) error {
		names = append(names, fmt.Sprintf("%s (%d bytes)", o.Name, o.Size))
		return nil
	})
	return strings.Join(names, ", ")
}
