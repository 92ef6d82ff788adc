package backendtest

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/statedhq/stated/backend"
)

// modelRange is the instance range of the model tests: few key groups keep
// a full comparison cheap while sub-range restores still have room.
var modelRange = backend.KeyGroupRange{Start: 4, End: 7}

var lateState = backend.StateDescriptor{Name: "late", Kind: backend.KindValue, TTL: modelTTL}

// snapRec is a snapshot the model test took: the model at its synchronous
// part and, once Run returned, the handle.
type snapRec struct {
	id       uint64
	p        backend.PendingSnapshot
	m        *Model
	h        *backend.Handle
	info     backend.Info
	states   []backend.StateDescriptor
	noShare  map[string]bool // files it must not reference (no-claim restore)
	done     bool            // run or released
	complete bool
	aborted  bool
}

// modelMachine drives one backend through random operations, snapshots,
// confirmations, aborts (whose files are then deleted, as the registry
// would), restores and fail-overs, and checks every result against Model.
type modelMachine struct {
	e     *env
	b     *guarded
	m     *Model
	r     backend.KeyGroupRange
	snaps []*snapRec
	// noShare is set by a no-claim fail-over: the next snapshot must not
	// reference any of these files.
	noShare map[string]bool
}

func (mm *modelMachine) pick(t *rapid.T, label string, ok func(*snapRec) bool) *snapRec {
	var cands []*snapRec
	for _, s := range mm.snaps {
		if ok(s) {
			cands = append(cands, s)
		}
	}
	if len(cands) == 0 {
		t.Skip("no " + label)
	}
	return cands[rapid.IntRange(0, len(cands)-1).Draw(t, label)]
}

func finished(s *snapRec) bool { return s.h != nil && !s.aborted }

func (mm *modelMachine) actions() map[string]func(*rapid.T) {
	e := mm.e
	return map[string]func(*rapid.T){
		"ops": func(t *rapid.T) {
			c := rapidChooser{t}
			n := rapid.IntRange(1, 12).Draw(t, "n")
			for i := 0; i < n; i++ {
				apply(t, mm.b, mm.m, genOp(c, mm.m.States(), mm.r, modelDomain), e.clock.Ms())
			}
		},
		"advanceClock": func(t *rapid.T) {
			e.clock.Advance(time.Duration(rapid.IntRange(0, 150).Draw(t, "ms")) * time.Millisecond)
		},
		"registerLate": func(t *rapid.T) {
			must(t, mm.b.RegisterState(lateState), "register %s", lateState.Name)
			mm.m.Register(lateState)
		},
		"snapshot": func(t *rapid.T) {
			pendingN := 0
			for _, s := range mm.snaps {
				if !s.done {
					pendingN++
				}
			}
			if pendingN >= 4 {
				t.Skip("enough pending snapshots")
			}
			id := e.nextID()
			p, err := mm.b.Snapshot(e.ctx, id)
			must(t, err, "snapshot %d", id)
			mm.snaps = append(mm.snaps, &snapRec{id: id, p: p, m: mm.m.Clone(), info: mm.b.Info(), states: mm.m.States(), noShare: mm.noShare})
			mm.noShare = nil
		},
		"run": func(t *rapid.T) {
			s := mm.pick(t, "pending snapshot", func(s *snapRec) bool { return !s.done })
			h, err := s.p.Run(e.ctx)
			must(t, err, "run snapshot %d", s.id)
			s.h, s.done = h, true
			e.checkHandle(t, s.info, h, s.id, s.states)
			shareNone(t, h, s.noShare, "belongs to the checkpoint restored in no-claim mode")
		},
		"release": func(t *rapid.T) {
			s := mm.pick(t, "pending snapshot", func(s *snapRec) bool { return !s.done })
			s.p.Release()
			s.done = true
		},
		"complete": func(t *rapid.T) {
			s := mm.pick(t, "unconfirmed checkpoint", func(s *snapRec) bool { return finished(s) && !s.complete })
			mm.b.NotifyCheckpointComplete(s.id)
			s.complete = true
		},
		"abort": func(t *rapid.T) {
			s := mm.pick(t, "unconfirmed checkpoint", func(s *snapRec) bool { return finished(s) && !s.complete })
			mm.b.NotifyCheckpointAborted(s.id)
			s.aborted = true
			// The registry deletes what no confirmed checkpoint uses.
			var keep []*backend.Handle
			for _, o := range mm.snaps {
				if o.complete {
					keep = append(keep, o.h)
				}
			}
			e.deleteOnly(t, s.h, keep...)
		},
		"restoreCheck": func(t *rapid.T) {
			s := mm.pick(t, "checkpoint", finished)
			sub := subRange(t, s.h.KeyGroups)
			r := e.restore(t, sub, s.states, s.h)
			compareAll(t, r, s.m.Restrict(sub), sub, modelDomain, e.clock.Ms(), true,
				fmt.Sprintf("checkpoint %d restored into %s", s.id, sub))
			must(t, r.Close(), "close")
		},
		"failover": func(t *rapid.T) {
			s := mm.pick(t, "checkpoint", finished)
			// A job restores only from a checkpoint the coordinator
			// completed, so it is never aborted afterwards.
			s.complete = true
			sub := s.h.KeyGroups
			if rapid.Bool().Draw(t, "rescale") {
				sub = subRange(t, sub)
			}
			noClaim := rapid.Bool().Draw(t, "noClaim")
			o := e.opts(sub, s.states...)
			o.Restore, o.NoClaim = []*backend.Handle{s.h}, noClaim
			// Pending snapshots of the old instance stay runnable after Close.
			must(t, mm.b.Close(), "close before fail-over")
			mm.b = e.mustOpen(t, o)
			mm.m, mm.r = s.m.Restrict(sub), sub
			mm.noShare = nil
			if noClaim {
				mm.noShare = fileSet(s.h)
			}
		},
	}
}

