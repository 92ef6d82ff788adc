package fuzz

import (
	"math/rand/v2"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/cache"
	"github.com/statedhq/stated/tiered/localfs"
)

// The cache scenarios: the checkpoint store is tiered/cache, its copies
// on the host's crashable file system, in front of a remote on a file
// system of its own that keeps every acknowledged write (as an object
// store does). The lsm restores take their files through the cache's
// local copies (lsm.DownloadCache on the same file system).
func init() {
	plScenarios = append(plScenarios,
		plScenario{kind: backend.KindFile, cache: true},
		plScenario{kind: backend.KindLSM, cache: true},
		plScenario{kind: backend.KindLSM, changelog: true, cache: true},
	)
	plCacheStore = func(local, remote vfs.FS) (tiered.Store, error) {
		r, err := localfs.OpenWith(plRemote, localfs.Options{FS: remote})
		if err != nil {
			return nil, err
		}
		// Small enough that the scripts evict.
		c, err := cache.New(r, cache.Options{Dir: plCache, MaxBytes: 256 << 10, FS: local})
		if err != nil {
			r.Close()
			return nil, err
		}
		return c, nil
	}
}

// plRemoteCfg is the crash clone of the remote: everything it holds.
func plRemoteCfg() vfs.CrashCloneCfg {
	return vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(0, 0))}
}
