package lsm

// What a restore by reference leaves to the background (docs/lsm-remote.md,
// "Restore and rescale by reference"), so that the time to its first
// served operation does not grow with the number of tables: against an S3
// server a request per table made a 4 GiB restore (589 tables) take 4 s.
//
// The check that every object exists with its handle's size (a listing;
// synchronous only with RemoteOptions.VerifyRestore, which reads all).
//
// A claim's instance markers. The instance must hold every object it
// ingests before the checkpoint restored from can go. It writes one hold
// per prefix ("<job>/shared/lsm/_hold.<creator>"), checks that the
// checkpoints it restores from are still retained
// (backend.Options.RestoreHeld), serves, and writes the per-object markers
// in the background; the holds go once every marker is written. While a
// hold is in a prefix the catalog removes no checkpoint marker and deletes
// no object there (catalog/remote.go), so the objects stay in between. The
// lease refresh rewrites pending holds, so that the sweep takes only a
// crashed instance's hold for stale.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/refcount/markers"
	"github.com/statedhq/stated/tiered"
)

// markRetryMax bounds the pause between rounds of failed marker writes.
const markRetryMax = 10 * time.Second

// holdNames are the holds of creator for the prefixes of names.
func holdNames(names []string, creator uint64) []string {
	var holds []string
	for _, n := range names {
		holds = append(holds, markers.HoldName(n[:strings.LastIndex(n, "/")+1], creator))
	}
	slices.Sort(holds)
	return slices.Compact(holds)
}

// writeHolds writes the instance's holds for the prefixes of names. They
// are recorded first, so that Close removes whatever a failure left.
func (r *remoteMode) writeHolds(ctx context.Context, names []string) error {
	b := r.b
	holds := holdNames(names, r.creator)
	r.holdMu.Lock()
	defer r.holdMu.Unlock()
	r.holds = holds
	return parallel(ctx, b.lo.UploadConcurrency, len(holds), func(ctx context.Context, i int) error {
		return tiered.PutBytes(ctx, b.opts.RestoreStore, holds[i], nil)
	})
}

// refreshHolds rewrites the pending holds (with the lease).
func (r *remoteMode) refreshHolds(ctx context.Context) error {
	b := r.b
	r.holdMu.Lock()
	defer r.holdMu.Unlock()
	var err error
	for _, h := range r.holds {
		err = errors.Join(err, tiered.PutBytes(ctx, b.opts.RestoreStore, h, nil))
	}
	return err
}

// dropHolds removes the instance's holds; those it could not remove stay
// pending (Close tries again; the sweep takes them for stale once they
// are no longer refreshed).
func (r *remoteMode) dropHolds(ctx context.Context) error {
	b := r.b
	r.holdMu.Lock()
	defer r.holdMu.Unlock()
	var left []string
	var err error
	for _, h := range r.holds {
		if derr := b.opts.RestoreStore.Delete(ctx, h); derr != nil && !tiered.IsNotFound(derr) {
			left = append(left, h)
			err = errors.Join(err, fmt.Errorf("remove hold %s: %w", h, derr))
		}
	}
	r.holds = left
	return err
}

// afterRestore runs what a restore by reference leaves to the background:
// with check, the check that every object exists with its handle's size
// (a missing or shorter table is damage: it fails every later snapshot of
// the instance, so that no new checkpoint references it, and reads that
// meet it fail naming it); with claim, the instance marker of every
// object, failed ones retried until written or the instance closes, and
// then the removal of the holds. Compactions wait until it is done, or
// restorePauseMax has passed (gate). stopBackground stops it.
func (r *remoteMode) afterRestore(names []string, sizes map[string]int64, claim, check bool, gate *compactionGate) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	r.checked = make(chan struct{})
	resume := time.AfterFunc(restorePauseMax, gate.Resume)
	r.stopBackground = func() { cancel(); <-done; resume.Stop() }
	go func() {
		defer close(done)
		defer gate.Resume()
		if check {
			r.checkInBackground(ctx, names, sizes)
		}
		close(r.checked)
		if claim {
			r.markRestored(ctx, names)
		}
	}()
}

// checkInBackground checks the restored objects, retrying failed listings
// (the store's trouble, not damage) until it can tell or ctx ends.
func (r *remoteMode) checkInBackground(ctx context.Context, names []string, sizes map[string]int64) {
	b := r.b
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, markRetryMax) {
		err := r.checkObjects(ctx, names, sizes, backgroundWorkers)
		if err == nil || ctx.Err() != nil {
			return
		}
		if errors.Is(err, backend.ErrNotFound) || errors.Is(err, backend.ErrCorrupt) {
			b.lo.Logger.Errorf("%v: the instance serves what it can, and fails its snapshots", err)
			r.damage.Store(&err)
			return
		}
		b.lo.Logger.Errorf("lsm: %s: check the restored tables (retrying in %s): %v", b.opts.Task, delay, err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// restoreDamage waits until the background check of the restored objects
// is done and returns the damage it found (nil without a restore).
func (r *remoteMode) restoreDamage(ctx context.Context) error {
	if r.checked == nil {
		return nil
	}
	select {
	case <-r.checked:
	case <-ctx.Done():
		return ctx.Err()
	}
	if p := r.damage.Load(); p != nil {
		return *p
	}
	return nil
}

// markRestored writes the instance marker of every restored object,
// retrying failed ones until they are written or ctx ends, and then
// removes the holds.
func (r *remoteMode) markRestored(ctx context.Context, names []string) {
	b := r.b
	store := b.opts.RestoreStore
	pending := names
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, markRetryMax) {
		failed := make([]bool, len(pending))
		err := parallel(ctx, backgroundWorkers, len(pending), func(ctx context.Context, i int) error {
			if err := tiered.PutBytes(ctx, store, markers.InstanceMarker(pending[i], r.creator), nil); err != nil {
				failed[i] = true
			}
			return nil // the others go on; failed ones are retried
		})
		if ctx.Err() != nil {
			return
		}
		var again []string
		for i, f := range failed {
			if f {
				again = append(again, pending[i])
			}
		}
		if err == nil && len(again) == 0 {
			break
		}
		b.lo.Logger.Errorf("lsm: %s: %d of %d markers of restored tables not written (retrying in %s; the holds keep the tables meanwhile)",
			b.opts.Task, len(again), len(pending), delay)
		pending = again
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
	if err := r.dropHolds(ctx); err != nil && ctx.Err() == nil {
		b.lo.Logger.Errorf("lsm: %s: %v (Close retries)", b.opts.Task, err)
	}
	r.marked.Store(true)
}

// backgroundWorkers is how many requests a restore's background work has
// in flight: one. The holds keep the objects while it runs, and the
// instance's first reads, which wait on the same store, must not queue
// behind hundreds of markers: against versitygw a 4 GiB restore (586
// tables) served its first get in 536 ms with 4 markers in flight at a
// time, and in 72 ms with one.
const backgroundWorkers = 1

// markConcurrency is how many empty markers go at once: more than the
// uploads of whole SSTs, as each is a small request.
func markConcurrency(upload int) int {
	return max(4*upload, 16)
}

func (r *remoteMode) restoreMarked() bool {
	return len(r.externals) == 0 || r.marked.Load()
}
