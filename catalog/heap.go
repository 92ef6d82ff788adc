package catalog

import (
	"context"
	"fmt"
	"sort"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
)

// Heap snapshot files (Options.HeapStore).
//
// Heap backends write their snapshots into the daemon's one in-memory store
// under the checkpoint layout ("<job>/chk-<N>/<operator>-<subtask>/..."),
// and nothing but their checkpoint refers to them. The catalog deletes them,
// rather than the daemon reacting to the catalog's events, because whether a
// heap file may go depends on exactly the facts the catalog owns: which
// checkpoints are in flight, which are retained (retention runs inside
// Complete; DeleteCheckpoint and claims change it too), and which ended
// aborted, declined or expired (the daemon's Abort calls). A daemon-side cleaner would need each of those transitions
// published as an event and the liveness rules written twice, with a race
// between the two copies. Here the rules are the ones of the private files
// in Store:
//
//   - a heap file lives while its checkpoint is in flight (a native
//     savepoint of heap instances copies from the heap store while its
//     checkpoint id is in flight, so savepoints never point into it), or
//     while a retained checkpoint has a heap handle that lists it;
//   - Abort and Release delete the checkpoint's heap directory, a discard
//     (retention, DeleteCheckpoint) does once the manifest is gone, and the
//     sweep (GC) deletes any other heap file, such as a late upload of a
//     checkpoint that expired.
//
// Unlike Store, the heap store needs no grace period: it lives in this
// process's memory and only this process writes it, each file under a
// checkpoint that was begun (BeginCheckpoint) before its snapshot ran, so
// an object that is neither in flight nor retained is known to be dead.

// HeapStore returns Options.HeapStore (nil if the catalog does not manage
// heap snapshot files).
func (c *Catalog) HeapStore() tiered.Store { return c.heap }

// heapLive reports whether heap file name must stay.
func (m *machine) heapLive(name string) bool {
	n := classify(name)
	if n.kind != objCheckpoint {
		// Heap backends write nothing else: never touch what is not theirs.
		return true
	}
	if j := m.jobs[n.job]; j != nil && j.inflight[n.id] != nil {
		return true
	}
	e := m.entries[ref{n.job, n.id}]
	if e == nil {
		return false
	}
	for _, h := range e.m.Tasks {
		if h.Backend != backend.KindHeap {
			continue
		}
		for _, f := range h.Files {
			if f.Path == name {
				return true
			}
		}
	}
	return false
}

// deleteHeapUnder deletes the heap files under prefix that are not live
// (with dryRun it only finds them) and returns them.
func (c *Catalog) deleteHeapUnder(ctx context.Context, prefix string, dryRun bool) ([]tiered.ObjectInfo, error) {
	if c.heap == nil {
		return nil, nil
	}
	var listed []tiered.ObjectInfo
	err := tiered.Walk(ctx, c.heap, prefix, func(o tiered.ObjectInfo) error {
		listed = append(listed, o)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("catalog: list heap snapshots under %q: %w", prefix, err)
	}
	// Checked under the lock after listing: an object listed was written
	// under a checkpoint begun before, so one that is neither in flight
	// nor retained now is dead for good.
	var dead []tiered.ObjectInfo
	c.mu.Lock()
	for _, o := range listed {
		if !c.mu.heapLive(o.Name) {
			dead = append(dead, o)
		}
	}
	c.mu.Unlock()
	if dryRun || len(dead) == 0 {
		return dead, nil
	}
	names := make([]string, len(dead))
	for i, o := range dead {
		names[i] = o.Name
	}
	if err := c.deleteRetriedIn(ctx, c.heap, names); err != nil {
		return dead, fmt.Errorf("catalog: delete heap snapshots under %q: %w", prefix, err)
	}
	return dead, nil
}

// gcHeap is the sweep of the heap store.
func (c *Catalog) gcHeap(ctx context.Context, rep *GCReport, dryRun bool) error {
	if c.heap == nil {
		return nil
	}
	dead, err := c.deleteHeapUnder(ctx, "", dryRun)
	sort.Slice(dead, func(i, j int) bool { return dead[i].Name < dead[j].Name })
	rep.HeapOrphans = dead
	for _, o := range dead {
		rep.HeapBytes += o.Size
	}
	if err != nil {
		rep.Problems = append(rep.Problems, fmt.Sprintf("heap snapshots (the next pass retries): %v", err))
		return fmt.Errorf("catalog: gc: %w", err)
	}
	return nil
}
