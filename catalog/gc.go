package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/statedhq/stated/tiered"
)

// GCReport says what a GC pass found and did.
type GCReport struct {
	DryRun bool
	// Scanned is the number of objects listed.
	Scanned int
	// ListPages is the number of LIST pages the pass read (on S3, LIST
	// requests), at most Options.SweepMaxListPages.
	ListPages int
	// Truncated: the listing reached Options.SweepMaxListPages; the pass
	// stopped there and deleted nothing from the stores.
	Truncated bool
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
	// AdoptedSavepoints are the savepoints another process wrote that
	// this pass found and registered (adopt.go); DroppedSavepoints the
	// registered ones whose manifest another process deleted, dropped
	// from the catalog (with DryRun: the ones that would be). Sorted.
	AdoptedSavepoints []string
	DroppedSavepoints []string
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
// everything they reference is kept; a savepoint's is adopted, and a
// known savepoint whose manifest is gone is dropped (adopt.go). With dryRun nothing is changed and
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
	c.sweeps.Add(1)
	c.sweepPages.Add(uint64(rep.ListPages))
	if rep.Truncated {
		c.sweepsTruncated.Add(1)
		c.log.Warn("sweep stopped at its LIST bound and deleted nothing: raise the bound for a store this large",
			"pages", rep.ListPages, "objects", rep.Scanned)
	}
	return rep, errors.Join(err, herr)
}

// errListBound ends a sweep's listing at Options.SweepMaxListPages.
var errListBound = errors.New("catalog: gc: the listing reached its page bound")

// sweepList lists every object under prefix of s into objects, page by page,
// counting the pages in rep and stopping with errListBound at the bound.
func (c *Catalog) sweepList(ctx context.Context, s tiered.Store, prefix string, rep *GCReport, objects []tiered.ObjectInfo) ([]tiered.ObjectInfo, error) {
	after := ""
	for {
		if bound := c.opts.SweepMaxListPages; bound > 0 && rep.ListPages >= bound {
			return objects, errListBound
		}
		page, err := s.List(ctx, prefix, after, 0)
		if err != nil {
			return objects, err
		}
		rep.ListPages++
		objects = append(objects, page.Objects...)
		if page.Next == "" {
			return objects, nil
		}
		after = page.Next
	}
}

// gcStore is the sweep of Store, in phases: list the root, read the
// manifests the catalog does not know, snapshot what the catalog protects,
// decide (planSweep, a pure function), delete (deleteUnreferenced:
// re-checked under the lock, batched, bounded in parallelism, retried,
// idempotent).
func (c *Catalog) gcStore(ctx context.Context, rep *GCReport, dryRun bool) error {
	objects, err := c.sweepList(ctx, c.store, "", rep, nil)
	if errors.Is(err, errListBound) {
		return c.truncated(rep, len(objects))
	}
	if err != nil {
		return fmt.Errorf("catalog: gc: list the checkpoint root: %w", err)
	}
	if c.logStore != c.store {
		// The log lives in a store of its own: names under LogDir in the
		// checkpoint root are not ours to judge (a former configuration),
		// and the log store's are swept with the rest.
		n := len(objects)
		objects = slices.DeleteFunc(objects, func(o tiered.ObjectInfo) bool { return classify(o.Name).kind == objLog })
		rep.Unknown += n - len(objects)
		var err error
		objects, err = c.sweepList(ctx, c.logStore, LogDir+"/", rep, objects)
		if errors.Is(err, errListBound) {
			return c.truncated(rep, len(objects))
		}
		if err != nil {
			return fmt.Errorf("catalog: gc: list the log store: %w", err)
		}
	}
	rep.Scanned = len(objects)
	var remote []tiered.ObjectInfo
	objects = slices.DeleteFunc(objects, func(o tiered.ObjectInfo) bool {
		if isRemoteLSM(o.Name) {
			remote = append(remote, o)
			return true
		}
		return false
	})
	keep, keepDirs := c.readForeignManifests(ctx, rep, objects, dryRun)
	// Savepoints deleted by another process: dropped before the
	// protections are taken, so that what is left of them goes as any
	// orphan does.
	rep.DroppedSavepoints = c.dropVanishedSavepoints(ctx, objects, dryRun)
	// Foreign manifests keep what they reference, remote SSTs included.
	rerr := c.sweepRemote(ctx, rep, slices.DeleteFunc(remote, func(o tiered.ObjectInfo) bool { return keep[o.Name] }), dryRun)
	if rerr != nil {
		rep.Problems = append(rep.Problems, fmt.Sprintf("lsm remote objects (the next pass retries): %v", rerr))
	}
	in := c.protections(objects, keep, keepDirs)
	plan := planSweep(in)
	rep.Unknown += plan.unknown
	rep.Young, rep.YoungBytes = plan.young, plan.youngBytes
	if dryRun {
		rep.Orphans = append(rep.Orphans, plan.orphans...)
		for _, o := range plan.orphans {
			rep.Bytes += o.Size
		}
		return rerr
	}
	names := make([]string, len(plan.orphans))
	for i, o := range plan.orphans {
		names[i] = o.Name
	}
	attempted, derr := c.deleteUnreferenced(ctx, names)
	tried := map[string]bool{}
	for _, n := range attempted {
		tried[n] = true
	}
	for _, o := range plan.orphans {
		if tried[o.Name] {
			rep.Orphans = append(rep.Orphans, o)
			rep.Bytes += o.Size
		}
	}
	if derr != nil {
		rep.Problems = append(rep.Problems, fmt.Sprintf("delete failed (the next pass retries): %v", derr))
		return errors.Join(fmt.Errorf("catalog: gc: %w", derr), rerr)
	}
	return rerr
}

