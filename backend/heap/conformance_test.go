package heap_test

import (
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/backendtest"
	"github.com/statedhq/stated/backend/heap"
	"github.com/statedhq/stated/tiered/memstore"
)

func TestConformance(t *testing.T) {
	backendtest.Run(t, backendtest.Harness{Kind: backend.KindHeap, Open: func(t testing.TB, o backend.Options) (backend.Backend, error) {
		// The suite passes a *memstore.Store (or nil to test validation);
		// heap keeps its snapshots there so the suite can damage them.
		snaps, _ := o.Store.(*memstore.Store)
		return heap.Open(o, heap.Options{Snapshots: snaps})
	}})
}
