package fuzz

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/internal/frame"
)

// TestOverlappingHandlesRefused: a manifest, validly framed, in which one
// subtask's handle claims the other's key groups too (found by
// FuzzRestoreLSM) is refused as corrupt for every restore of the
// operator; taken as it read, a restore at parallelism 1 picked the
// claimant alone and lost the other subtask's keys.
func TestOverlappingHandlesRefused(t *testing.T) {
	defer silence()()
	for _, kind := range []backend.Kind{backend.KindFile, backend.KindLSM} {
		f := fixtureOf(t, kind)
		root := scratchDir(t)
		name := catalog.CheckpointManifest(job, 2)
		version, payload, err := frame.Decode("STMF", f.objects[name])
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(payload, &m); err != nil {
			t.Fatal(err)
		}
		first := m["tasks"].([]any)[0].(map[string]any)
		first["keyGroups"].(map[string]any)["end"] = float64(maxPar - 1)
		edited, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		objects := f.clone()
		objects[name] = frame.Encode("STMF", version, edited)
		for _, par := range []int{1, oldPar, 3} {
			err := restore(context.Background(), root, f, objects, source{ckpt: 2, parallelism: par, subtask: 0, into: kind})
			if !errors.Is(err, backend.ErrCorrupt) {
				t.Errorf("%s at parallelism %d: %v, want corruption", kind, par, err)
			}
		}
	}
}
