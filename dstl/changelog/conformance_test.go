package changelog_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/backendtest"
	"github.com/statedhq/stated/backend/file"
	"github.com/statedhq/stated/backend/heap"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/dstl"
	"github.com/statedhq/stated/dstl/changelog"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// inners open the wrapped backend kinds as their own conformance tests do.
var inners = map[backend.Kind]func(t testing.TB, o backend.Options) (backend.Backend, error){
	backend.KindHeap: func(t testing.TB, o backend.Options) (backend.Backend, error) {
		store, ok := o.Store.(*memstore.Store)
		if !ok {
			return nil, fmt.Errorf("%w: the heap inner needs a *memstore.Store, got %T", backend.ErrInvalidArgument, o.Store)
		}
		return heap.Open(o, heap.Options{Snapshots: store})
	},
	backend.KindFile: func(t testing.TB, o backend.Options) (backend.Backend, error) {
		return file.Open(o, file.Options{TempDir: t.TempDir()})
	},
	backend.KindLSM: func(t testing.TB, o backend.Options) (backend.Backend, error) {
		return lsm.Open(o, lsm.Options{Dir: t.TempDir()})
	},
}

// logs gives each checkpoint store (one per suite subtest) one shared
// writer over its own in-memory log store, as a daemon has one writer for
// all its instances: restores within the subtest read what earlier
// instances logged.
type logs struct {
	mu sync.Mutex
	m  map[tiered.Store]*logEnv
}

type logEnv struct {
	w  *dstl.Writer
	ls dstl.LogStore
}

func (l *logs) get(t testing.TB, store tiered.Store) (*logEnv, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.m[store]; e != nil {
		return e, nil
	}
	ls := dstl.TieredLogStore{Store: memstore.New()}
	w, err := dstl.NewWriter(ls, dstl.Options{FlushDelay: time.Millisecond, BlockSize: 512})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = w.Close() })
	if l.m == nil {
		l.m = map[tiered.Store]*logEnv{}
	}
	e := &logEnv{w: w, ls: ls}
	l.m[store] = e
	return e, nil
}

// lsmRemote opens lsm in remote mode (--lsm-remote) over the suite's
// store, with VerifyRestore as backend's own remote harness: the suite
// wants damage found at restore.
func lsmRemote(t testing.TB, o backend.Options) (backend.Backend, error) {
	return lsm.Open(o, lsm.Options{Dir: t.TempDir(),
		Remote: &lsm.RemoteOptions{Store: o.Store, CacheBytes: 4 << 20, SpoolDir: t.TempDir(), VerifyRestore: true}})
}

func harness(kind backend.Kind) backendtest.Harness {
	return harnessOver(kind, inners[kind])
}

// harnessOver is changelog mode over inner, a backend of kind.
func harnessOver(kind backend.Kind, inner func(t testing.TB, o backend.Options) (backend.Backend, error)) backendtest.Harness {
	l := &logs{}
	return backendtest.Harness{Kind: kind, Open: func(t testing.TB, o backend.Options) (backend.Backend, error) {
		e, err := l.get(t, o.Store)
		if err != nil {
			return nil, err
		}
		return changelog.Open(o, changelog.Options{
			OpenInner: func(io backend.Options) (backend.Backend, error) { return inner(t, io) },
			Writer:    e.w, Log: e.ls,
		})
	}}
}

// TestConformance runs the backend conformance suite against changelog
// mode over every inner kind.
func TestConformance(t *testing.T) {
	for _, k := range []backend.Kind{backend.KindHeap, backend.KindLSM, backend.KindFile} {
		t.Run(string(k), func(t *testing.T) { backendtest.Run(t, harness(k)) })
	}
	t.Run("lsm-remote", func(t *testing.T) { backendtest.Run(t, harnessOver(backend.KindLSM, lsmRemote)) })
}
