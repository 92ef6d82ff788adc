package catalog

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/statedhq/stated/tiered"
)

// GCReport says what a GC pass found and did.
type GCReport struct {
	DryRun bool
	// Scanned is the number of objects listed.
	Scanned int
	// Orphans are the unreferenced objects past the grace period: deleted,
	// or, with DryRun, the ones that would be. Sorted by name.
	Orphans []tiered.ObjectInfo
	// Bytes is the total size of Orphans.
	Bytes int64
	// Young and YoungBytes count unreferenced objects kept because they (or
	// their checkpoint or savepoint directory) are within the grace period.
	Young      int
	YoungBytes int64
	// Unknown counts objects outside the layout; GC never touches them.
	Unknown int
	// Discarded lists retention discards this pass finished (an earlier
	// attempt failed).
	Discarded []string
	// Problems are damaged or unexpected manifests (their directories are
	// kept) and failed deletes (retried by the next pass).
	Problems []string
	// HeapOrphans are the heap snapshot files (Options.HeapStore) of no
	// in-flight or retained checkpoint: deleted, or with DryRun the ones
	// that would be; HeapBytes is their size. Sorted by name.
	HeapOrphans []tiered.ObjectInfo
	HeapBytes   int64
}

// GC runs one orphan sweep. It deletes every object of the layout
// ("<job>/shared/...", "<job>/chk-<N>/...", "savepoints/<id>/...") that
//   - no retained checkpoint or savepoint references,
//   - no pending handle of an in-flight checkpoint lists,
//   - is not under an in-flight checkpoint or savepoint directory, nor under
//     one with a damaged or foreign manifest,
//   - and is older than the grace period, as is every object of its
//     checkpoint or savepoint directory (a directory written by another
//     process within the grace period is taken to be in progress).
//
// With Options.HeapStore it also deletes every heap snapshot file there
// that no in-flight checkpoint and no retained checkpoint's heap handle
// holds, without a grace period (see heap.go).
//
// Before that (unless dryRun) it retries retention discards that failed.
// It never ends an in-flight checkpoint: that is the caller's (Abort with
// StatusExpired). Manifests
// the catalog does not know (another process completed them) are read and
// everything they reference is kept. With dryRun nothing is changed and
// the report lists what would be deleted. Deletes are batched, run in
// parallel (bounded) and retried; what still fails is left for the next
// pass.
func (c *Catalog) GC(ctx context.Context, dryRun bool) (*GCReport, error) {
	c.gcMu.Lock()
	defer c.gcMu.Unlock()
	rep := &GCReport{DryRun: dryRun}
	if !dryRun {
		c.retryDiscards(ctx, rep)
	}
	herr := c.gcHeap(ctx, rep, dryRun)
	err := c.gcStore(ctx, rep, dryRun)
	return rep, errors.Join(err, herr)
}

