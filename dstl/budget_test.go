package dstl

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/statedhq/stated/tiered/localfs"
	"github.com/statedhq/stated/tiered/memstore"
	"github.com/statedhq/stated/tiered/metered"
)

// otherLog is a LogStore that is not a TieredLogStore.
type otherLog struct{ LogStore }

// TestFlushDelayFor: a store that appends (a local directory, also behind
// a meter) keeps the short delay; any other tiered store is billed per
// request and gets the object-store delay.
func TestFlushDelayFor(t *testing.T) {
	dir, err := localfs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	mem := memstore.New()
	for _, tc := range []struct {
		name string
		ls   LogStore
		want time.Duration
	}{
		{"local dir", TieredLogStore{Store: dir}, DefaultFlushDelay},
		{"metered local dir", TieredLogStore{Store: metered.New(dir)}, DefaultFlushDelay},
		{"object store", TieredLogStore{Store: mem}, DefaultObjectStoreFlushDelay},
		{"metered object store", TieredLogStore{Store: metered.New(mem)}, DefaultObjectStoreFlushDelay},
		{"not tiered", otherLog{TieredLogStore{Store: mem}}, DefaultFlushDelay},
	} {
		if got := FlushDelayFor(tc.ls); got != tc.want {
			t.Errorf("%s: FlushDelayFor = %v, want %v", tc.name, got, tc.want)
		}
	}
	if DefaultObjectStoreFlushDelay < 100*DefaultFlushDelay {
		t.Errorf("the object-store delay %v does not bound requests much below the local one %v", DefaultObjectStoreFlushDelay, DefaultFlushDelay)
	}
}

// TestBarrierFlushesAllWritersInOneSegment: under an object store's long
// delay the changes of many writers wait in one buffer; the first
// Persist (a checkpoint's barrier) cuts it at once, so one upload makes
// every writer's changes durable, and each writer's Handle points into
// that one shared segment. Truncating all but one writer keeps the
// segment; the last one releases it.
func TestBarrierFlushesAllWritersInOneSegment(t *testing.T) {
	ls, s := memLog()
	w := newTestWriter(t, ls, Options{FlushDelay: time.Hour})
	ctx := context.Background()
	const writers = 16
	for i := range writers {
		for j := range 10 {
			if _, err := w.Append(ctx, fmt.Sprintf("w%02d", i), i, fmt.Appendf(nil, "c%d-%d", i, j)); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(20 * time.Millisecond)
	if n := w.Metrics().SegmentsWritten; n != 0 {
		t.Fatalf("%d segments before any barrier or the delay", n)
	}
	persisted := make(chan error, 1)
	go func() {
		_, err := w.Persist(ctx, "w00", 10)
		persisted <- err
	}()
	select {
	case err := <-persisted:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a Persist waited for the flush delay instead of cutting at once")
	}
	seg := ""
	for i := range writers {
		h, err := w.Persist(ctx, fmt.Sprintf("w%02d", i), 10)
		if err != nil {
			t.Fatal(err)
		}
		if segs := h.Segments(); len(segs) != 1 || (seg != "" && segs[0] != seg) {
			t.Fatalf("writer %d: segments %v, want the one shared segment %q", i, segs, seg)
		} else {
			seg = segs[0]
		}
		got, err := readAll(ls, h, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 10 || got[9].ch != fmt.Sprintf("c%d-9", i) {
			t.Fatalf("writer %d read back %v", i, got)
		}
	}
	if n := w.Metrics().SegmentsWritten; n != 1 {
		t.Fatalf("%d segments for one barrier, want 1", n)
	}
	if n := countObjects(t, s); n != 1 {
		t.Fatalf("%d objects in the store, want 1", n)
	}
	for i := range writers - 1 {
		w.Truncate(fmt.Sprintf("w%02d", i), 10)
	}
	if !w.Holds(seg) || len(w.TakeReleased()) != 0 {
		t.Fatal("the shared segment was released while one writer still references it")
	}
	w.Truncate(fmt.Sprintf("w%02d", writers-1), 10)
	if w.Holds(seg) {
		t.Fatal("the segment is still held after every writer truncated past it")
	}
	if rel := w.TakeReleased(); len(rel) != 1 || rel[0] != seg {
		t.Fatalf("released %v, want [%s]", rel, seg)
	}
}
