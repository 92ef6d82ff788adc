package file_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/file"
	"github.com/statedhq/stated/backend/heap"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/localfs"
	"github.com/statedhq/stated/tiered/memstore"
)

var (
	task   = backend.TaskID{Job: "job", Operator: "op", Subtask: 2}
	states = []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}
)

func opts(store tiered.Store, r backend.KeyGroupRange, restore ...*backend.Handle) backend.Options {
	return backend.Options{Task: task, KeyGroups: r, MaxParallelism: 32, States: states, Store: store, Restore: restore}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func snapshot(t *testing.T, b backend.Backend, id uint64) *backend.Handle {
	t.Helper()
	p, err := b.Snapshot(context.Background(), id)
	must(t, err)
	h, err := p.Run(context.Background())
	must(t, err)
	return h
}

// TestLocalDirRoundTrip writes snapshots into a local directory store with
// both compressions and restores sub-ranges from them.
func TestLocalDirRoundTrip(t *testing.T) {
	store, err := localfs.Open(t.TempDir())
	must(t, err)
	defer store.Close()
	full := backend.KeyGroupRange{Start: 0, End: 31}
	for _, comp := range []string{"", "zstd"} {
		b, err := file.Open(opts(store, full), file.Options{Compression: comp, TempDir: t.TempDir()})
		must(t, err)
		for kg := 0; kg < 32; kg++ {
			must(t, b.Put("v", backend.Key{KeyGroup: kg, Key: []byte("k")}, []byte(strings.Repeat("ab", kg*100))))
		}
		h := snapshot(t, b, 3)
		must(t, b.Close())
		if h.Backend != backend.KindFile || h.Files[0].Compression != comp || !strings.HasPrefix(h.Files[0].Path, "job/chk-3/op-2/state-") {
			t.Fatalf("handle %+v", h)
		}
		info, err := store.Stat(context.Background(), h.Files[0].Path)
		if err != nil || info.Size != h.Files[0].Size {
			t.Fatalf("stored file: %+v %v", info, err)
		}
		sub := backend.KeyGroupRange{Start: 10, End: 13}
		r, err := file.Open(opts(store, sub, h), file.Options{})
		must(t, err)
		for kg := 10; kg <= 13; kg++ {
			if v, _, _ := r.Get("v", backend.Key{KeyGroup: kg, Key: []byte("k")}); string(v) != strings.Repeat("ab", kg*100) {
				t.Fatalf("%q: key group %d = %d bytes", comp, kg, len(v))
			}
		}
		must(t, r.Close())
	}
}

func TestRestoreFromHeapHandleNeedsItsStore(t *testing.T) {
	snaps := memstore.New()
	r := backend.KeyGroupRange{Start: 0, End: 3}
	h, err := heap.Open(opts(memstore.New(), r), heap.Options{Snapshots: snaps})
	must(t, err)
	defer h.Close()
	must(t, h.Put("v", backend.Key{KeyGroup: 1, Key: []byte("k")}, []byte("x")))
	hh := snapshot(t, h, 1)
	// The file backend reads a heap handle from its restore store: here
	// the heap's snapshot store (a native savepoint would be the other
	// case).
	o := opts(memstore.New(), r, hh)
	o.RestoreStore = snaps
	b, err := file.Open(o, file.Options{})
	must(t, err)
	defer b.Close()
	if v, _, _ := b.Get("v", backend.Key{KeyGroup: 1, Key: []byte("k")}); string(v) != "x" {
		t.Fatalf("restored %q", v)
	}
	if _, err := file.Open(opts(memstore.New(), r, hh), file.Options{}); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("heap handle without its store: %v", err)
	}
}

func TestOptions(t *testing.T) {
	_, err := file.Open(backend.Options{}, file.Options{Compression: "lz4"})
	if !errors.Is(err, backend.ErrInvalidArgument) || !strings.Contains(err.Error(), "lz4") || !strings.Contains(err.Error(), "no checkpoint store") {
		t.Fatalf("bad options: %v", err)
	}
}
