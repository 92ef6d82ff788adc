package fuzz

import (
	"context"
	"testing"

	"github.com/statedhq/stated/backend"
)

var kinds = []backend.Kind{backend.KindHeap, backend.KindFile, backend.KindLSM}

// sources are the restores every fixture supports: each checkpoint, the
// latest, both savepoints (the canonical one into another kind), at the
// old parallelism and rescaled to 1 and 3.
func sources(kind backend.Kind) []source {
	other := backend.KindLSM
	if kind == backend.KindLSM {
		other = backend.KindFile
	}
	var out []source
	for _, par := range []int{1, oldPar, 3} {
		for sub := range par {
			for _, s := range []source{{ckpt: 1}, {ckpt: 2}, {ckpt: 0}, {savepoint: "native"}, {savepoint: "canonical", into: other}} {
				s.parallelism, s.subtask = par, sub
				if s.into == "" {
					s.into = kind
				}
				out = append(out, s)
			}
		}
	}
	return out
}

// TestRestoreUndamaged: every source of every fixture restores to the
// model, the baseline the fuzz targets compare with.
func TestRestoreUndamaged(t *testing.T) {
	defer silence()()
	ctx := context.Background()
	for _, kind := range kinds {
		f := fixtureOf(t, kind)
		for _, src := range sources(kind) {
			if err := restore(ctx, scratchDir(t), f, f.objects, src); err != nil {
				t.Errorf("%s fixture, %s: %v", kind, src, err)
			}
		}
	}
}
