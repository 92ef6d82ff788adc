package host

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/host/webui"
	"github.com/statedhq/stated/inspect"
	"github.com/statedhq/stated/tiered"
)

// Bounds of the web page's state reader: one read at a time (it restores
// one task at a time into a directory of the data dir, with a small
// cache), each at most stateReadTimeout, and the summaries of the last
// stateCacheSize checkpoints kept (a completed checkpoint never changes;
// a summary is one record per state and per non-empty key group).
const (
	stateReadTimeout = 2 * time.Minute
	stateCacheSize   = 16
	// stateTempDir is the reader's directory in the data dir, emptied at
	// start (what a crash left behind).
	stateTempDir = "inspect-tmp"
)

// stateReader is the node's webui.StateReader: inspect's reader over the
// node's own checkpoint store (and changelog store, and heap snapshots in
// memory, so that heap checkpoints are readable here), for completed
// checkpoints the catalog retains.
type stateReader struct {
	cat    webui.Catalog
	opts   inspect.Options
	sem    chan struct{}
	ctx    context.Context // cancelled by close: reads stop at shutdown
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	cache map[stateKey]*inspect.Summary
	order []stateKey // oldest first
}

type stateKey struct {
	job       string
	id        uint64
	completed time.Time
}

func newStateReader(cat webui.Catalog, store, logStore, heap tiered.Store, dataDir string) (*stateReader, error) {
	dir := filepath.Join(dataDir, stateTempDir)
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("state reader: clear %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state reader: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &stateReader{cat: cat, sem: make(chan struct{}, 1), ctx: ctx, cancel: cancel, cache: map[stateKey]*inspect.Summary{},
		opts: inspect.Options{Store: store, LogStore: logStore, HeapSnapshots: heap, TempDir: dir}}, nil
}

// CheckpointState implements webui.StateReader.
func (s *stateReader) CheckpointState(ctx context.Context, job string, id uint64) (*inspect.Summary, error) {
	m, ok := s.cat.Checkpoint(job, id)
	if !ok {
		return nil, fmt.Errorf("%w: checkpoint %s is not a retained completed checkpoint", backend.ErrNotFound, catalog.CheckpointDir(job, id))
	}
	key := stateKey{job, id, m.Completed}
	s.mu.Lock()
	sum := s.cache[key]
	s.mu.Unlock()
	if sum != nil {
		return sum, nil
	}
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for another state read: %w", ctx.Err())
	case <-s.ctx.Done():
		return nil, fmt.Errorf("state reader: %w", s.ctx.Err())
	}
	s.wg.Add(1)
	defer func() {
		<-s.sem
		s.wg.Done()
	}()
	ctx, cancel := context.WithTimeout(ctx, stateReadTimeout)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	o := s.opts
	o.Dir = catalog.CheckpointDir(job, id)
	r, err := inspect.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	sum, err = r.Summarize(ctx, inspect.MatchAll())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cache[key] == nil {
		s.cache[key] = sum
		s.order = append(s.order, key)
		if len(s.order) > stateCacheSize {
			delete(s.cache, s.order[0])
			s.order = s.order[1:]
		}
	}
	return sum, nil
}

// close stops the reads under way and waits for them.
func (s *stateReader) close() {
	s.cancel()
	s.wg.Wait()
}
