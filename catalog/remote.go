package catalog

// Objects of lsm remote mode ("<job>/shared/lsm/": SSTs Pebble created in
// the store, their ref markers, instances' leases; see
// refcount/markers and docs/lsm-remote.md). The catalog
// never deletes such an SST outright: a live instance's Pebble may still
// hold it. It removes the markers of checkpoints that are neither retained
// nor in flight, and deletes the SST only when no marker of anyone is left
// (Pebble's own rule), so Pebble and the registry never disagree. The
// sweep also removes, after the grace period, the markers of instances
// whose lease went stale (crashed), and then the SSTs nothing holds.
//
// A restoring instance holds a whole prefix with a hold
// ("<job>/shared/lsm/_hold.<creator>") until its per-object markers are
// written: while one is there, neither the release nor the sweep removes a
// marker or deletes an SST in that prefix. Both list the holds after they
// decided from the catalog's state, and the instance checks that the
// checkpoint it restores is still retained after writing its hold, so one
// of the two always sees the other.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/statedhq/stated/refcount/markers"
	"github.com/statedhq/stated/tiered"
)

// lsmDir is the directory of remote-mode lsm objects inside a job's
// directory (markers.Dir, under sharedDir: TestLSMDirUnderShared).
const lsmDir = markers.Dir

// minLeaseWindow is the least age at which the sweep takes an instance's
// lease for stale, whatever its grace period: a "stated gc" may run with
// a shorter grace than the daemon's. The daemon refreshes leases every
// quarter of its grace period, at least every minute.
const minLeaseWindow = 5 * time.Minute

// isRemoteLSM reports whether name is under a job's lsm remote directory.
func isRemoteLSM(name string) bool {
	n := classify(name)
	return n.kind == objShared && strings.HasPrefix(name, n.job+"/"+lsmDir)
}

// checkpointHeld reports whether checkpoint id of job is retained or
// in flight: its markers hold their objects.
func (m *machine) checkpointHeld(job string, id uint64) bool {
	if _, ok := m.entries[ref{job, id}]; ok {
		return true
	}
	j := m.jobs[job]
	return j != nil && j.inflight[id] != nil
}

