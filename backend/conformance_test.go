package backend_test

import (
	"fmt"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/backendtest"
	"github.com/statedhq/stated/backend/file"
	"github.com/statedhq/stated/backend/heap"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/tiered/memstore"
)

// harnesses are the three backends, opened the way the suite asks: the heap
// backend keeps its snapshots in the suite's memstore, lsm gets a fresh
// directory per instance, in local and in remote mode.
var harnesses = []backendtest.Harness{
	{Kind: backend.KindHeap, Open: func(t testing.TB, opts backend.Options) (backend.Backend, error) {
		store, ok := opts.Store.(*memstore.Store)
		if !ok {
			return nil, fmt.Errorf("%w: the heap harness needs a *memstore.Store, got %T", backend.ErrInvalidArgument, opts.Store)
		}
		return heap.Open(opts, heap.Options{Snapshots: store})
	}},
	{Kind: backend.KindFile, Open: func(t testing.TB, opts backend.Options) (backend.Backend, error) {
		return file.Open(opts, file.Options{TempDir: t.TempDir()})
	}},
	{Kind: backend.KindLSM, Open: func(t testing.TB, opts backend.Options) (backend.Backend, error) {
		return lsm.Open(opts, lsm.Options{Dir: t.TempDir()})
	}},
	// lsm in remote mode: SSTs in the suite's store (--lsm-remote).
	// VerifyRestore because the suite wants damage found at restore.
	{Kind: backend.KindLSM, Open: func(t testing.TB, opts backend.Options) (backend.Backend, error) {
		return lsm.Open(opts, lsm.Options{Dir: t.TempDir(),
			Remote: &lsm.RemoteOptions{Store: opts.Store, CacheBytes: 4 << 20, SpoolDir: t.TempDir(), VerifyRestore: true}})
	}},
}

// TestConformance runs the conformance suite against every backend kind,
// so that a backend cannot drop out of it by losing its own one-line test.
func TestConformance(t *testing.T) {
	for _, h := range harnesses {
		t.Run(string(h.Kind), func(t *testing.T) { backendtest.Run(t, h) })
	}
}

// TestCanonicalAcrossKinds moves state between every pair of backend kinds
// through a canonical savepoint.
func TestCanonicalAcrossKinds(t *testing.T) {
	backendtest.RunCanonicalAcross(t, harnesses...)
}
