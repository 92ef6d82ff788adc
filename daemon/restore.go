package daemon

import (
	"context"
	"fmt"
	"strings"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/rescale"
	"github.com/statedhq/stated/tiered"
)

// restorePlan is what an instance restores: the source in the catalog
// and what rescale.PlanInstance picked from it.
type restorePlan struct {
	src *catalog.Restore
	*rescale.Instance
}

// resolveRestore resolves p.Restore in the catalog and picks what the
// instance restores (rescale.PlanInstance: its own handle, or a rescale).
func (d *Daemon) resolveRestore(ctx context.Context, p OpenParams) (*restorePlan, error) {
	task := p.Task
	spec := p.Restore
	req := catalog.RestoreRequest{Job: task.Job, CheckpointID: spec.CheckpointID, Mode: catalog.ModeNoClaim,
		AllowFallback: spec.AllowFallback && spec.Latest}
	if spec.claim() {
		req.Mode = catalog.ModeClaim
	}
	if spec.Savepoint != "" {
		req.SavepointID = strings.TrimPrefix(strings.TrimSuffix(spec.Savepoint, "/"), catalog.SavepointsDir+"/")
	}
	r, err := d.cfg.Catalog.RestoreSource(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("daemon: restore %s: %w", task, err)
	}
	src := fmt.Sprintf("checkpoint %d of job %s", r.Manifest.CheckpointID, r.Manifest.Job)
	if len(r.Skipped) > 0 {
		// The caller allowed it, but it goes back further than the engine
		// believes its state is: say so loudly.
		d.m.RestoreFallbacks.Add(1)
		skipped := make([]string, len(r.Skipped))
		for i, s := range r.Skipped {
			skipped[i] = s.String()
		}
		d.log.Error("restore of the latest checkpoint fell back past damaged checkpoints", "task", task.String(),
			"restored", src, "skipped", strings.Join(skipped, "; "))
	}
	if req.SavepointID != "" {
		src = "savepoint " + req.SavepointID
	}
	fail := func(err error) error { return fmt.Errorf("daemon: restore %s from %s: %w", task, src, err) }
	old := rescale.OperatorHandles(r.Handles, task.Operator)
	if len(old) == 0 {
		return nil, fmt.Errorf("daemon: restore %s: %w: %s holds no state of operator %s",
			task, backend.ErrNotFound, src, task.Operator)
	}
	in, err := rescale.PlanInstance(old, task, p.MaxParallelism, p.Parallelism, p.KeyGroups)
	if err != nil {
		return nil, fail(err)
	}
	plan := &restorePlan{src: r, Instance: in}
	if req.SavepointID == "" {
		for _, h := range plan.Handles {
			if h.Backend == backend.KindHeap {
				if err := d.heapHeld(ctx, h); err != nil {
					return nil, fail(err)
				}
			}
		}
	}
	return plan, nil
}

// stillRetained is backend.Options.RestoreHeld of a claimed restore of
// checkpoint src: the catalog deletes a checkpoint's manifest before any
// of its files, so a manifest still there after the backend announced its
// hold means that the discard, if one comes, sees the hold.
func stillRetained(src *catalog.Restore) func(context.Context) error {
	m := src.Manifest
	name := catalog.CheckpointManifest(m.Job, m.CheckpointID)
	return func(ctx context.Context) error {
		_, err := src.Store.Stat(ctx, name)
		if tiered.IsNotFound(err) {
			return fmt.Errorf("%w: checkpoint %d of job %s was discarded while this instance restored from it; restore again",
				backend.ErrNotFound, m.CheckpointID, m.Job)
		}
		if err != nil {
			return fmt.Errorf("check that checkpoint %d of job %s is still retained: %w", m.CheckpointID, m.Job, err)
		}
		return nil
	}
}

// heapHeld checks that the files of heap handle h are in the heap snapshot
// store: they are unless the daemon restarted since the checkpoint (the
// catalog deletes them only once the checkpoint is no longer retained).
// Without a configured store the backend's restore reports a missing file.
func (d *Daemon) heapHeld(ctx context.Context, h *backend.Handle) error {
	if d.cfg.HeapSnapshots == nil || h.IsChangelog() {
		// A heap instance in changelog mode writes its bases and log to
		// the checkpoint store: they outlive the daemon process.
		return nil
	}
	for _, f := range h.Files {
		_, err := d.cfg.HeapSnapshots.Stat(ctx, f.Path)
		if tiered.IsNotFound(err) {
			return fmt.Errorf("%w: the heap backend keeps its snapshots in daemon memory, and this daemon process does not "+
				"hold %s of task %s (the daemon restarted since); restore from a file or lsm checkpoint or from a savepoint instead",
				ErrSnapshotGone, f.Path, h.Task)
		}
		if err != nil {
			return fmt.Errorf("heap snapshot %s of task %s: %w", f.Path, h.Task, err)
		}
	}
	return nil
}

// PlanRescale plans the restore of operator of job at newParallelism from
// retained checkpoint checkpointID of the job (0: the latest), or from
// savepoint (an id or "savepoints/<id>") when that is set: each new
// subtask's key-group range and the old handles that overlap it, the
// restore base first. It only reads the catalog (no ownership changes);
// Open with the new parallelism restores exactly what it says. The
// manifest planned from is returned too.
func (d *Daemon) PlanRescale(ctx context.Context, job, operator string, checkpointID uint64, savepoint string, newParallelism int) (*rescale.Plan, *catalog.Manifest, error) {
	if err := catalog.ValidateJob(job); err != nil {
		return nil, nil, fmt.Errorf("daemon: plan rescale: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	var m *catalog.Manifest
	var ok bool
	var err error
	var src string
	look := d.cfg.Catalog
	switch {
	case savepoint != "":
		id := strings.TrimPrefix(strings.TrimSuffix(savepoint, "/"), catalog.SavepointsDir+"/")
		m, ok, err = look.SavepointContext(ctx, id)
		src = "savepoint " + id
	case checkpointID == 0:
		m, ok, err = look.LatestContext(ctx, job)
		src = "the latest checkpoint of job " + job
	default:
		m, ok, err = look.CheckpointContext(ctx, job, checkpointID)
		src = fmt.Sprintf("checkpoint %d of job %s", checkpointID, job)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("daemon: plan rescale of %s/%s: looking up %s: %w", job, operator, src, err)
	}
	if !ok {
		return nil, nil, fmt.Errorf("daemon: plan rescale of %s/%s: %w: %s is not retained", job, operator, backend.ErrNotFound, src)
	}
	old := rescale.OperatorHandles(m.Tasks, operator)
	if len(old) == 0 {
		return nil, nil, fmt.Errorf("daemon: plan rescale of %s/%s: %w: %s holds no state of operator %s",
			job, operator, backend.ErrNotFound, src, operator)
	}
	plan, err := rescale.PlanFrom(old, newParallelism)
	if err != nil {
		return nil, nil, fmt.Errorf("daemon: plan rescale of %s/%s from %s: %w", job, operator, src, err)
	}
	return plan, m, nil
}