// gcStore is the sweep of Store.
func (c *Catalog) gcStore(ctx context.Context, rep *GCReport, dryRun bool) error {
	now := c.opts.Clock()
	cutoff := now.Add(-c.opts.GCGrace)

	var objects []tiered.ObjectInfo
	youngest := map[string]time.Time{}
	var foreign []string
	c.mu.Lock()
	knownManifest := func(n objName) bool {
		if n.kind == objCheckpointManifest {
			if _, ok := c.entries[ref{n.job, n.id}]; ok {
				return true
			}
			j := c.jobs[n.job]
			return j != nil && j.inflight[n.id] != nil
		}
		_, ok := c.savepoints[n.sp]
		return ok || c.spInflight[n.sp]
	}
	c.mu.Unlock()
	err := tiered.Walk(ctx, c.store, "", func(o tiered.ObjectInfo) error {
		objects = append(objects, o)
		n := classify(o.Name)
		if d := n.dir(); d != "" && o.ModTime.After(youngest[d]) {
			youngest[d] = o.ModTime
		}
		if n.kind == objCheckpointManifest || n.kind == objSavepointManifest {
			c.mu.Lock()
			known := knownManifest(n)
			c.mu.Unlock()
			if !known {
				foreign = append(foreign, o.Name)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("catalog: gc: list the checkpoint root: %w", err)
	}
	rep.Scanned = len(objects)

	// Whatever a manifest we do not know references stays: another process
	// (a daemon next to a "stated gc", or an ambiguous write that landed)
	// completed it.
	keep := map[string]bool{}
	keepDirs := map[string]bool{}
	for _, name := range foreign {
		n := classify(name)
		data, err := tiered.ReadAll(ctx, c.store, name, maxMetaSize)
		if tiered.IsNotFound(err) {
			continue
		}
		var m *Manifest
		if err == nil {
			m, err = DecodeManifest(data)
		}
		if err == nil {
			err = checkManifestPlace(n, m)
		}
		if err != nil {
			keepDirs[n.dir()] = true
			c.mu.Lock()
			if _, ok := c.protectDirs[n.dir()]; !ok {
				c.protectDirs[n.dir()] = err.Error()
				c.problems = append(c.problems, fmt.Sprintf("manifest %s: %v (its directory is kept as it is)", name, err))
			}
			c.mu.Unlock()
			rep.Problems = append(rep.Problems, fmt.Sprintf("manifest %s is damaged (%v): its directory is kept", name, err))
			continue
		}
		objs := checkpointObjects(m, data)
		if m.Kind == KindSavepoint {
			objs = savepointObjects(m, data)
		}
		for _, o := range objs {
			keep[o.Path] = true
		}
		rep.Problems = append(rep.Problems, fmt.Sprintf("manifest %s is not in this catalog (written by another process?): everything it references is kept", name))
	}

	var orphans []tiered.ObjectInfo
	c.mu.Lock()
	for _, o := range objects {
		n := classify(o.Name)
		if n.kind == objUnknown {
			rep.Unknown++
			continue
		}
		if n.kind == objJobFile || keep[o.Name] || keepDirs[n.dir()] || c.liveLocked(o.Name) {
			continue
		}
		if o.ModTime.After(cutoff) || (n.dir() != "" && youngest[n.dir()].After(cutoff)) {
			rep.Young++
			rep.YoungBytes += o.Size
			continue
		}
		orphans = append(orphans, o)
	}
	c.mu.Unlock()
	sort.Slice(orphans, func(i, j int) bool { return orphans[i].Name < orphans[j].Name })
	if dryRun {
		rep.Orphans = orphans
		for _, o := range orphans {
			rep.Bytes += o.Size
		}
		return nil
	}
	names := make([]string, len(orphans))
	for i, o := range orphans {
		names[i] = o.Name
	}
	attempted, derr := c.deleteUnreferenced(ctx, names)
	tried := map[string]bool{}
	for _, n := range attempted {
		tried[n] = true
	}
	for _, o := range orphans {
		if tried[o.Name] {
			rep.Orphans = append(rep.Orphans, o)
			rep.Bytes += o.Size
		}
	}
	if derr != nil {
		rep.Problems = append(rep.Problems, fmt.Sprintf("delete failed (the next pass retries): %v", derr))
		return fmt.Errorf("catalog: gc: %w", derr)
	}
	return nil
}

// retryDiscards finishes retention discards whose manifest delete failed.
func (c *Catalog) retryDiscards(ctx context.Context, rep *GCReport) {
	var todo []*entry
	c.mu.Lock()
	for _, e := range c.entries {
		if e.discarding {
			todo = append(todo, e)
		}
	}
	c.mu.Unlock()
	sort.Slice(todo, func(i, j int) bool { return todo[i].ref.String() < todo[j].ref.String() })
	for _, e := range todo {
		if err := c.discard(ctx, e); err != nil {
			rep.Problems = append(rep.Problems, err.Error())
			continue
		}
		rep.Discarded = append(rep.Discarded, e.ref.String())
	}
}

// Start runs the sweep (GC) every SweepInterval in a goroutine until ctx
// is done or Close is called. Close waits for it. Starting twice is an
// error.
func (c *Catalog) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	if c.sweepDone != nil {
		return fmt.Errorf("%w: the sweep runs already", ErrState)
	}
	ctx, cancel := context.WithCancel(ctx)
	c.sweepCancel = cancel
	c.sweepDone = make(chan struct{})
	go func() {
		defer close(c.sweepDone)
		t := time.NewTicker(c.opts.SweepInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rep, err := c.GC(ctx, false)
			if err != nil && ctx.Err() == nil {
				c.log.Warn("sweep failed", "err", err)
			}
			if rep != nil && len(rep.Orphans) > 0 {
				c.log.Info("sweep deleted orphans", "orphans", len(rep.Orphans), "bytes", rep.Bytes)
			}
		}
	}()
	return nil
}

// Close stops the sweep and waits for it; further calls that change the
// catalog fail with ErrClosed. It does not close the store. Idempotent.
func (c *Catalog) Close() error {
	c.mu.Lock()
	c.closed = true
	cancel, done := c.sweepCancel, c.sweepDone
	c.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	return nil
}
