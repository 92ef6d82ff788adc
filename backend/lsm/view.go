package lsm

import (
	"bytes"
	"context"
	"fmt"
	"sort"

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
// variable for tests).
var loadChunkBytes = 32 << 20

// Load implements backend.Loader. Entries are buffered (up to
// 32 MiB), sorted, written into SSTs and ingested, which bypasses
// the memtable and the compactions a stream of puts costs: entries that
// arrive in key order end up in files that overlap nothing and go straight
// to the bottom level. In remote mode (SSTs created in the checkpoint
// store) each Add is written as a batch instead.
func (b *Backend) Load() (backend.LoadSession, error) {
	if b.remote != nil {
		return b.State.GroupLoad(&b.load), nil
	}
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

type sstLoad struct {
	b      *Backend
	kvs    []kvstate.KV
	bytes  int
	chunks int
	done   bool
}

func (l *sstLoad) Add(entries []backend.LoadEntry) error {
	if l.done {
		return fmt.Errorf("lsm: load into %s: %w: used after it ended", l.b.opts.Task, backend.ErrInvalidArgument)
	}
	n := len(l.kvs)
	var err error
	l.kvs, err = l.b.State.EncodeLoad(l.kvs, entries)
	if err != nil {
		return err
	}
	for _, kv := range l.kvs[n:] {
		l.bytes += len(kv.K) + len(kv.V)
	}
	if l.bytes >= loadChunkBytes {
		return l.flush()
	}
	return nil
}

// flush sorts the buffered entries (the last of equal keys wins, as the
// later put would), writes them into SSTs and ingests them.
func (l *sstLoad) flush() error {
	if len(l.kvs) == 0 {
		return nil
	}
	b := l.b
	kvs := l.kvs
	sort.SliceStable(kvs, func(i, j int) bool { return bytes.Compare(kvs[i].K, kvs[j].K) < 0 })
	fs := b.lo.FS
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
	for i, kv := range kvs {
		if i+1 < len(kvs) && bytes.Equal(kv.K, kvs[i+1].K) {
			continue
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
	l.kvs, l.bytes = l.kvs[:0], 0
	if err := b.db.Ingest(context.Background(), w.paths); err != nil {
		return fail(wrapErr(err, "ingest %d files", len(w.paths)))
	}
	return nil
}

func (l *sstLoad) Commit() error {
	if l.done {
		return fmt.Errorf("lsm: load into %s: %w: committed after it ended", l.b.opts.Task, backend.ErrInvalidArgument)
	}
	err := l.flush()
	l.Close()
	return err
}

func (l *sstLoad) Close() {
	if l.done {
		return
	}
	l.done = true
	l.kvs = nil
	_ = l.b.unref(false)
	l.b.load.Unlock()
}
