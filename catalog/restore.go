package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
)

// Mode is how a job restores from a checkpoint.
type Mode string

// Restore modes. Frozen strings (CLI and API use them).
const (
	// ModeClaim: the restoring job takes ownership of the checkpoint and its
	// files; they are discarded by its retention like its own.
	ModeClaim Mode = "claim"
	// ModeNoClaim: the restoring job never modifies or deletes the
	// checkpoint; its backends open with NoClaim, so the first new
	// checkpoint is full and shares no file with it.
	ModeNoClaim Mode = "no-claim"
)

// ParseMode checks s names a restore mode.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeClaim, ModeNoClaim:
		return m, nil
	}
	return "", fmt.Errorf("%w: restore mode %q (want claim or no-claim)", ErrInvalidArgument, s)
}

// RestoreRequest names what a job restores from.
type RestoreRequest struct {
	// Job is the job that restores. Required.
	Job string
	// FromJob is the job whose checkpoint it restores. Default Job.
	FromJob string
	// CheckpointID is the checkpoint to restore; 0 means the newest one
	// FromJob owns.
	CheckpointID uint64
	// SavepointID, if set, restores from that savepoint instead; savepoints
	// are never owned by a job, so Mode does not apply.
	SavepointID string
	// Mode is claim or no-claim. Default ModeNoClaim (the safe one, as in
	// Flink).
	Mode Mode
	// AllowFallback lets a restore of the newest checkpoint (CheckpointID
	// 0) fall back to the newest intact one when newer ones are damaged
	// (Restore.Skipped lists them). Without it such a restore fails with
	// an error wrapping ErrCorrupt that names the damaged checkpoint and
	// the newest intact one: an engine with exactly-once sinks must not
	// silently go back further than it believes.
	AllowFallback bool
}

// Restore is everything a backend needs to restore: pass Handles (the ones
// of the task, or all of them to let the backend pick by key group),
// Store as backend.Options.RestoreStore and NoClaim as
// backend.Options.NoClaim.
type Restore struct {
	Manifest *Manifest
	Handles  []*backend.Handle
	Store    tiered.Store
	NoClaim  bool
	// Skipped are the damaged checkpoints, newer than the one restored,
	// that a restore of the latest checkpoint with AllowFallback skipped
	// (oldest first).
	Skipped []DamagedCheckpoint
}

// HandlesFor returns the handles of operator whose key groups overlap kg:
// the ones a subtask with range kg restores from (after a rescale, several).
func (r *Restore) HandlesFor(operator string, kg backend.KeyGroupRange) []*backend.Handle {
	var out []*backend.Handle
	for _, h := range r.Handles {
		if h.Task.Operator == operator && !h.KeyGroups.Intersect(kg).Empty() {
			out = append(out, h)
		}
	}
	return out
}

