package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/tiered"
)

// TriggerSavepoint writes a savepoint of every open instance of job into
// "savepoints/<id>/" under the checkpoint root: self-contained and
// relocatable, never owned by a job, and never changing what later
// incremental checkpoints reuse. Like Snapshot, it contains the writes
// applied before it was called.
//
// Canonical (native false) is backend-neutral and restores into any backend
// kind; checkpointID (optional) is recorded in it. Native copies the
// backends' own files of a snapshot taken for it with checkpointID, which
// must be an id the job has not used; that id is then released, never
// completed.
func (d *Daemon) TriggerSavepoint(ctx context.Context, job string, native bool, checkpointID uint64) (Savepoint, error) {
	if d.cfg.SharedCatalog {
		return d.clusterSavepoint(ctx, job, native, checkpointID)
	}
	d.mu.Lock()
	if d.closing {
		d.mu.Unlock()
		return Savepoint{}, fmt.Errorf("daemon: savepoint of job %s: %w", job, ErrShuttingDown)
	}
	var insts []*Instance
	for t, in := range d.byTask {
		if t.Job == job {
			insts = append(insts, in)
		}
	}
	if checkpointID == 0 && !native {
		checkpointID = d.lastCompleted[job]
	}
	d.mu.Unlock()
	if len(insts) == 0 {
		return Savepoint{}, fmt.Errorf("daemon: savepoint of job %s: %w: no open instance of the job in this daemon", job, backend.ErrNotFound)
	}
	// Keep working directories alive while the snapshots read them.
	var started []*Instance
	defer func() {
		for _, in := range started {
			in.finishSnapshot()
		}
	}()
	for _, in := range insts {
		if err := in.startSnapshot(); err != nil {
			return Savepoint{}, err
		}
		started = append(started, in)
	}
	var m *catalog.Manifest
	var err error
	if native {
		m, err = d.nativeSavepoint(ctx, job, checkpointID, insts)
	} else {
		backends := make([]backend.Backend, len(insts))
		for i, in := range insts {
			backends[i] = canonicalWithOperatorState{Backend: in.Backend, in: in, ops: in.OperatorState()}
		}
		m, err = d.cfg.Catalog.TriggerSavepoint(ctx, catalog.SavepointRequest{
			Job: job, CheckpointID: checkpointID, Format: catalog.FormatCanonical, Backends: backends})
	}
	if err != nil {
		return Savepoint{}, d.corruption(CorruptionEvent{Site: CorruptionSavepoint, Job: job,
			Err: fmt.Errorf("daemon: savepoint of job %s: %w", job, err)})
	}
	sp := Savepoint{Dir: catalog.SavepointDir(m.SavepointID), Tasks: len(m.Tasks), Size: m.FullSize}
	d.log.Info("savepoint written", "job", job, "dir", sp.Dir, "format", string(m.Format), "tasks", sp.Tasks, "size", sp.Size)
	return sp, nil
}

// clusterSavepoint is TriggerSavepoint with a shared catalog. The tasks of
// this daemon may be a part of the job's, so a savepoint of them alone
// would look whole and restore with the rest missing; a cluster's
// savepoint is instead a native copy of a completed checkpoint, which
// holds every task of the job whichever node reported it: checkpointID
// names a retained checkpoint (0: the latest). The engine completes a
// checkpoint of the job first to capture its current state. Canonical
// savepoints need every task's live backend and are refused.
func (d *Daemon) clusterSavepoint(ctx context.Context, job string, native bool, checkpointID uint64) (Savepoint, error) {
	if !native {
		return Savepoint{}, fmt.Errorf("daemon: savepoint of job %s: %w: in cluster mode a job's tasks live on several daemons; take a native savepoint, which copies a completed checkpoint",
			job, ErrUnsupported)
	}
	m, err := d.cfg.Catalog.SavepointOfCheckpoint(ctx, job, checkpointID)
	if err != nil {
		return Savepoint{}, d.corruption(CorruptionEvent{Site: CorruptionSavepoint, Job: job,
			Err: fmt.Errorf("daemon: savepoint of job %s from checkpoint %d: %w", job, checkpointID, err)})
	}
	sp := Savepoint{Dir: catalog.SavepointDir(m.SavepointID), Tasks: len(m.Tasks), Size: m.FullSize}
	d.log.Info("savepoint written", "job", job, "dir", sp.Dir, "format", string(m.Format), "checkpoint", m.CheckpointID, "tasks", sp.Tasks, "size", sp.Size)
	return sp, nil
}

// nativeSavepoint snapshots every instance with id (a checkpoint that is
// begun, then released) and has the catalog copy the files.
func (d *Daemon) nativeSavepoint(ctx context.Context, job string, id uint64, insts []*Instance) (*catalog.Manifest, error) {
	if id == 0 {
		return nil, fmt.Errorf("%w: a native savepoint needs a checkpoint id the job has not used", backend.ErrInvalidArgument)
	}
	heap := 0
	for _, in := range insts {
		// A heap instance in changelog mode keeps its files in the
		// checkpoint store.
		if in.Kind == backend.KindHeap && !in.Changelog() {
			heap++
		}
	}
	var source tiered.Store
	switch {
	case heap == 0:
		source = d.cfg.Store
	case heap == len(insts) && d.cfg.HeapSnapshots != nil:
		source = d.cfg.HeapSnapshots
	default:
		return nil, fmt.Errorf("%w: a native savepoint of a job with both heap and other instances (use the canonical format)", ErrUnsupported)
	}
	key := ckptKey{job, id}
	d.mu.Lock()
	if d.ckpts[key] != nil || id <= d.lastCompleted[job] {
		d.mu.Unlock()
		return nil, fmt.Errorf("%w: checkpoint id %d of job %s is in use; a native savepoint needs a fresh one", backend.ErrInvalidArgument, id, job)
	}
	// A tombstone: a checkpoint with this id can never be taken.
	c := d.newCheckpointLocked(key)
	c.status, c.reason = FailureAborted.String(), "used by a native savepoint"
	c.timer.Stop()
	err := d.cfg.Catalog.BeginCheckpoint(job, id)
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	defer func() {
		_ = d.cfg.Catalog.Release(context.WithoutCancel(ctx), job, id)
		for _, in := range insts {
			in.Backend.NotifyCheckpointAborted(id)
		}
	}()
	pending := make([]backend.PendingSnapshot, 0, len(insts))
	for _, in := range insts {
		ops := in.OperatorState()
		var p backend.PendingSnapshot
		err := in.snapshotLocked(func() (err error) {
			if cb := in.changelogBackend(); cb != nil {
				// Self-contained (the log window copied out) and no
				// materialization taken from the checkpoints.
				p, err = cb.SavepointSnapshot(ctx, id)
				return err
			}
			p, err = in.Backend.Snapshot(ctx, id)
			return err
		})
		if err != nil {
			for _, p := range pending {
				p.Release()
			}
			return nil, fmt.Errorf("snapshot of %s: %w", in.Task, err)
		}
		pending = append(pending, pendingWithOperatorState{PendingSnapshot: p, ops: ops})
	}
	handles := make([]*backend.Handle, len(pending))
	errs := make([]error, len(pending))
	var wg sync.WaitGroup
	for i := range pending {
		wg.Add(1)
		go func() {
			defer wg.Done()
			handles[i], errs[i] = pending[i].Run(ctx)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return d.cfg.Catalog.TriggerSavepoint(ctx, catalog.SavepointRequest{
		Job: job, CheckpointID: id, Format: catalog.FormatNative, Handles: handles, Source: source})
}
