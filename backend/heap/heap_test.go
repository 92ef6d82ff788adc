package heap_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/file"
	"github.com/statedhq/stated/backend/heap"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

var (
	task   = backend.TaskID{Job: "job", Operator: "op", Subtask: 0}
	r      = backend.KeyGroupRange{Start: 0, End: 7}
	states = []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}
	key    = backend.Key{KeyGroup: 3, Key: []byte("k")}
)

func opts(store tiered.Store, restore ...*backend.Handle) backend.Options {
	return backend.Options{Task: task, KeyGroups: r, MaxParallelism: 8, States: states, Store: store, Restore: restore}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func snapshot(t *testing.T, b backend.Backend, id uint64) (*backend.Handle, error) {
	t.Helper()
	p, err := b.Snapshot(context.Background(), id)
	must(t, err)
	return p.Run(context.Background())
}

func TestSnapshotsLiveInDaemonMemory(t *testing.T) {
	ckpt, snaps := memstore.New(), memstore.New()
	b, err := heap.Open(opts(ckpt), heap.Options{Snapshots: snaps})
	must(t, err)
	defer b.Close()
	if b.Info().Kind != backend.KindHeap {
		t.Fatalf("kind %s", b.Info().Kind)
	}
	must(t, b.Put("v", key, []byte("x")))
	h, err := snapshot(t, b, 1)
	must(t, err)
	if h.Backend != backend.KindHeap || ckpt.Bytes() != 0 || snaps.Bytes() != h.FullSize {
		t.Fatalf("handle %s, checkpoint store %d bytes, snapshot store %d bytes", h.Backend, ckpt.Bytes(), snaps.Bytes())
	}
	// Task failover inside the same daemon: the snapshot is there.
	r2, err := heap.Open(opts(ckpt, h), heap.Options{Snapshots: snaps})
	must(t, err)
	if v, _, _ := r2.Get("v", key); string(v) != "x" {
		t.Fatalf("restored %q", v)
	}
	// Daemon restart: a new memstore has no snapshots, and the error says
	// why instead of restoring anything.
	_, err = heap.Open(opts(ckpt, h), heap.Options{Snapshots: memstore.New()})
	if !errors.Is(err, backend.ErrNotFound) || !strings.Contains(err.Error(), "do not survive a daemon restart") ||
		!strings.Contains(err.Error(), h.Files[0].Path) {
		t.Fatalf("restore after restart: %v", err)
	}
}

func TestSizeCapDeclines(t *testing.T) {
	snaps := memstore.New()
	b, err := heap.Open(opts(memstore.New()), heap.Options{Snapshots: snaps, MaxSnapshotSize: 1000})
	must(t, err)
	defer b.Close()
	must(t, b.Put("v", key, make([]byte, 2000)))
	_, err = snapshot(t, b, 1)
	if !errors.Is(err, backend.ErrDeclined) || !strings.Contains(err.Error(), "1000-byte cap") || snaps.Bytes() != 0 {
		t.Fatalf("over the cap: %v (%d bytes kept)", err, snaps.Bytes())
	}
	// Under the default cap (5 MiB) the same state is kept.
	d, err := heap.Open(opts(memstore.New()), heap.Options{Snapshots: snaps})
	must(t, err)
	defer d.Close()
	must(t, d.Put("v", key, make([]byte, 2000)))
	if _, err := snapshot(t, d, 1); err != nil {
		t.Fatal(err)
	}
	big, err := heap.Open(opts(memstore.New()), heap.Options{Snapshots: snaps})
	must(t, err)
	defer big.Close()
	for i := 0; i < 6; i++ {
		must(t, big.Put("v", backend.Key{KeyGroup: i, Key: []byte("k")}, make([]byte, 1<<20)))
	}
	if _, err := snapshot(t, big, 1); !errors.Is(err, backend.ErrDeclined) || !strings.Contains(err.Error(), "5242880-byte cap") {
		t.Fatalf("over the default cap: %v", err)
	}
}

func TestRestoreFromFileHandle(t *testing.T) {
	ckpt := memstore.New()
	f, err := file.Open(opts(ckpt), file.Options{Compression: "zstd"})
	must(t, err)
	defer f.Close()
	must(t, f.Put("v", key, []byte("from file")))
	h, err := snapshot(t, f, 1)
	must(t, err)
	b, err := heap.Open(opts(ckpt, h), heap.Options{Snapshots: memstore.New()})
	must(t, err)
	defer b.Close()
	if v, _, _ := b.Get("v", key); string(v) != "from file" {
		t.Fatalf("restored %q", v)
	}
}

func TestOptions(t *testing.T) {
	_, err := heap.Open(opts(memstore.New()), heap.Options{MaxSnapshotSize: -1})
	if !errors.Is(err, backend.ErrInvalidArgument) || !strings.Contains(err.Error(), "Options.Snapshots") ||
		!strings.Contains(err.Error(), "negative") {
		t.Fatalf("bad options: %v", err)
	}
	o := heap.Options{Snapshots: memstore.New()}
	o.EnsureDefaults()
	if o.MaxSnapshotSize != heap.DefaultMaxSnapshotSize {
		t.Fatalf("default cap %d", o.MaxSnapshotSize)
	}
}
