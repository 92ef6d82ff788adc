package catalog

import (
	"context"
	"fmt"

	"github.com/statedhq/stated/refcount"
)

// Incremental bases.
//
// A job's tasks build each incremental checkpoint on the last checkpoint
// they were told completed, or on the one they restored from: that base's
// shared files are reused without being uploaded again, and they are
// registered only when the new checkpoint completes. Usually the base is a
// checkpoint the job retains itself. It is not when another owner drops
// it: the job restored another job's checkpoint in claim mode and that job
// claims it back (or the other way round), or DeleteCheckpoint removed it.
// Deleting its shared files then would make the job's next checkpoint fail
// with "file does not exist" (FLINK-25395), so the catalog keeps them in
// the registry under a hold of the job (holdOwner) until the job's base
// moves on: its next completion (which registers what it reuses) or its
// next restore. A hold is per job and covers one checkpoint, so holds are
// bounded by the number of jobs; they live in memory only, since a
// restarted daemon's tasks restore (and so choose a new base) anyway.
//
// A checkpoint in flight may also build on the job's previous base (it
// began before the tasks heard of the newest completion), so when a
// dropped checkpoint is the base or previous base of a job with a
// checkpoint in flight, its unreferenced shared files are left to the
// sweep, which deletes them past the grace period unless that checkpoint
// completes and references them.

// A checkpoint also pins the shared files of the job's base and previous
// base from its begin to its end (pinOwner), because its tasks may reuse
// any of them: when another job claimed that base and drops a checkpoint
// that was the last to list those files, the registry still counts the
// pin (TestMachineReplaysItsCommands found a checkpoint of job b, begun
// on a base job a had claimed, whose files went with a checkpoint of a).
// At its end (completed, after it registered what it reuses, or aborted)
// the pin goes; what nothing else references then is deleted if the job
// has no other checkpoint in flight, and left to the sweep otherwise.

// pinOwner is the registry owner under which checkpoint id of job pins
// its bases' shared files (a NUL: no collision with a directory).
func pinOwner(job string, id uint64) string { return fmt.Sprintf("\x00pin/%s/%d", job, id) }

// pin registers, under pinOwner, the shared files of j's base and
// previous base (their checkpoints', or the job's hold of a dropped
// base). A name registered with other bytes is left unpinned: the
// registry refuses it, and Complete refuses such a checkpoint anyway.
func (m *machine) pin(j *jobState, id uint64) {
	seen := map[string]bool{}
	var objs []refcount.Object
	add := func(owner string) {
		for _, o := range m.reg.Objects(owner) {
			if classify(o.Path).kind == objShared && !isRemoteLSM(o.Path) && !seen[o.Path] {
				seen[o.Path] = true
				objs = append(objs, o)
			}
		}
	}
	for _, b := range []ref{j.base, j.prevBase} {
		if b.job != "" {
			add(b.dir())
		}
	}
	add(holdOwner(j.name))
	if len(objs) > 0 {
		_ = m.reg.Register(pinOwner(j.name, id), objs)
	}
}

// unpin ends checkpoint id's pin and returns the names it released for
// deletion: none while the job has another checkpoint in flight (which
// may reuse them; the sweep deletes them later).
func (m *machine) unpin(j *jobState, id uint64) []string {
	return m.release(j, pinOwner(j.name, id))
}

// release unregisters owner (a pin or a hold of j) and returns the names
// nothing references any more, for the caller to delete: none while j has
// a checkpoint in flight, which may build on them (the sweep deletes them
// later).
func (m *machine) release(j *jobState, owner string) []string {
	if !m.reg.Has(owner) {
		return nil
	}
	dropped := m.reg.Unregister(owner)
	if len(j.inflight) > 0 {
		return nil
	}
	names := make([]string, len(dropped))
	for i, o := range dropped {
		names[i] = o.Path
	}
	return names
}

// holdOwner is the registry owner under which job keeps its dropped base's
// shared files. It cannot collide with a checkpoint or savepoint directory
// (a job name never holds a NUL).
func holdOwner(job string) string { return "\x00hold/" + job }

// setBase moves j's base to r (zero: none) and returns the shared
// files of its old base that nothing references any more, for the caller
// to delete (deleteUnreferenced) once it has let go of the lock: none if j
// has a checkpoint in flight, which may build on the old base (the sweep
// deletes them later).
func (m *machine) setBase(j *jobState, r ref) []string {
	if j.base == r {
		return nil
	}
	j.prevBase, j.base = j.base, r
	return m.release(j, holdOwner(j.name))
}

// deleteReleased deletes what setBase released; a failure is left to
// the sweep.
func (c *Catalog) deleteReleased(ctx context.Context, names []string) {
	if len(names) == 0 {
		return
	}
	if _, err := c.deleteUnreferenced(ctx, names); err != nil {
		c.log.Warn("delete the shared files of a former base failed; the sweep retries", "err", err)
	}
}

// dropBase is the part of discarding e that concerns bases: every
// job whose base e is holds e's shared files from now on, and the result
// says whether the shared files that become unreferenced must be left to
// the sweep (a job that may build on e has a checkpoint in flight);
// problems are holds that could not be registered, for the caller to log.
func (m *machine) dropBase(e *entry) (deferShared bool, problems []error) {
	var shared []refcount.Object
	for _, o := range m.reg.Objects(e.ref.dir()) {
		// Remote-mode lsm SSTs need no hold: an instance that builds on
		// them holds each with its own marker (Pebble's or an instance
		// marker), and a hold would outlive the instance.
		if classify(o.Path).kind == objShared && !isRemoteLSM(o.Path) {
			shared = append(shared, o)
		}
	}
	for _, j := range m.jobs {
		related := j.base == e.ref || j.prevBase == e.ref || j.name == e.ref.job || j.name == e.owner
		if related && len(j.inflight) > 0 {
			deferShared = true
		}
		if j.base != e.ref || len(shared) == 0 {
			continue
		}
		if err := m.reg.Register(holdOwner(j.name), shared); err != nil {
			// Only a name registered with other bytes fails here, which
			// Complete refuses; keep the files rather than risk them.
			problems = append(problems, fmt.Errorf("catalog: hold the shared files of base %s for job %s (they are kept): %w", e.ref, j.name, err))
			deferShared = true
		}
	}
	return deferShared, problems
}
