package rescale_test

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/file"
	"github.com/statedhq/stated/rescale"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// countingStore counts the bytes read through Get and GetRange, and the
// reads of each object.
type countingStore struct {
	tiered.Store
	read atomic.Int64
	mu   sync.Mutex
	gets map[string]int
}

func (s *countingStore) count(name string) {
	s.mu.Lock()
	if s.gets == nil {
		s.gets = map[string]int{}
	}
	s.gets[name]++
	s.mu.Unlock()
}

// reads returns how often each object was read, and forgets the counts.
func (s *countingStore) reads() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.gets
	s.gets = nil
	return g
}

type countingReader struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (s *countingStore) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	s.count(name)
	rc, err := s.Store.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	return countingReader{rc, &s.read}, nil
}

func (s *countingStore) GetRange(ctx context.Context, name string, off, n int64) (io.ReadCloser, error) {
	s.count(name)
	rc, err := s.Store.GetRange(ctx, name, off, n)
	if err != nil {
		return nil, err
	}
	return countingReader{rc, &s.read}, nil
}

// TestFileRescaleReadsOnlyItsKeyGroups restores a file-backend job 2->7
// and checks, with a store that counts the bytes read, that each new
// subtask reads only the blocks of its own key groups (the handle's
// per-key-group offsets) plus a small header per source file, not the
// whole files of the old subtasks.
func TestFileRescaleReadsOnlyItsKeyGroups(t *testing.T) {
	const maxP, oldP, newP = 128, 2, 7
	store := &countingStore{Store: memstore.New()}
	base := backend.Options{Task: backend.TaskID{Job: "job", Operator: "op"}, MaxParallelism: maxP, States: testStates, Store: store}
	var old []*backend.Handle
	var total int64
	for i := 0; i < oldP; i++ {
		o := base
		o.Task.Subtask = i
		o.KeyGroups = backend.KeyGroupRangeForOperator(maxP, oldP, i)
		b, err := file.Open(o, file.Options{TempDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		for kg := o.KeyGroups.Start; kg <= o.KeyGroups.End; kg++ {
			for n := 0; n < 8; n++ {
				if err := b.Put("value", backend.Key{KeyGroup: kg, Key: fmt.Appendf(nil, "%d-%d", kg, n)}, make([]byte, 256)); err != nil {
					t.Fatal(err)
				}
			}
		}
		p, err := b.Snapshot(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		h, err := p.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = b.Close()
		old = append(old, h)
		total += h.FullSize
	}
	plan, err := rescale.PlanOperator(old, maxP, newP)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range plan.Subtasks {
		var blocks int64
		for _, src := range st.Sources {
			f := src.Handle.Files[0]
			a, z := src.Overlap.Start-src.Handle.KeyGroups.Start, src.Overlap.End-src.Handle.KeyGroups.Start
			blocks += f.KeyGroupOffsets[z+1] - f.KeyGroupOffsets[a]
		}
		store.read.Store(0)
		b, err := file.Open(plan.Options(st, base), file.Options{TempDir: t.TempDir()})
		if err != nil {
			t.Fatalf("subtask %d: %v", st.Index, err)
		}
		_ = b.Close()
		// Each source file costs its header (well under 1 KiB) on top of
		// the blocks of the overlapping key groups.
		read, limit := store.read.Load(), blocks+int64(len(st.Sources))*1024
		if read < blocks || read > limit {
			t.Fatalf("subtask %d %s read %d bytes from %d source(s); its key groups' blocks are %d bytes (limit %d; all old files %d bytes)",
				st.Index, st.KeyGroups, read, len(st.Sources), blocks, limit, total)
		}
		t.Logf("subtask %d %s: read %d bytes for %d bytes of blocks (old files: %d bytes)", st.Index, st.KeyGroups, read, blocks, total)
	}
}