// truncated ends a pass whose listing reached its bound: every decision
// of the sweep needs the whole listing (a manifest on a page not read may
// reference any object), so it deletes nothing.
func (c *Catalog) truncated(rep *GCReport, listed int) error {
	rep.Truncated, rep.Scanned = true, listed
	rep.Problems = append(rep.Problems, fmt.Sprintf(
		"the sweep stopped after %d LIST pages (%d objects), its bound (--sweep-max-list-pages): nothing was deleted; raise the bound for a store this large",
		rep.ListPages, listed))
	return nil
}

// readForeignManifests reads the listed manifests the catalog does not
// know and returns what they reference (keep) and the directories of the
// damaged ones (keepDirs). Whatever a manifest we do not know references
// stays: another process (a daemon next to a "stated gc", or an ambiguous
// write that landed) completed it. A savepoint's is adopted (adopt.go),
// unless dryRun: savepoints belong to no job, and "stated savepoint
// edit", "bootstrap" or another daemon wrote it for this one to restore.
// A checkpoint's stays foreign: it belongs to another process's job.
func (c *Catalog) readForeignManifests(ctx context.Context, rep *GCReport, objects []tiered.ObjectInfo, dryRun bool) (keep, keepDirs map[string]bool) {
	var foreign []string
	c.mu.Lock()
	for _, o := range objects {
		n := classify(o.Name)
		if (n.kind == objCheckpointManifest || n.kind == objSavepointManifest) && !c.mu.knownManifest(n) {
			foreign = append(foreign, o.Name)
		}
	}
	c.mu.Unlock()
	keep, keepDirs = map[string]bool{}, map[string]bool{}
	for _, name := range foreign {
		n := classify(name)
		if n.kind == objSavepointManifest && !dryRun {
			_, err := c.adoptSavepoint(ctx, n.sp)
			switch {
			case err == nil:
				rep.AdoptedSavepoints = append(rep.AdoptedSavepoints, n.sp)
				continue
			case errors.Is(err, ErrNotFound):
				continue // deleted since the listing
			case errors.Is(err, ErrCorrupt):
				keepDirs[n.dir()] = true
				rep.Problems = append(rep.Problems, fmt.Sprintf("manifest %s is damaged (%v): its directory is kept", name, err))
				continue
			}
			// Not adopted (the catalog is closing, or a delete of one of
			// its files is under way): kept as a foreign one.
			rep.Problems = append(rep.Problems, fmt.Sprintf("savepoint %s was not adopted (the next pass retries): %v", n.sp, err))
		}
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
			c.mu.noteDamagedManifest(n, name, err)
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
	return keep, keepDirs
}

// knownManifest reports whether the manifest n is of a checkpoint or
// savepoint the catalog retains or has in flight.
func (m *machine) knownManifest(n objName) bool {
	if n.kind == objCheckpointManifest {
		if _, ok := m.entries[ref{n.job, n.id}]; ok {
			return true
		}
		j := m.jobs[n.job]
		return j != nil && j.inflight[n.id] != nil
	}
	_, ok := m.savepoints[n.sp]
	return ok || m.spInflight[n.sp]
}

// protections takes the catalog's protections for the listed objects
// at one moment (it takes c.mu). keep and keepDirs come from
// readForeignManifests.
func (c *Catalog) protections(objects []tiered.ObjectInfo, keep, keepDirs map[string]bool) sweepInput {
	in := sweepInput{objects: objects, live: keep, inflight: map[string]bool{}, protectedDirs: keepDirs,
		grace: c.opts.GCGrace, now: c.opts.Clock()}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range objects {
		if c.mu.referenced(o.Name, c.opts.LogHeld) {
			in.live[o.Name] = true
		}
	}
	for _, j := range c.mu.jobs {
		for id := range j.inflight {
			in.inflight[CheckpointDir(j.name, id)] = true
		}
	}
	for r := range c.mu.begun {
		in.inflight[r.dir()] = true
	}
	for sp := range c.mu.spInflight {
		in.inflight[SavepointDir(sp)] = true
	}
	for dir := range c.mu.guard.dirs {
		in.protectedDirs[dir] = true
	}
	return in
}

// sweepInput is everything planSweep decides from, taken at one moment.
type sweepInput struct {
	// objects is the listing of the checkpoint root.
	objects []tiered.ObjectInfo
	// live are the listed names something references: a retained
	// checkpoint or savepoint (manifest included), a job's base hold, a
	// pending handle, a manifest the catalog does not know, or a delete
	// under way.
	live map[string]bool
	// inflight are the directories of in-flight checkpoints and savepoints:
	// everything under them stays, whatever its age.
	inflight map[string]bool
	// protectedDirs are the directories of damaged manifests: kept as they
	// are for a human to look at.
	protectedDirs map[string]bool
	// grace is Options.GCGrace, now the time of the pass.
	grace time.Duration
	now   time.Time
}

// sweepPlan is what planSweep decided.
type sweepPlan struct {
	// orphans are the objects to delete, sorted by name.
	orphans []tiered.ObjectInfo
	// young and youngBytes count unreferenced objects kept for the grace
	// period; unknown the objects outside the layout.
	young      int
	youngBytes int64
	unknown    int
}

// planSweep decides which listed objects the sweep deletes. An object is
// an orphan when it is inside the layout, not a job file, not live, not
// under an in-flight or protected directory, and it and every object of
// its checkpoint or savepoint directory are older than the grace period (a
// directory written to within it is taken to be in progress, perhaps by
// another process). It does no I/O and takes no lock.
func planSweep(in sweepInput) sweepPlan {
	cutoff := in.now.Add(-in.grace)
	youngest := map[string]time.Time{}
	for _, o := range in.objects {
		if d := classify(o.Name).dir(); d != "" && o.ModTime.After(youngest[d]) {
			youngest[d] = o.ModTime
		}
	}
	var p sweepPlan
	for _, o := range in.objects {
		n := classify(o.Name)
		if n.kind == objUnknown {
			p.unknown++
			continue
		}
		dir := n.dir()
		if n.kind == objJobFile || in.live[o.Name] || (dir != "" && (in.inflight[dir] || in.protectedDirs[dir])) {
			continue
		}
		if o.ModTime.After(cutoff) || (dir != "" && youngest[dir].After(cutoff)) {
			p.young++
			p.youngBytes += o.Size
			continue
		}
		p.orphans = append(p.orphans, o)
	}
	sort.Slice(p.orphans, func(i, j int) bool { return p.orphans[i].Name < p.orphans[j].Name })
	return p
}

// discarding returns the checkpoints being discarded, by name.
func (c *Catalog) discarding() []*entry {
	var todo []*entry
	c.mu.Lock()
	for _, e := range c.mu.entries {
		if e.discarding {
			todo = append(todo, e)
		}
	}
	c.mu.Unlock()
	sort.Slice(todo, func(i, j int) bool { return todo[i].ref.String() < todo[j].ref.String() })
	return todo
}

// retryDiscards finishes retention discards whose manifest delete failed.
func (c *Catalog) retryDiscards(ctx context.Context, rep *GCReport) {
	for _, e := range c.discarding() {
		if err := c.discard(ctx, e); err != nil {
			rep.Problems = append(rep.Problems, err.Error())
			continue
		}
		rep.Discarded = append(rep.Discarded, e.ref.String())
	}
}

// Start runs the sweep (GC) in a goroutine until ctx is done or Close is
// called, SweepInterval after Start and then SweepInterval after each
// pass ends (never back to back, however long a pass takes). Close waits
// for it. Starting twice is an error.
func (c *Catalog) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return ErrClosed
	}
	if c.mu.sweepDone != nil {
		return fmt.Errorf("%w: the sweep runs already", ErrState)
	}
	ctx, cancel := context.WithCancel(ctx)
	c.mu.sweepCancel = cancel
	c.mu.sweepDone = make(chan struct{})
	go func() {
		defer close(c.mu.sweepDone)
		t := time.NewTimer(c.opts.SweepInterval)
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
			if c.afterSweep != nil {
				c.afterSweep(rep, err)
			}
			// The quiet time counts from the end of this pass.
			t.Reset(c.opts.SweepInterval)
		}
	}()
	return nil
}

// Close stops the sweep, the discarder and the job-file writer (which
// writes what is marked first) and waits for them; further calls that change the
// catalog fail with ErrClosed. It does not close the store. Idempotent.
func (c *Catalog) Close() error {
	c.mu.Lock()
	c.mu.closed = true
	cancel, done := c.mu.sweepCancel, c.mu.sweepDone
	stop, stopped := c.mu.discarderStop, c.mu.discarderDone
	c.mu.discarderStop = nil
	c.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	if stop != nil {
		close(stop)
		<-stopped
	}
	c.stopMirror()
	return nil
}
