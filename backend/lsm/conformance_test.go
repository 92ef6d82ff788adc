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
