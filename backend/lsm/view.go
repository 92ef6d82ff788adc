package lsm

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/internal/kvstate"
)

var (
	_ backend.Viewer     = (*Backend)(nil)
	_ backend.KeyScanner = (*Backend)(nil)
	_ backend.Loader     = (*Backend)(nil)
)

// View implements backend.Viewer with a Pebble snapshot (no flush, no
// file written), which holds a reference on the store as a canonical
// snapshot does, so the view stays readable after Close until released.
func (b *Backend) View() (backend.View, error) {
	v, err := b.State.FreezeView(func() (kvstate.Scanner, func(), error) {
		snap := b.db.NewSnapshot()
		b.ref()
		return snapScanner{snap}, func() {
			_ = snap.Close()
			_ = b.unref(false)
		}, nil
	})
	if err != nil {
		return nil, fmt.Errorf("lsm: view of %s: %w", b.opts.Task, err)
	}
	return v, nil
}

type snapScanner struct{ s *pebble.Snapshot }

func (s snapScanner) Scan(start, end []byte, fn func(k, v []byte) (bool, error)) error {
	it, err := s.s.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end})
	if err != nil {
		return wrapErr(err, "view scan [%x, %x)", start, end)
	}
	return scanIter(it, fn)
}

// loadChunkBytes is how many bytes of encoded entries a bulk load buffers
// before it sorts them, writes them into SSTs and ingests those (a
// variable for tests). A session holds at most two chunks: one being
// filled, one being written.
var loadChunkBytes = 16 << 20

// Load implements backend.Loader. Entries are buffered in chunks (up to
// 16 MiB), sorted, written into SSTs and ingested, which bypasses the
// memtable and the compactions a stream of puts costs: entries that
// arrive in key order end up in files that overlap nothing and go straight
// to the bottom level. A chunk is written by the session's own goroutine
// while the next one fills, in order (a later entry for a key wins). In
// remote mode (SSTs created in the checkpoint store) each Add is written
// as a batch instead.
func (b *Backend) Load() (backend.LoadSession, error) {
	return b.mode.load()
}

// sstLoad starts a bulk load of SSTs (local mode).
func (b *Backend) sstLoad() (backend.LoadSession, error) {
	b.load.Lock()
	err := b.State.Exclusive(func([]backend.StateDescriptor) error {
		b.ref() // Pebble stays open until the session ends
		return nil
	})
	if err != nil {
		b.load.Unlock()
		return nil, fmt.Errorf("lsm: load into %s: %w", b.opts.Task, err)
	}
	return &sstLoad{b: b}, nil
}

// loadChunk is a run of encoded entries to write and ingest.
type loadChunk struct {
	kvs []kvstate.KV
	// unsorted: the keys are not strictly ascending (entries of a
	// snapshot in stored-key order need no sort).
	unsorted bool
}

type sstLoad struct {
	b      *Backend
	cur    loadChunk
	bytes  int
	chunks int // chunks written, to name their directories
	done   bool

	// The writer goroutine, started with the first full chunk, writes the
	// chunks sent on work in order; it closes idle when work is closed
	// and it has finished. err is its first error (read after idle, or
	// through failed), after which it skips the chunks still sent.
	work   chan loadChunk
	idle   chan struct{}
	mu     sync.Mutex
	err    error
	closed bool // work is closed
}

func (l *sstLoad) failed() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *sstLoad) Add(entries []backend.LoadEntry) error {
	if l.done {
		return fmt.Errorf("lsm: load into %s: %w: used after it ended", l.b.opts.Task, backend.ErrInvalidArgument)
	}
	if err := l.failed(); err != nil {
		return err
	}
	n := len(l.cur.kvs)
	var err error
	l.cur.kvs, err = l.b.State.EncodeLoad(l.cur.kvs, entries)
	if err != nil {
		return err
	}
	for i, kv := range l.cur.kvs[n:] {
		l.bytes += len(kv.K) + len(kv.V)
		if n+i > 0 && !l.cur.unsorted && bytes.Compare(l.cur.kvs[n+i-1].K, kv.K) >= 0 {
			l.cur.unsorted = true
		}
	}
	if l.bytes >= loadChunkBytes {
		l.handOff()
		return l.failed()
	}
	return nil
}