// RestoreSource resolves req and records what the restore changes:
//   - claim of a checkpoint of another job: the restoring job adopts it
//     (it is subsumed by the restoring job's retention from now on, and the
//     old job no longer deletes it);
//   - claim of a checkpoint the job owns: it becomes ordinary (unpinned);
//   - no-claim of a checkpoint the job owns: it is pinned, so the job's
//     retention never deletes it;
//   - no-claim in general: until the next restore, Complete refuses any
//     checkpoint of the job that references one of its files.
//
// The ownership change is written to the job file before RestoreSource
// returns, so it survives a crash.
func (c *Catalog) RestoreSource(ctx context.Context, req RestoreRequest) (*Restore, error) {
	if err := ValidateJob(req.Job); err != nil {
		return nil, err
	}
	if req.SavepointID != "" {
		return c.restoreSavepoint(ctx, req)
	}
	if req.FromJob == "" {
		req.FromJob = req.Job
	}
	if req.Mode == "" {
		req.Mode = ModeNoClaim
	}
	if _, err := ParseMode(string(req.Mode)); err != nil {
		return nil, err
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	pick, err := c.exec(command{Op: opRestore, Job: req.Job, FromJob: req.FromJob, ID: req.CheckpointID,
		Mode: req.Mode, AllowFallback: req.AllowFallback, Now: c.opts.Clock()})
	if err != nil {
		return nil, err
	}
	e := pick.entry
	m := pick.restored

	for i, job := range pick.save {
		if err := c.saveJob(ctx, job); err != nil {
			if i == 0 {
				if _, uerr := c.exec(pick.undo); uerr != nil {
					err = errors.Join(err, uerr)
				}
				return nil, fmt.Errorf("catalog: restore %s: record the ownership change: %w", e.ref, err)
			}
			c.log.Warn("restore: save the job file failed; the adoption stands", "checkpoint", e.ref.String(), "job", req.Job, "err", err)
		}
	}

	restored := command{Op: opRestored, Job: req.Job, FromJob: e.ref.job, ID: e.ref.id, Mode: req.Mode}
	if req.Mode == ModeNoClaim {
		restored.Handles = m.Tasks
	}
	out, err := c.exec(restored)
	if err != nil {
		return nil, fmt.Errorf("catalog: restore %s: %w", e.ref, err)
	}
	c.deleteReleased(ctx, out.release)
	return &Restore{Manifest: m, Handles: m.Tasks, Store: c.store, NoClaim: req.Mode == ModeNoClaim, Skipped: pick.skipped}, nil
}

// latestDamagedErr is the error of a restore of job's latest checkpoint
// when damaged ones are newer than intact (nil: none retained).
func latestDamagedErr(job string, damaged []DamagedCheckpoint, intact *entry) error {
	newest := damaged[len(damaged)-1]
	fallback := "no intact checkpoint is retained"
	if intact != nil {
		fallback = fmt.Sprintf("the newest intact checkpoint is %s (restore it by id, or allow the fallback)", intact.ref)
	}
	return fmt.Errorf("catalog: the latest checkpoint of job %s, %s, cannot be restored: its manifest %s is damaged; %s: %w",
		job, CheckpointDir(newest.Job, newest.ID), newest.Manifest, fallback, newest.Err)
}

func (c *Catalog) restoreSavepoint(ctx context.Context, req RestoreRequest) (*Restore, error) {
	id := req.SavepointID
	if err := ValidateSavepointID(id); err != nil {
		return nil, err
	}
	if _, ok := c.Savepoint(id); ok {
		// Known, but another process may have deleted it since ("stated
		// savepoint delete"): a clear error now, not a missing file in
		// the middle of the restore.
		if c.savepointGone(ctx, id) {
			c.dropSavepoint(id)
			return nil, fmt.Errorf("catalog: restore from savepoint: %w", errSavepointGone(id))
		}
	} else if _, err := c.adoptSavepoint(ctx, id); err != nil {
		// Not written by another process since the catalog opened
		// either (then it is adopted), or damaged.
		return nil, fmt.Errorf("catalog: restore from savepoint: %w", err)
	}
	out, err := c.exec(command{Op: opRestoredSavepoint, Job: req.Job, Savepoint: req.SavepointID})
	if err != nil {
		return nil, err
	}
	m := out.restored
	c.deleteReleased(ctx, out.release)
	return &Restore{Manifest: m, Handles: m.Tasks, Store: tiered.WithPrefix(c.store, SavepointDir(req.SavepointID)), NoClaim: true}, nil
}

// LoadSavepoint reads a savepoint from store, a store rooted at the
// savepoint's directory wherever it was moved to. The result restores like
// any other (savepoints are always restored without claim).
func LoadSavepoint(ctx context.Context, store tiered.Store) (*Restore, error) {
	data, err := tiered.ReadAll(ctx, store, ManifestName, maxMetaSize)
	if tiered.IsNotFound(err) {
		return nil, fmt.Errorf("%w: no savepoint manifest (%s) in the given directory: %v", ErrNotFound, ManifestName, err)
	}
	if err != nil {
		return nil, fmt.Errorf("catalog: read savepoint manifest: %w", err)
	}
	m, err := DecodeManifest(data)
	if err != nil {
		return nil, err
	}
	if m.Kind != KindSavepoint {
		return nil, fmt.Errorf("%w: the manifest describes a %s, not a savepoint", ErrInvalidArgument, m.Kind)
	}
	return &Restore{Manifest: m, Handles: m.Tasks, Store: store, NoClaim: true}, nil
}
