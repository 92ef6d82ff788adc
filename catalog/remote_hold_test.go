package catalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/refcount/markers"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// markerGate holds back puts of instance markers while closed.
type markerGate struct {
	tiered.Store
	mu   sync.Mutex
	gate chan struct{} // nil: open
}

func (g *markerGate) shut() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *markerGate) release() {
	g.mu.Lock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
	g.mu.Unlock()
}

func (g *markerGate) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	if m, ok := markers.ParseMarker(name); ok && m.Kind == markers.MarkerInstance {
		g.mu.Lock()
		gate := g.gate
		g.mu.Unlock()
		if gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return g.Store.Put(ctx, name, r, size)
}

// TestRemoteRestoreHolds: a claimed restore serves before its instance
// markers are written; meanwhile its hold keeps the restored objects
// through a discard of the checkpoint restored from and through sweeps,
// and once the markers are written the hold goes and they keep the
// objects. A restore of a checkpoint discarded before its hold was written
// fails, naming the checkpoint, and leaves no hold.
func TestRemoteRestoreHolds(t *testing.T) {
	ctx := context.Background()
	clk := &testClock{}
	gate := &markerGate{Store: &stampStore{Store: memstore.New(), clk: clk, at: map[string]time.Time{}}}
	c, err := Open(ctx, clk.opts(gate))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	task := backend.TaskID{Job: "a", Operator: "op"}
	open := func(restore *backend.Handle) (*lsm.Backend, error) {
		o := backend.Options{Task: task, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, MaxParallelism: 128,
			States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}, Store: gate}
		if restore != nil {
			o.Restore = []*backend.Handle{restore}
			o.RestoreHeld = func(ctx context.Context) error {
				if _, err := gate.Stat(ctx, CheckpointManifest("a", restore.CheckpointID)); err != nil {
					return fmt.Errorf("checkpoint %d: %w", restore.CheckpointID, err)
				}
				return nil
			}
		}
		// No background compaction: the test moves its clock hours ahead
		// between sweeps, which would make a table a compaction had just
		// written (its instance marker still on its way) look older than
		// the grace period that protects it in real time.
		return lsm.Open(o, lsm.Options{Dir: "/inst", FS: vfs.NewMem(), MemTableSize: 64 << 10,
			DisableAutomaticCompactions: true,
			Remote:                      &lsm.RemoteOptions{Store: gate, CacheBytes: 1 << 20, LeaseInterval: time.Hour}})
	}
	src, err := open(nil)
	if err != nil {
		t.Fatal(err)
	}
	key := func(i int) backend.Key { return backend.Key{KeyGroup: i % 128, Key: []byte(fmt.Sprintf("k%04d", i))} }
	checkpoint := func(b *lsm.Backend, id uint64) *backend.Handle { return realCheckpoint(t, c, b, id).Tasks[0] }
	for round := range 3 {
		for i := range 300 {
			if err := src.Put("v", key(i), []byte(fmt.Sprintf("%d-%0100d", round, i))); err != nil {
				t.Fatal(err)
			}
		}
		if err := src.DB().Flush(); err != nil {
			t.Fatal(err)
		}
	}
	h1 := checkpoint(src, 1)
	if len(h1.Files) < 2 {
		t.Fatalf("checkpoint 1 has %d tables", len(h1.Files))
	}
	readAll := func(b *lsm.Backend, when string) {
		t.Helper()
		for i := range 300 {
			v, ok, err := b.Get("v", key(i))
			if err != nil || !ok || string(v) != fmt.Sprintf("2-%0100d", i) {
				t.Fatalf("%s: key %d: %q %v %v", when, i, v, ok, err)
			}
		}
	}
	tablesThere := func(when string) {
		t.Helper()
		for _, f := range h1.Files {
			if _, err := gate.Stat(ctx, f.Path); err != nil {
				t.Fatalf("%s: table %s: %v", when, f.Path, err)
			}
		}
	}
	holds := func() int {
		t.Helper()
		hs, err := markers.Holds(ctx, gate, "a/shared/lsm/")
		if err != nil {
			t.Fatal(err)
		}
		return len(hs)
	}

	gate.shut()
	r, err := open(h1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.RestoreMarked() || holds() != 1 {
		t.Fatalf("restore with instance markers held back: marked %v, %d holds", r.RestoreMarked(), holds())
	}
	readAll(r, "restored, markers pending")
	// Nothing but checkpoint 1's markers and the hold keep the tables now.
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteCheckpoint(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	tablesThere("checkpoint 1 deleted while the restore holds its tables")
	clk.Advance(2 * time.Hour)
	if err := r.RefreshLease(ctx); err != nil { // rewrites the hold too
		t.Fatal(err)
	}
	if _, err := c.GC(ctx, false); err != nil {
		t.Fatal(err)
	}
	tablesThere("swept past the grace period while the restore holds the tables")
	readAll(r, "after the sweep, markers pending")

	gate.release()
	for deadline := time.Now().Add(10 * time.Second); !r.RestoreMarked(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("instance markers not written after the gate opened")
		}
	}
	if n := holds(); n != 0 {
		t.Fatalf("%d holds left after the markers were written", n)
	}
	clk.Advance(2 * time.Hour)
	if err := r.RefreshLease(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GC(ctx, false); err != nil {
		t.Fatal(err)
	}
	tablesThere("swept with the instance markers written")
	readAll(r, "after the second sweep")
	for _, f := range h1.Files {
		ms, err := markers.Markers(ctx, gate, f.Path)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != 1 || !strings.Contains(ms[0], ".ref.0.i_") {
			t.Fatalf("markers of %s after the sweep: %v (want the instance's only)", f.Path, ms)
		}
	}

	// A checkpoint discarded before the restore wrote its hold.
	h2 := checkpoint(r, 2)
	if err := c.DeleteCheckpoint(ctx, "a", 2); err != nil {
		t.Fatal(err)
	}
	_, err = open(h2)
	if err == nil || !strings.Contains(err.Error(), "checkpoint 2") || !errors.Is(err, tiered.ErrNotFound) {
		t.Fatalf("restore of a discarded checkpoint: %v", err)
	}
	if n := holds(); n != 0 {
		t.Fatalf("the failed restore left %d holds", n)
	}

	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Hour)
	if _, err := c.GC(ctx, false); err != nil {
		t.Fatal(err)
	}
	var left []string
	if err := tiered.Walk(ctx, gate, "a/shared/lsm/", func(o tiered.ObjectInfo) error {
		left = append(left, o.Name)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("left in the store with nothing open and nothing retained: %v", left)
	}
}