// releaseRemote lets go of remote SSTs no retained checkpoint references
// any more: it removes the markers of checkpoints neither retained nor in
// flight, then deletes each SST no marker holds. An SST the registry or a
// pending handle still references is left alone.
func (c *Catalog) releaseRemote(ctx context.Context, names []string) error {
	var errs []error
	held := map[string]bool{} // lsm prefix -> a hold is there
	for _, n := range names {
		c.mu.Lock()
		live := c.mu.referenced(n, c.opts.LogHeld)
		c.mu.Unlock()
		if live {
			continue
		}
		dir := n[:strings.LastIndex(n, "/")+1]
		h, seen := held[dir]
		if !seen {
			holds, err := markers.Holds(ctx, c.store, dir)
			if err != nil {
				errs = append(errs, fmt.Errorf("catalog: release %s: %w", n, err))
				continue
			}
			h = len(holds) > 0
			held[dir] = h
		}
		if h {
			// A restoring instance may not have marked it yet: the
			// sweep releases it later.
			continue
		}
		if err := c.opts.DeleteGuard(ctx); err != nil {
			// A node that does not lead must not delete.
			return fmt.Errorf("catalog: release %s: %w", n, err)
		}
		_, err := markers.Unref(ctx, c.store, n, func(m markers.Marker) bool {
			if m.Kind != markers.MarkerCheckpoint {
				return false
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			return !c.mu.checkpointHeld(m.Job, m.Checkpoint)
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("catalog: release %s: %w", n, err))
		}
	}
	return errors.Join(errs...)
}

// liveHolds lists the holds of the prefixes of objects and returns the
// prefixes with a hold newer than cutoff.
func (c *Catalog) liveHolds(ctx context.Context, objects []tiered.ObjectInfo, cutoff time.Time) (map[string]bool, error) {
	held := map[string]bool{}
	seen := map[string]bool{}
	for _, o := range objects {
		dir := o.Name[:strings.LastIndex(o.Name, "/")+1]
		if seen[dir] {
			continue
		}
		seen[dir] = true
		holds, err := markers.Holds(ctx, c.store, dir)
		if err != nil {
			return nil, err
		}
		for _, h := range holds {
			if h.ModTime.After(cutoff) {
				held[dir] = true
			}
		}
	}
	return held, nil
}

// splitRemote separates remote-mode lsm SSTs from the other names; their
// markers and leases are the sweep's alone (dropped here).
func splitRemote(names []string) (ssts, rest []string) {
	for _, n := range names {
		switch {
		case !isRemoteLSM(n):
			rest = append(rest, n)
		case markers.IsObject(n):
			ssts = append(ssts, n)
		}
	}
	return ssts, rest
}

// sweepRemote is the sweep of the remote-mode lsm objects of a listing.
// After the grace period it removes: markers of checkpoints neither
// retained nor in flight; Pebble, instance and base markers of creators whose
// lease is missing or stale (a crashed instance); stale leases; and SSTs
// that nothing references and no marker holds. Names it cannot read stay.
func (c *Catalog) sweepRemote(ctx context.Context, rep *GCReport, objects []tiered.ObjectInfo, dryRun bool) error {
	now := c.opts.Clock()
	cutoff := now.Add(-c.opts.GCGrace)
	// A lease is stale past the grace period, but never sooner than
	// minLeaseWindow: with a short grace (a "stated gc --gc-grace 1s") a
	// live instance's lease must not look stale between refreshes.
	leaseCutoff := now.Add(-max(c.opts.GCGrace, minLeaseWindow))
	live := map[uint64]bool{}
	for _, o := range objects {
		if cr, ok := markers.ParseLease(o.Name); ok && o.ModTime.After(leaseCutoff) {
			live[cr] = true
		}
	}
	held := map[string]int{} // SST -> markers that stay
	var deadMarkers []tiered.ObjectInfo
	var ssts, staleLeases []tiered.ObjectInfo
	c.mu.Lock()
	for _, o := range objects {
		if markers.IsObject(o.Name) {
			ssts = append(ssts, o)
			continue
		}
		if cr, ok := markers.ParseLease(o.Name); ok {
			if !live[cr] {
				staleLeases = append(staleLeases, o)
			}
			continue
		}
		if _, ok := markers.ParseHold(o.Name); ok {
			// The instance rewrites its holds with its lease.
			if !o.ModTime.After(leaseCutoff) {
				staleLeases = append(staleLeases, o)
			}
			continue
		}
		m, ok := markers.ParseMarker(o.Name)
		if !ok {
			rep.Unknown++
			continue
		}
		dead := false
		if !o.ModTime.After(cutoff) {
			switch m.Kind {
			case markers.MarkerPebble, markers.MarkerInstance, markers.MarkerBase:
				dead = !live[m.Creator]
			case markers.MarkerCheckpoint:
				dead = !c.mu.checkpointHeld(m.Job, m.Checkpoint)
			}
		}
		if dead {
			deadMarkers = append(deadMarkers, o)
		} else {
			held[m.Object]++
		}
	}
	var orphans []tiered.ObjectInfo
	for _, o := range ssts {
		if held[o.Name] == 0 && !o.ModTime.After(cutoff) && !c.mu.referenced(o.Name, c.opts.LogHeld) {
			orphans = append(orphans, o)
		}
	}
	c.mu.Unlock()
	// Holds are listed again now that the catalog's state was read: a
	// restore that began since the listing wrote its hold before it
	// checked that its checkpoint is retained.
	heldDirs, err := c.liveHolds(ctx, slices.Concat(deadMarkers, orphans, staleLeases), leaseCutoff)
	if err != nil {
		return fmt.Errorf("catalog: gc: %w", err)
	}
	inHeld := func(o tiered.ObjectInfo) bool { return heldDirs[o.Name[:strings.LastIndex(o.Name, "/")+1]] }
	deadMarkers = slices.DeleteFunc(deadMarkers, inHeld)
	orphans = slices.DeleteFunc(orphans, inHeld)
	staleLeases = slices.DeleteFunc(staleLeases, inHeld) // a hold rewritten since the listing
	if dryRun {
		rep.Orphans = append(rep.Orphans, slices.Concat(deadMarkers, staleLeases, orphans)...)
		for _, o := range slices.Concat(deadMarkers, staleLeases, orphans) {
			rep.Bytes += o.Size
		}
		return nil
	}
	names := make([]string, 0, len(deadMarkers)+len(staleLeases))
	for _, o := range slices.Concat(deadMarkers, staleLeases) {
		names = append(names, o.Name)
	}
	if err := c.deleteRetried(ctx, names); err != nil {
		return fmt.Errorf("catalog: gc: remove stale lsm markers: %w", err)
	}
	rep.Orphans = append(rep.Orphans, deadMarkers...)
	rep.Orphans = append(rep.Orphans, staleLeases...)
	var errs []error
	for _, o := range orphans {
		if err := c.opts.DeleteGuard(ctx); err != nil {
			return fmt.Errorf("catalog: gc: %w", err)
		}
		// Unref lists the markers again: a holder may have marked the SST
		// since the listing (a hand-off of a restored instance).
		deleted, err := markers.Unref(ctx, c.store, o.Name, func(markers.Marker) bool { return false })
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if deleted {
			rep.Orphans = append(rep.Orphans, o)
			rep.Bytes += o.Size
		}
	}
	return errors.Join(errs...)
}
