package lsm_test

import (
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/backendtest"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/s3store/s3test"
)

func TestConformance(t *testing.T) {
	backendtest.Run(t, backendtest.Harness{Kind: backend.KindLSM, Open: func(t testing.TB, o backend.Options) (backend.Backend, error) {
		return lsm.Open(o, lsm.Options{Dir: t.TempDir(), MemTableSize: 256 << 10, CacheSize: 1 << 20})
	}})
}

// remoteHarness opens lsm in remote mode: the SSTs live in the suite's
// store (checkpoints hand them over, restores reference them).
// VerifyRestore: the suite expects a restore to fail on any damaged byte,
// which a restore by reference finds only on read otherwise.
var remoteHarness = backendtest.Harness{Kind: backend.KindLSM, Open: func(t testing.TB, o backend.Options) (backend.Backend, error) {
	return lsm.Open(o, lsm.Options{Dir: t.TempDir(), MemTableSize: 256 << 10, CacheSize: 1 << 20,
		Remote: &lsm.RemoteOptions{Store: o.Store, CacheBytes: 1 << 20, VerifyRestore: true}})
}}

// TestConformanceRemote runs the suite in remote mode over memory.
func TestConformanceRemote(t *testing.T) {
	backendtest.Run(t, remoteHarness)
}

// TestConformanceRemoteS3 runs the suite in remote mode over S3: the
// server the tests start (STATED_TEST_S3_ENDPOINT, versitygw in CI), else
// an in-process gofakes3; every subtest gets a fresh prefix.
func TestConformanceRemoteS3(t *testing.T) {
	h := remoteHarness
	h.Store = func(t testing.TB) tiered.Store { return s3test.Store(t) }
	backendtest.Run(t, h)
}
