package lsm

// Changelog bases in remote mode. A base (BaseSnapshot) is a hand-off
// like a checkpoint's, but its markers are the instance's own base
// markers ("<object>.ref.0.b_<creator>_<n>"), not a checkpoint's: a base
// is numbered in the changelog's sequence, not the job's checkpoints, and
// the catalog knows nothing of it. Ownership then moves in three steps:
//
//   - BaseSnapshot n writes base markers, which hold n's objects against
//     the instance's own compactions;
//   - every checkpoint that references base n writes its own checkpoint
//     markers on them in its synchronous part (HoldBase), so they are
//     held exactly as a checkpoint's hand-off holds its tables: by the
//     checkpoint until the catalog releases it;
//   - when the changelog confirms base m (NotifyCheckpointComplete), the
//     base markers of every base before m go (the unref rule: an object no
//     marker holds any more is deleted): no new checkpoint references
//     those bases, and those that did hold their objects themselves. A
//     base the changelog will never use (a newer one replaced it before
//     any checkpoint took it) goes when the changelog says so
//     (NotifyCheckpointAborted), so that materializations without
//     checkpoints do not pile up.
//
// Close removes the base markers of the bases still held; after a crash
// the sweep takes them for dead with the instance's lease.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/refcount/markers"
	"github.com/statedhq/stated/tiered"
)

// holdBase writes checkpointID's own markers on the objects of base id
// (HoldBase).
func (r *remoteMode) holdBase(ctx context.Context, id, checkpointID uint64) error {
	b := r.b
	task := b.opts.Task
	r.mu.Lock()
	objs, ok := r.bases[id]
	r.mu.Unlock()
	if !ok {
		return fmt.Errorf("lsm: checkpoint %d of %s: %w: base %d is not held by this instance", checkpointID, task, backend.ErrDeclined, id)
	}
	attempt, err := randomID()
	if err != nil {
		return err
	}
	attempt = attempt[:16]
	store := b.lo.Remote.Store
	err = parallel(ctx, markConcurrency(b.lo.UploadConcurrency), len(objs), func(ctx context.Context, i int) error {
		return tiered.PutBytes(ctx, store, markers.CheckpointMarker(objs[i], task.Job, checkpointID, attempt), nil)
	})
	if err != nil {
		// Markers written stay for the catalog's abort or sweep, as those
		// of a failed hand-off's snapshot would.
		return fmt.Errorf("lsm: checkpoint %d of %s: hold the objects of base %d: %w", checkpointID, task, id, err)
	}
	return nil
}

// releaseBasesBefore lets go, in the background, of the bases numbered
// below n: base n is confirmed, so no new checkpoint references them.
func (r *remoteMode) releaseBasesBefore(n uint64) {
	r.releaseBasesIf(func(id uint64) bool { return id < n })
}

// checkpointComplete: in changelog mode the id is a base's.
func (r *remoteMode) checkpointComplete(checkpointID uint64) { r.releaseBasesBefore(checkpointID) }

// checkpointAborted: in changelog mode the id is a base's that no
// checkpoint will use; a hand-off checkpoint's markers are the catalog's
// to remove.
func (r *remoteMode) checkpointAborted(checkpointID uint64) {
	r.releaseBasesIf(func(id uint64) bool { return id == checkpointID })
}

// releaseBasesIf lets go, in the background, of the bases drop selects.
func (r *remoteMode) releaseBasesIf(drop func(id uint64) bool) {
	b := r.b
	r.mu.Lock()
	if r.basesClosed {
		r.mu.Unlock()
		return
	}
	var old []uint64
	for id := range r.bases {
		if drop(id) {
			old = append(old, id)
		}
	}
	rel := map[uint64][]string{}
	for _, id := range old {
		rel[id] = r.bases[id]
		delete(r.bases, id)
	}
	if len(rel) > 0 {
		r.releasing.Add(1)
	}
	r.mu.Unlock()
	if len(rel) == 0 {
		return
	}
	go func() {
		defer r.releasing.Done()
		if err := r.releaseBases(context.Background(), rel); err != nil {
			// The markers left behind hold their objects until Close (or
			// the sweep, after a crash).
			b.lo.Logger.Errorf("lsm: %s: release former changelog bases: %v", b.opts.Task, err)
			r.mu.Lock()
			for id, objs := range rel {
				r.bases[id] = objs
			}
			r.mu.Unlock()
		}
	}()
}

// releaseAllBases waits for background releases, then lets go of every
// base still held (Close).
func (r *remoteMode) releaseAllBases(ctx context.Context) error {
	b := r.b
	r.mu.Lock()
	r.basesClosed = true
	r.mu.Unlock()
	r.releasing.Wait()
	r.mu.Lock()
	rel := r.bases
	r.bases = map[uint64][]string{}
	r.mu.Unlock()
	if err := r.releaseBases(ctx, rel); err != nil {
		return fmt.Errorf("lsm: close %s: release changelog bases: %w", b.opts.Task, err)
	}
	return nil
}

// releaseBases removes the base markers of bases, deleting each object no
// marker holds any more.
func (r *remoteMode) releaseBases(ctx context.Context, bases map[uint64][]string) error {
	b := r.b
	store := b.lo.Remote.Store
	var errs []error
	for _, id := range slices.Sorted(maps.Keys(bases)) {
		for _, obj := range bases[id] {
			if _, err := markers.UnrefNamed(ctx, store, obj, markers.BaseMarker(obj, r.creator, id)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func (r *remoteMode) heldBases() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.bases))
}
