package dstl

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/statedhq/stated/tiered"
)

// recordingLog is a LogStore and Preparer over a real local directory
// that records which names were prepared when their Put came.
type recordingLog struct {
	TieredLogStore
	p tiered.Preparer

	mu            sync.Mutex
	prepared      map[string]bool
	puts, hits    int
	unprepareCall []string
}

func (r *recordingLog) Prepare(ctx context.Context, names []string) error {
	err := r.p.Prepare(ctx, names)
	r.mu.Lock()
	for _, n := range names {
		r.prepared[n] = true
	}
	r.mu.Unlock()
	return err
}

func (r *recordingLog) Unprepare(ctx context.Context, names []string) error {
	r.mu.Lock()
	r.unprepareCall = append(r.unprepareCall, names...)
	r.mu.Unlock()
	return r.p.Unprepare(ctx, names)
}

func (r *recordingLog) Put(ctx context.Context, name string, data []byte) error {
	r.mu.Lock()
	r.puts++
	if r.prepared[name] {
		r.hits++
	}
	r.mu.Unlock()
	return r.TieredLogStore.Put(ctx, name, data)
}

// A Writer over a store that prepares names (and does not append: a
// local directory appends, see TieredLogStore.Put) writes its segments into
// names prepared ahead, holds the prepared names of segments to come,
// and leaves no empty placeholder behind when it closes; every segment
// it wrote is whole.
func TestWriterPreparesSegmentNames(t *testing.T) {
	ctx := context.Background()
	store := openLocal(t)
	p, ok := tiered.AsPreparer(store)
	if !ok {
		t.Fatal("a local directory store is no Preparer")
	}
	if preparerOf(TieredLogStore{Store: store}) != nil {
		t.Fatal("a TieredLogStore over a local directory, which appends its segments, prepares names")
	}
	rl := &recordingLog{TieredLogStore: TieredLogStore{Store: store}, p: p, prepared: map[string]bool{}}
	w, err := NewWriter(rl, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const segments = 40
	var handles []Handle
	for i := range segments {
		seq, err := w.Append(ctx, "w", 1, fmt.Appendf(nil, "change %d", i))
		if err != nil {
			t.Fatal(err)
		}
		h, err := w.Persist(ctx, "w", seq)
		if err != nil {
			t.Fatal(err)
		}
		handles = append(handles, h)
	}
	next := w.segName(segments+1, 0)
	// The last cut asked for more names; the preparer may still be at it.
	for deadline := time.Now().Add(5 * time.Second); !w.Holds(next) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if !w.Holds(next) {
		t.Errorf("the Writer does not hold %s, prepared for its next segment", next)
	}
	if w.Holds(w.segName(segments+prepareAhead+5, 0)) || w.Holds("_changelog/shared/other-run/0000000000000001-0") {
		t.Error("the Writer holds names it never prepared")
	}
	m := w.Metrics()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rl.mu.Lock()
	puts, hits := rl.puts, rl.hits
	rl.mu.Unlock()
	// The first segments may come before the first Prepare returned.
	if puts != segments || hits < segments-prepareAhead {
		t.Errorf("%d of %d segment puts went to prepared names, want at least %d", hits, puts, segments-prepareAhead)
	}
	if m.SegmentsPrepared == 0 || m.PrepareFailures != 0 {
		t.Errorf("metrics: %d names prepared, %d failures", m.SegmentsPrepared, m.PrepareFailures)
	}
	if len(rl.unprepareCall) == 0 {
		t.Error("Close unprepared nothing")
	}
	var objects int
	err = tiered.Walk(ctx, store, "", func(o tiered.ObjectInfo) error {
		objects++
		if o.Size == 0 {
			return fmt.Errorf("empty object %s left behind", o.Name)
		}
		_, err := ReadIndex(ctx, TieredLogStore{Store: store}, o.Name, o.Size)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if objects != segments {
		t.Fatalf("%d objects in the store, want the %d segments", objects, segments)
	}
	for i, h := range handles {
		var got []string
		err := Read(ctx, TieredLogStore{Store: store}, h, ReadOptions{}, func(r Record) error {
			got = append(got, string(r.Change))
			return nil
		})
		// Nothing was truncated: handle i is the window of changes 0..i.
		if err != nil || len(got) != i+1 || got[i] != fmt.Sprintf("change %d", i) {
			t.Fatalf("handle %d reads %q, %v", i, got, err)
		}
	}
}

// blockingLog is a LogStore whose Puts wait for release.
type blockingLog struct {
	TieredLogStore
	entered chan string
	release chan struct{}
}

func (b *blockingLog) Put(ctx context.Context, name string, data []byte) error {
	b.entered <- name
	<-b.release
	return b.TieredLogStore.Put(ctx, name, data)
}

// A segment is held while it uploads, not only once durable: a sweep may
// list its object (a prepared name's, or one just renamed into place)
// before the upload returns, and must not delete it.
func TestWriterHoldsUploadingSegments(t *testing.T) {
	ctx := context.Background()
	bl := &blockingLog{TieredLogStore: TieredLogStore{Store: openLocal(t)}, entered: make(chan string, 4), release: make(chan struct{})}
	w, err := NewWriter(bl, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	released := false
	defer func() { // before Close, which waits for the upload
		if !released {
			close(bl.release)
		}
	}()
	seq, err := w.Append(ctx, "w", 1, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := w.Persist(ctx, "w", seq)
		done <- err
	}()
	name := <-bl.entered
	if !w.Holds(name) {
		t.Fatalf("segment %s is uploading and not held", name)
	}
	close(bl.release)
	released = true
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !w.Holds(name) {
		t.Fatalf("durable segment %s is not held", name)
	}
}
