package rescale_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/heap"
	"github.com/statedhq/stated/rescale"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestRestoreAllFailureClosesTheOthers: when one subtask fails to open,
// RestoreAll returns an error naming it and closes every backend it did
// open, whatever the parallelism.
func TestRestoreAllFailureClosesTheOthers(t *testing.T) {
	snaps := memstore.New()
	kc := kindCase{kind: backend.KindHeap, open: func(t testing.TB, o backend.Options) (backend.Backend, error) {
		return heap.Open(o, heap.Options{Snapshots: snaps})
	}}
	j := newJob(t, kc, 16, 3, []int{0, 5, 6, 15})
	plan, err := rescale.PlanOperator(j.handles, 16, 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, parallel := range []int{0, 1, 2, 8} {
		var mu sync.Mutex
		var opened []backend.Backend
		boom := errors.New("boom")
		_, err := plan.RestoreAll(ctx, j.baseOptions(), parallel, func(_ context.Context, st rescale.Subtask, o backend.Options) (backend.Backend, error) {
			if st.Index == 3 {
				return nil, boom
			}
			if o.KeyGroups != st.KeyGroups || o.Task.Subtask != st.Index || len(o.Restore) != len(st.Sources) || o.Restore[0] != st.Sources[0].Handle {
				t.Errorf("subtask %d got options %+v", st.Index, o)
			}
			b, err := kc.open(t, o)
			if err == nil {
				mu.Lock()
				opened = append(opened, b)
				mu.Unlock()
			}
			return b, err
		})
		if !errors.Is(err, boom) || !strings.Contains(err.Error(), "subtask 3 of 5") {
			t.Fatalf("parallel %d: error %v, want boom naming subtask 3", parallel, err)
		}
		if len(opened) != 4 {
			t.Fatalf("parallel %d: opened %d subtasks, want the 4 others", parallel, len(opened))
		}
		for _, b := range opened {
			if _, _, err := b.Get("value", keyOf(b.Info().KeyGroups.Start, "")); !errors.Is(err, backend.ErrClosed) {
				t.Fatalf("parallel %d: subtask %d left open (%v)", parallel, b.Info().Task.Subtask, err)
			}
		}
	}
	if _, err := plan.RestoreAll(ctx, j.baseOptions(), 1, nil); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("nil opener: %v", err)
	}
}
