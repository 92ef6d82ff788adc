package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
)

// TriggerSavepoint writes a canonical savepoint of every open instance of
// job: a backend-neutral, self-contained directory that restores into any
// backend kind. It never changes what later incremental checkpoints reuse.
// Like Snapshot, it contains the writes applied before it was called.
func (d *Daemon) TriggerSavepoint(ctx context.Context, job string) (Savepoint, error) {
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
	base := d.lastCompleted[job]
	d.mu.Unlock()
	if len(insts) == 0 {
		return Savepoint{}, fmt.Errorf("daemon: savepoint of job %s: %w: no open instance of the job in this daemon", job, backend.ErrNotFound)
	}
	dir, err := d.cfg.Catalog.BeginSavepoint(ctx, job)
	if err != nil {
		return Savepoint{}, fmt.Errorf("daemon: savepoint of job %s: %w", job, err)
	}
	handles, err := d.canonicalSnapshots(ctx, insts, base, tiered.WithPrefix(d.cfg.Store, dir))
	if err == nil {
		var sp Savepoint
		sp, err = d.cfg.Catalog.CompleteSavepoint(ctx, job, dir, handles)
		if err == nil {
			d.log.Info("savepoint written", "job", job, "dir", sp.Dir, "tasks", len(sp.Tasks), "size", sp.Size)
			return sp, nil
		}
	}
	if aerr := d.cfg.Catalog.AbortSavepoint(context.WithoutCancel(ctx), job, dir); aerr != nil {
		err = errors.Join(err, aerr)
	}
	return Savepoint{}, fmt.Errorf("daemon: savepoint of job %s: %w", job, err)
}

// canonicalSnapshots freezes every instance first (short synchronous
// parts), then writes them concurrently.
func (d *Daemon) canonicalSnapshots(ctx context.Context, insts []*Instance, id uint64, store tiered.Store) ([]*backend.Handle, error) {
	pending := make([]backend.PendingSnapshot, len(insts))
	release := func() {
		for i, p := range pending {
			if p != nil {
				p.Release()
				insts[i].finishSnapshot()
			}
		}
	}
	for i, in := range insts {
		cs, ok := in.Backend.(backend.CanonicalSnapshotter)
		if !ok {
			release()
			return nil, fmt.Errorf("%w: the %s backend of %s cannot write canonical snapshots", ErrUnsupported, in.Kind, in.Task)
		}
		if err := in.startSnapshot(); err != nil {
			release()
			return nil, err
		}
		p, err := cs.CanonicalSnapshot(ctx, id, store, "")
		if err != nil {
			in.finishSnapshot()
			release()
			return nil, fmt.Errorf("canonical snapshot of %s: %w", in.Task, err)
		}
		pending[i] = p
	}
	handles := make([]*backend.Handle, len(insts))
	errs := make([]error, len(insts))
	var wg sync.WaitGroup
	for i := range insts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer insts[i].finishSnapshot()
			h, err := pending[i].Run(ctx)
			if err != nil {
				errs[i] = fmt.Errorf("canonical snapshot of %s: %w", insts[i].Task, err)
			}
			handles[i] = h
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return handles, nil
}