// subRange draws a non-empty sub-range of r.
func subRange(t *rapid.T, r backend.KeyGroupRange) backend.KeyGroupRange {
	start := rapid.IntRange(r.Start, r.End).Draw(t, "subStart")
	end := rapid.IntRange(start, r.End).Draw(t, "subEnd")
	return backend.KeyGroupRange{Start: start, End: end}
}

// testModel is the property "snapshot N, keep writing, restore N gives
// exactly the state at N", for random interleavings of every operation,
// TTL expiry, several pending snapshots, confirmations, aborts, sub-range
// restores and fail-overs, checked against Model.
func testModel(t *testing.T, outer *env) {
	rapid.Check(t, func(rt *rapid.T) {
		e := newEnv(t, outer.h) // a fresh store and clock per case
		mm := &modelMachine{e: e, r: modelRange, m: NewModel(modelStates...)}
		mm.b = e.mustOpen(rt, e.opts(modelRange, modelStates...))
		rt.Repeat(mm.actions())
		// Every snapshot still pending runs now; then the live instance and
		// every checkpoint not aborted must match their models.
		for _, s := range mm.snaps {
			if !s.done {
				h, err := s.p.Run(e.ctx)
				must(rt, err, "run snapshot %d", s.id)
				s.h, s.done = h, true
				e.checkHandle(rt, s.info, h, s.id, s.states)
			}
		}
		compareAll(rt, mm.b, mm.m, mm.r, modelDomain, e.clock.Ms(), true, "live instance")
		for _, s := range mm.snaps {
			if finished(s) {
				r := e.restore(rt, s.h.KeyGroups, s.states, s.h)
				compareAll(rt, r, s.m.Clone(), s.h.KeyGroups, modelDomain, e.clock.Ms(), true, fmt.Sprintf("checkpoint %d", s.id))
				must(rt, r.Close(), "close")
			}
		}
	})
}

// testModelSeveralHandles: two tasks with adjacent ranges write randomly
// and snapshot the same checkpoint; a restore of any range inside both,
// from both handles in either order, holds exactly the union.
func testModelSeveralHandles(t *testing.T, outer *env) {
	ra, rb := backend.KeyGroupRange{Start: 2, End: 5}, backend.KeyGroupRange{Start: 6, End: 9}
	rapid.Check(t, func(rt *rapid.T) {
		e := newEnv(t, outer.h)
		c := rapidChooser{rt}
		a := e.mustOpen(rt, e.optsFor(0, ra, modelStates...))
		b := e.mustOpen(rt, e.optsFor(1, rb, modelStates...))
		ma, mb := NewModel(modelStates...), NewModel(modelStates...)
		n := rapid.IntRange(0, 60).Draw(rt, "opsBefore")
		for i := 0; i < n; i++ {
			if rapid.Bool().Draw(rt, "onA") {
				apply(rt, a, ma, genOp(c, modelStates, ra, modelDomain), e.clock.Ms())
			} else {
				apply(rt, b, mb, genOp(c, modelStates, rb, modelDomain), e.clock.Ms())
			}
			if c.intn(10, "advance") == 0 {
				e.clock.Advance(time.Duration(c.intn(150, "ms")) * time.Millisecond)
			}
		}
		id := e.nextID()
		ha, hb := e.checkpointAt(rt, a, id), e.checkpointAt(rt, b, id)
		union := Union([]*Model{ma, mb}, []backend.KeyGroupRange{ra, rb})
		// Writes after the snapshot are not restored.
		for i, m := 0, rapid.IntRange(0, 10).Draw(rt, "opsAfter"); i < m; i++ {
			apply(rt, a, ma, genOp(c, modelStates, ra, modelDomain), e.clock.Ms())
			apply(rt, b, mb, genOp(c, modelStates, rb, modelDomain), e.clock.Ms())
		}
		sub := subRange(rt, backend.KeyGroupRange{Start: ra.Start, End: rb.End})
		handles := []*backend.Handle{ha, hb}
		if rapid.Bool().Draw(rt, "bFirst") {
			handles = []*backend.Handle{hb, ha}
		}
		var needed []*backend.Handle
		for _, h := range handles {
			if !h.KeyGroups.Intersect(sub).Empty() || rapid.Bool().Draw(rt, "extraHandle") {
				needed = append(needed, h)
			}
		}
		r := e.restore(rt, sub, modelStates, needed...)
		compareAll(rt, r, union.Restrict(sub), sub, modelDomain, e.clock.Ms(), true, fmt.Sprintf("restored into %s", sub))
	})
}
