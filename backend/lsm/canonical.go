package lsm

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/internal/kvstate"
	"github.com/statedhq/stated/backend/internal/snapfmt"
	"github.com/statedhq/stated/tiered"
)

// heapMissingHint explains a heap snapshot that is in no store lsm reads.
const heapMissingHint = "heap snapshots live in the daemon's memory (lsm reads them from Options.HeapSnapshots) " +
	"and do not survive a daemon restart; restore from a checkpoint of the file or lsm backend, or from a savepoint"

// CanonicalSnapshot implements backend.CanonicalSnapshotter. The
// synchronous part takes a Pebble snapshot (no flush, no checkpoint); Run
// writes one snapfmt file of every live entry under dir of store. It never
// changes the base of incremental checkpoints (FLINK-23949).
func (b *Backend) CanonicalSnapshot(ctx context.Context, checkpointID uint64, store tiered.Store, dir string) (backend.PendingSnapshot, error) {
	task := b.opts.Task
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lsm: canonical snapshot %d of %s: %w", checkpointID, task, err)
	}
	if dir != "" {
		if err := tiered.ValidateName(dir); err != nil {
			return nil, fmt.Errorf("lsm: canonical snapshot %d of %s: %w", checkpointID, task, err)
		}
	}
	if store == nil {
		return nil, fmt.Errorf("lsm: canonical snapshot %d of %s: %w: no store", checkpointID, task, backend.ErrInvalidArgument)
	}
	p := &canonicalSnapshot{b: b, id: checkpointID, store: store, path: path.Join(dir, task.Dir())}
	err := b.Exclusive(func(states []backend.StateDescriptor) error {
		p.snap = b.db.NewSnapshot()
		p.states = states
		b.ref()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("lsm: canonical snapshot %d of %s: %w", checkpointID, task, err)
	}
	p.nowMs = b.opts.Clock().UnixMilli()
	return p, nil
}

// canonicalSnapshot holds a Pebble snapshot and a reference on the store
// until Run or Release.
type canonicalSnapshot struct {
	b      *Backend
	id     uint64
	store  tiered.Store
	path   string // directory of the file
	snap   *pebble.Snapshot
	states []backend.StateDescriptor
	nowMs  int64
	used   atomic.Bool
}

func (p *canonicalSnapshot) release() {
	_ = p.snap.Close()
	_ = p.b.unref(false)
}

// Release implements backend.PendingSnapshot.
func (p *canonicalSnapshot) Release() {
	if p.used.CompareAndSwap(false, true) {
		p.release()
	}
}

// Run implements backend.PendingSnapshot.
func (p *canonicalSnapshot) Run(ctx context.Context) (*backend.Handle, error) {
	b := p.b
	o := b.opts
	if !p.used.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("lsm: canonical snapshot %d of %s: %w: snapshot already run or released", p.id, o.Task, backend.ErrInvalidArgument)
	}
	defer p.release()
	id, err := randomID()
	if err != nil {
		return nil, fmt.Errorf("lsm: canonical snapshot %d of %s: %w", p.id, o.Task, err)
	}
	keep := kvstate.SnapshotFilter(p.states, p.nowMs)
	start, end := kvstate.KeyGroupSpan(o.KeyGroups)
	scan := func(fn func(k, v []byte) error) error {
		it, err := p.snap.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: start, UpperBound: end})
		if err != nil {
			return wrapErr(err, "scan")
		}
		return scanIter(it, func(k, v []byte) (bool, error) {
			if !keep(k, v) {
				return true, nil
			}
			return true, fn(k, v)
		})
	}
	// A large file is staged on local disk before upload: next to the
	// store when it lives on the OS file system (Open clears leftovers
	// there), else in the OS temp directory.
	wo := snapfmt.WriteOptions{}
	if b.diskFS == vfs.Default {
		// On disk now: snapfmt writes there with the os package, not
		// through the instance's file system.
		wo.TempDir = b.diskFS.PathJoin(b.lo.Dir, "chk")
		if err := b.diskFS.MkdirAll(wo.TempDir, 0o755); err != nil {
			return nil, fmt.Errorf("lsm: canonical snapshot %d of %s: %w", p.id, o.Task, err)
		}
	}
	ref, err := snapfmt.Write(ctx, p.store, p.path+"/canonical-"+id, o.KeyGroups, scan, wo)
	if err != nil {
		return nil, fmt.Errorf("lsm: canonical snapshot %d of %s: %w", p.id, o.Task, err)
	}
	h, err := snapfmt.NewHandle(backend.KindFile, o.Task, p.id, o.KeyGroups, o.MaxParallelism, p.states, ref)
	if err != nil {
		return nil, fmt.Errorf("lsm: canonical %w", err)
	}
	return h, nil
}

// copyFromCanonical copies the key groups of runs from a heap or file
// handle (one snapfmt file) into b.db, checking every stored key: it must
// parse, lie in its run and belong to a state the handle registers (data
// of an unregistered state could be misread by a state registered later
// under that name with another kind). The entries come in ascending key
// order, so they are written into SSTs (one set per run, so that runs of
// other handles in between never overlap them) and ingested: inserting
// them through memtables would flush and compact the whole state again,
// which made a restore from a canonical base (changelog mode, canonical
// savepoints) several times slower than one from native files. i numbers
// the handle among the restore's canonical ones.
func (b *Backend) copyFromCanonical(ctx context.Context, h *backend.Handle, runs []backend.KeyGroupRange, i int) error {
	o := b.opts
	fail := func(err error) error {
		return fmt.Errorf("lsm: restore %s from checkpoint %d of %s: %w", o.Task, h.CheckpointID, h.Task, err)
	}
	stores := []tiered.Store{o.RestoreStore}
	hint := ""
	if h.Backend == backend.KindHeap {
		hint = heapMissingHint
		if b.lo.HeapSnapshots != nil {
			stores = []tiered.Store{b.lo.HeapSnapshots, o.RestoreStore}
		}
	}
	fs := b.lo.FS
	dir := fs.PathJoin(b.lo.Dir, "restore", fmt.Sprintf("canonical-%d", i))
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	defer func() { _ = fs.RemoveAll(dir) }()
	po := b.pebbleOptions(false)
	w := &sstWriter{fs: fs, dir: dir, opts: po.MakeWriterOptions(6, b.db.TableFormat()), target: uint64(b.lo.TargetFileSize)}
	for _, run := range runs {
		err := snapfmt.ReadHandle(ctx, stores, h, run, w.set)
		if err == nil {
			err = w.close()
		}
		if err != nil {
			w.abort()
			if errors.Is(err, backend.ErrNotFound) && hint != "" {
				return fail(fmt.Errorf("key groups %s: %w; %s", run, err, hint))
			}
			return fail(fmt.Errorf("key groups %s: %w", run, err))
		}
	}
	if len(w.paths) == 0 {
		return nil
	}
	if err := b.db.Ingest(ctx, w.paths); err != nil {
		return fail(fmt.Errorf("ingest: %w", err))
	}
	return nil
}
