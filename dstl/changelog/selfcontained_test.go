package changelog_test

import (
	"bytes"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/backendtest"
	"github.com/statedhq/stated/dstl"
	"github.com/statedhq/stated/dstl/changelog"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestSelfContainedRestoresWithoutTheLog: a checkpoint's handle after
// random writes, checkpoints and materializations, made self-contained
// into another store (its other files copied there as a savepoint copies
// them), restores the model's state there with an empty log store: it
// needs nothing from the shared segments.
func TestSelfContainedRestoresWithoutTheLog(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		e := newEnv(t)
		b := e.open()
		m := backendtest.NewModel(propStates...)
		var h *backend.Handle
		for range rapid.IntRange(1, 6).Draw(rt, "checkpoints") {
			e.puts(b, m, rapid.IntRange(0, 80).Draw(rt, "puts"))
			if rapid.Bool().Draw(rt, "materialize") {
				if err := b.Materialize(e.ctx); err != nil {
					rt.Fatal(err)
				}
			}
			h, _ = e.checkpoint(b)
			if rapid.Bool().Draw(rt, "confirm") {
				b.NotifyCheckpointComplete(h.CheckpointID)
			}
		}
		dst := memstore.New()
		nh, written, err := changelog.SelfContained(e.ctx, e.store, e.ls.(dstl.TieredLogStore).Store, h, dst)
		if err != nil {
			rt.Fatal(err)
		}
		if len(h.Log.Segments) > 0 && (len(nh.Log.Segments) > 0 || len(written) == 0) {
			rt.Fatalf("self-contained handle still reads segments %v (wrote %v)", nh.Log.Segments, written)
		}
		if err := nh.Validate(); err != nil {
			rt.Fatalf("self-contained handle: %v", err)
		}
		own := map[string]bool{}
		for _, n := range written {
			own[n] = true
		}
		for _, f := range nh.Files {
			if own[f.Path] {
				continue
			}
			data, err := tiered.ReadAll(e.ctx, e.store, f.Path, 1<<30)
			if err != nil {
				rt.Fatal(err)
			}
			if err := dst.Put(e.ctx, f.Path, bytes.NewReader(data), int64(len(data))); err != nil {
				rt.Fatal(err)
			}
		}
		// A daemon elsewhere: the handle's store, and a log of its own.
		emptyLog := dstl.TieredLogStore{Store: memstore.New()}
		w, err := dstl.NewWriter(emptyLog, dstl.Options{FlushDelay: time.Millisecond})
		if err != nil {
			rt.Fatal(err)
		}
		defer w.Close()
		r, err := changelog.Open(backend.Options{
			Task: propTask, KeyGroups: backend.KeyGroupRange{Start: 0, End: propMaxP - 1}, MaxParallelism: propMaxP,
			States: propStates, Store: dst, Clock: e.clock.Now, Restore: []*backend.Handle{nh},
		}, changelog.Options{
			OpenInner: func(o backend.Options) (backend.Backend, error) { return inners[backend.KindHeap](t, o) },
			Writer:    w, Log: emptyLog,
		})
		if err != nil {
			rt.Fatalf("restore of the self-contained handle: %v", err)
		}
		defer r.Close()
		checkValues(rt, r, m, e.clock.Ms(), "the self-contained handle")
	})
}
