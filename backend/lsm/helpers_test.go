package lsm

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

var testTask = backend.TaskID{Job: "job", Operator: "op", Subtask: 0}

var testStates = []backend.StateDescriptor{
	{Name: "v", Kind: backend.KindValue},
	{Name: "l", Kind: backend.KindList},
	{Name: "m", Kind: backend.KindMap},
	{Name: "a", Kind: backend.KindAggregate, Aggregate: backend.AggSum, Number: backend.NumInt64},
	{Name: "t", Kind: backend.KindTimers},
}

type env struct {
	t     *testing.T
	store tiered.Store
	root  string // parent of the instances' local dirs
	fs    vfs.FS
	n     int
}

func newEnv(t *testing.T) *env {
	return &env{t: t, store: memstore.New(), root: t.TempDir(), fs: vfs.Default}
}

// open starts an instance in a fresh local directory.
func (e *env) open(r backend.KeyGroupRange, mod func(*backend.Options, *Options)) *Backend {
	e.t.Helper()
	e.n++
	opts := backend.Options{Task: testTask, KeyGroups: r, States: testStates, Store: e.store,
		Clock: func() time.Time { return time.Unix(1_700_000_000, 0) }}
	lo := Options{Dir: fmt.Sprintf("%s/inst-%d", e.root, e.n), MemTableSize: 1 << 20, TargetFileSize: 1 << 20, FS: e.fs}
	if mod != nil {
		mod(&opts, &lo)
	}
	b, err := Open(opts, lo)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = b.Close() })
	return b
}

func full() backend.KeyGroupRange { return backend.KeyGroupRange{Start: 0, End: 127} }

// failer is what must needs of a *testing.T or a *rapid.T.
type failer interface {
	Helper()
	Fatal(args ...any)
}

func must(t failer, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// checkpoint runs both parts of checkpoint id.
func checkpoint(t *testing.T, b *Backend, id uint64) *backend.Handle {
	t.Helper()
	p, err := b.Snapshot(context.Background(), id)
	must(t, err)
	h, err := p.Run(context.Background())
	must(t, err)
	return h
}

// dump returns every stored entry, raw (the state at a point in time).
func dump(t *testing.T, b *Backend) map[string]string {
	t.Helper()
	out := map[string]string{}
	must(t, engine{b.db}.Scan(nil, nil, func(k, v []byte) (bool, error) {
		out[string(k)] = string(v)
		return true, nil
	}))
	return out
}

func sameDump(t *testing.T, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d entries, want %d", len(got), len(want))
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Fatalf("entry %x = %x (present %v), want %x", k, g, ok, v)
		}
	}
}

func key(kg int, s string) backend.Key { return backend.Key{KeyGroup: kg, Key: []byte(s)} }

// sharedPaths returns the shared object names of h.
func sharedPaths(h *backend.Handle) map[string]bool {
	out := map[string]bool{}
	for _, f := range h.Files {
		if f.Shared {
			out[f.Path] = true
		}
	}
	return out
}

func fileNames(h *backend.Handle) string {
	var names []string
	for _, f := range h.Files {
		names = append(names, fmt.Sprintf("%s(%d,%v)", f.Path, f.Size, f.Shared))
	}
	sort.Strings(names)
	return strings.Join(names, "\n")
}

// fill writes values into every key group of r.
func fill(t *testing.T, b *Backend, r backend.KeyGroupRange, n int, tag string) {
	t.Helper()
	for i := 0; i < n; i++ {
		kg := r.Start + i%r.Len()
		must(t, b.Put("v", key(kg, fmt.Sprintf("k%06d", i)), []byte(fmt.Sprintf("%s-%d", tag, i))))
	}
}

// remoteOf is the remote mode of b, opened with Options.Remote.
func remoteOf(b *Backend) *remoteMode { return b.mode.(*remoteMode) }