// handOff sends the current chunk to the writer (starting it), waiting
// while it writes the previous one.
func (l *sstLoad) handOff() {
	if len(l.cur.kvs) == 0 {
		return
	}
	if l.work == nil {
		l.work, l.idle = make(chan loadChunk), make(chan struct{})
		go l.writer()
	}
	l.work <- l.cur
	// The writer owns the sent entries (their arenas are never reused).
	l.cur, l.bytes = loadChunk{}, 0
}

func (l *sstLoad) writer() {
	defer close(l.idle)
	for c := range l.work {
		if l.failed() != nil {
			continue
		}
		if err := l.flush(c); err != nil {
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
		}
	}
}

// stop ends the writer once it has written what it was sent.
func (l *sstLoad) stop() {
	if l.work != nil && !l.closed {
		l.closed = true
		close(l.work)
		<-l.idle
	}
}

// flush sorts a chunk (the last of equal keys wins, as the later put
// would), writes it into SSTs and ingests them.
func (l *sstLoad) flush(c loadChunk) error {
	b := l.b
	kvs := c.kvs
	// order is the write order: ascending keys, and for equal keys the
	// later entry last (an unstable sort on (key, position): stable sorts
	// took several times as long).
	var order []int32
	if c.unsorted {
		order = make([]int32, len(kvs))
		for i := range order {
			order[i] = int32(i)
		}
		slices.SortFunc(order, func(a, b int32) int {
			if c := bytes.Compare(kvs[a].K, kvs[b].K); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
	}
	at := func(i int) kvstate.KV {
		if order == nil {
			return kvs[i]
		}
		return kvs[order[i]]
	}
	// The files need no sync: Pebble runs without one (noSyncFS), and the
	// local store is never reused after a crash.
	fs := noSyncFS{b.lo.FS}
	dir := fs.PathJoin(b.lo.Dir, "restore", fmt.Sprintf("load-%d", l.chunks))
	l.chunks++
	fail := func(err error) error {
		return fmt.Errorf("lsm: load into %s: %w", b.opts.Task, err)
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	defer func() { _ = fs.RemoveAll(dir) }()
	po := b.pebbleOptions(false)
	w := &sstWriter{fs: fs, dir: dir, opts: po.MakeWriterOptions(6, b.db.TableFormat()), target: uint64(b.lo.TargetFileSize)}
	for i := range kvs {
		kv := at(i)
		if i+1 < len(kvs) && bytes.Equal(kv.K, at(i+1).K) {
			continue // a later entry for the same key follows
		}
		if err := w.set(kv.K, kv.V); err != nil {
			w.abort()
			return fail(err)
		}
	}
	if err := w.close(); err != nil {
		w.abort()
		return fail(err)
	}
	if err := b.db.Ingest(context.Background(), w.paths); err != nil {
		return fail(wrapErr(err, "ingest %d files", len(w.paths)))
	}
	return nil
}

func (l *sstLoad) Commit() error {
	if l.done {
		return fmt.Errorf("lsm: load into %s: %w: committed after it ended", l.b.opts.Task, backend.ErrInvalidArgument)
	}
	var err error
	if err = l.failed(); err == nil {
		l.handOff()
	}
	l.stop()
	if err == nil {
		err = l.failed()
	}
	l.Close()
	return err
}

// Close implements backend.LoadSession; it waits for the chunk being
// written (Pebble must stay open under it).
func (l *sstLoad) Close() {
	if l.done {
		return
	}
	l.done = true
	l.stop()
	l.cur = loadChunk{}
	_ = l.b.unref(false)
	l.b.load.Unlock()
}
