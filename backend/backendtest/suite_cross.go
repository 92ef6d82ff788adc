package backendtest

import (
	"fmt"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered/memstore"
)

// RunCanonicalAcross checks that a canonical savepoint taken by each
// backend of hs restores into each backend of hs (itself included), whole
// and into a sub-range, and that the restored instance checkpoints and
// restores natively: a user can move state from one backend kind to
// another. Every backend must implement backend.CanonicalSnapshotter.
func RunCanonicalAcross(t *testing.T, hs ...Harness) {
	for _, from := range hs {
		for _, to := range hs {
			t.Run(fmt.Sprintf("%s-to-%s", from.Kind, to.Kind), func(t *testing.T) {
				testCanonicalAcross(t, newEnv(t, from), to)
			})
		}
	}
}

func testCanonicalAcross(t *testing.T, src *env, to Harness) {
	c := newRand(9)
	b := src.mustOpen(t, src.opts(testRange, modelStates...))
	cs, ok := b.canonical()
	if !ok {
		t.Fatalf("%s backend does not implement backend.CanonicalSnapshotter (every backend must)", src.h.Kind)
	}
	m := NewModel(modelStates...)
	src.randomOps(t, c, b, m, testRange, 500)
	sp := memstore.New()
	const dir = "savepoints/move"
	id := src.nextID()
	p, err := cs(src.ctx, id, sp, dir)
	must(t, err, "canonical snapshot of %s", src.h.Kind)
	h, err := p.Run(src.ctx)
	must(t, err, "canonical snapshot of %s: run", src.h.Kind)
	src.checkFiles(t, sp, h, dir+"/", dir+"/")

	// The destination shares the clock (TTL expiries carry over) but has
	// its own checkpoint store and task, as a new job would.
	dst := newEnv(t, to)
	dst.clock = src.clock
	dst.task = backend.TaskID{Job: "job2", Operator: "moved", Subtask: 0}
	dst.ids = id
	for _, r := range []backend.KeyGroupRange{testRange, {Start: 6, End: 9}} {
		o := dst.opts(r, modelStates...)
		o.Restore, o.RestoreStore, o.NoClaim = []*backend.Handle{h}, sp, true
		rb := dst.mustOpen(t, o)
		what := fmt.Sprintf("%s savepoint restored into %s %s", src.h.Kind, to.Kind, r)
		if got := rb.Info().Kind; got != to.Kind {
			t.Fatalf("%s: Info().Kind = %s", what, got)
		}
		mr := m.Restrict(r)
		compareAll(t, rb, mr, r, modelDomain, dst.clock.Ms(), false, what)
		dst.randomOps(t, c, rb, mr, r, 100)
		hn := dst.checkpoint(t, rb)
		compareAll(t, dst.restore(t, r, modelStates, hn), mr, r, modelDomain, dst.clock.Ms(), true, what+", checkpointed natively")
	}
}
