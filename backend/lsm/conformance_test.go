package lsm_test

import (
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/backendtest"
	"github.com/statedhq/stated/backend/lsm"
)

func TestConformance(t *testing.T) {
	backendtest.Run(t, backendtest.Harness{Kind: backend.KindLSM, Open: func(t testing.TB, o backend.Options) (backend.Backend, error) {
		return lsm.Open(o, lsm.Options{Dir: t.TempDir(), MemTableSize: 256 << 10, CacheSize: 1 << 20})
	}})
}

// TestConformanceRemote runs the suite in remote mode: the SSTs live in
// the suite's store (checkpoints hand them over, restores reference them).
// VerifyRestore: the suite expects a restore to fail on any damaged byte,
// which a restore by reference finds only on read otherwise.
func TestConformanceRemote(t *testing.T) {
	backendtest.Run(t, backendtest.Harness{Kind: backend.KindLSM, Open: func(t testing.TB, o backend.Options) (backend.Backend, error) {
		return lsm.Open(o, lsm.Options{Dir: t.TempDir(), MemTableSize: 256 << 10, CacheSize: 1 << 20,
			Remote: &lsm.RemoteOptions{Store: o.Store, CacheBytes: 1 << 20, VerifyRestore: true}})
	}})
}
