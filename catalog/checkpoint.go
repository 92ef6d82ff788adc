package catalog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
)

// BeginCheckpoint marks checkpoint id of job in flight: until it completes
// or aborts, nothing under its directory is deleted by the
// sweep. Calling it again for the same in-flight checkpoint is a no-op (every
// task of the job may call it); an id that already completed is ErrExists.
func (c *Catalog) BeginCheckpoint(job string, id uint64) error {
	if err := ValidateJob(job); err != nil {
		return err
	}
	c.mu.Lock()
	closed := c.mu.closed
	done := c.mu.completedAlready(job, id)
	j := c.mu.jobs[job]
	began := !done && j != nil && j.inflight[id] != nil
	c.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if began && c.Replicated() {
		// Every task of the job begins it: once is enough for the log
		// (begin is idempotent, and an abort or completion since would
		// only have been undone by a second begin's no-op anyway).
		return nil
	}
	if done {
		return fmt.Errorf("%w: checkpoint %s completed already", ErrExists, CheckpointDir(job, id))
	}
	if c.Replicated() && c.beginLater(ref{job, id}) {
		return nil
	}
	_, err := c.exec(command{Op: opBegin, Job: job, ID: id, Now: c.opts.Clock()})
	return err
}

// InFlight lists the in-flight checkpoints of job, sorted.
func (c *Catalog) InFlight(job string) []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []uint64
	if j, ok := c.mu.jobs[job]; ok {
		for id := range j.inflight {
			ids = append(ids, id)
		}
	}
	for r := range c.mu.begun {
		if r.job == job && !slices.Contains(ids, r.id) {
			ids = append(ids, r.id)
		}
	}
	slices.Sort(ids)
	return ids
}

// checkHandle checks that h may be part of checkpoint id of job:
// valid, of the job and checkpoint, and every file inside the layout:
// private files under the checkpoint's directory, shared files under some
// job's "shared/" directory, none inside a savepoint, none of a checkpoint
// the job restored in no-claim mode, none being deleted.
func (m *machine) checkHandle(j *jobState, id uint64, h *backend.Handle) error {
	if h == nil {
		return fmt.Errorf("%w: nil handle for %s", ErrInvalidArgument, CheckpointDir(j.name, id))
	}
	if err := h.Validate(); err != nil {
		return fmt.Errorf("catalog: checkpoint %s: %w", CheckpointDir(j.name, id), err)
	}
	if h.Task.Job != j.name {
		return fmt.Errorf("%w: handle of task %s offered to checkpoint %s of another job", ErrInvalidArgument, h.Task, CheckpointDir(j.name, id))
	}
	if h.CheckpointID != id {
		return fmt.Errorf("%w: handle of task %s is for checkpoint %d, not %d", ErrInvalidArgument, h.Task, h.CheckpointID, id)
	}
	private := CheckpointDir(j.name, id) + "/"
	if h.Log != nil {
		for _, s := range h.Log.Segments {
			if classify(s).kind != objLog {
				return fmt.Errorf("%w: task %s: log segment %s is not under %s/", ErrInvalidArgument, h.Task, s, LogDir)
			}
			if m.guard.deleting[s] {
				return fmt.Errorf("%w: task %s references log segment %s, which is being deleted as unreferenced",
					ErrNotFound, h.Task, s)
			}
		}
	}
	for _, name := range h.ChannelObjects() {
		// Channel state belongs to this checkpoint alone: it lives and
		// dies with the checkpoint's directory.
		if !strings.HasPrefix(name, private) || classify(name).kind != objCheckpoint {
			return fmt.Errorf("%w: task %s: channel state object %s is not under %s", ErrInvalidArgument, h.Task, name, private)
		}
		if m.guard.deleting[name] {
			return fmt.Errorf("%w: task %s references channel state %s, which is being deleted as unreferenced", ErrNotFound, h.Task, name)
		}
	}
	for _, f := range h.Files {
		n := classify(f.Path)
		switch {
		case f.Shared && n.kind != objShared:
			return fmt.Errorf("%w: task %s: shared file %s is not under <job>/%s/", ErrInvalidArgument, h.Task, f.Path, sharedDir)
		case !f.Shared && (!strings.HasPrefix(f.Path, private) || n.kind != objCheckpoint):
			return fmt.Errorf("%w: task %s: private file %s is not under %s", ErrInvalidArgument, h.Task, f.Path, private)
		}
		if !managed(h) {
			continue
		}
		if src, ok := j.noClaim[f.Path]; ok {
			return fmt.Errorf("%w: task %s references %s of checkpoint %s, which the job restored in no-claim mode (the first checkpoint after such a restore must be full)",
				ErrInvalidArgument, h.Task, f.Path, src)
		}
		if m.guard.deleting[f.Path] {
			return fmt.Errorf("%w: task %s references %s, which is being deleted as unreferenced (an upload of an aborted checkpoint?)",
				ErrNotFound, h.Task, f.Path)
		}
	}
	return nil
}

// AddTaskHandle records the handle of one task for in-flight checkpoint id
// of job (begun with BeginCheckpoint). Its files are protected from the
// sweep from now on; Complete writes them into the manifest.
func (c *Catalog) AddTaskHandle(job string, id uint64, h *backend.Handle) error {
	if err := c.checkNotCompleting(job, id); err != nil {
		return err
	}
	return c.report(command{Op: opAddHandle, Job: job, ID: id, Handles: []*backend.Handle{h}}, nil)
}

// sameHandle reports whether a and b encode alike.
func sameHandle(a, b *backend.Handle) bool {
	ea, err1 := backend.EncodeHandle(a)
	eb, err2 := backend.EncodeHandle(b)
	return err1 == nil && err2 == nil && bytes.Equal(ea, eb)
}

// CompleteTasks is Complete of a checkpoint that must hold a handle of
// every task in tasks, whichever daemon reported it: the check a cluster
// needs, where no one daemon holds every task of a job. A task without a
// handle is ErrState naming it (the checkpoint stays in flight: its
// daemon may still report it, and the caller retries). Without tasks it
// is Complete.
func (c *Catalog) CompleteTasks(ctx context.Context, job string, id uint64, tasks []backend.TaskID) (*Manifest, error) {
	if c.Replicated() {
		return c.completeReplicated(ctx, job, id, tasks, nil)
	}
	if len(tasks) == 0 {
		return c.Complete(ctx, job, id)
	}
	{
		r := ref{job, id}
		c.mu.Lock()
		e, done := c.mu.entries[r]
		var missing []string
		if !done || e.discarding {
			have := map[backend.TaskID]bool{}
			if j, ok := c.mu.jobs[job]; ok && j.inflight[id] != nil {
				for _, h := range j.inflight[id].handles {
					have[h.Task] = true
				}
			}
			for _, t := range tasks {
				if !have[t] {
					missing = append(missing, t.String())
				}
			}
		} else {
			// Completed already: every task asked for must be in it.
			have := map[backend.TaskID]bool{}
			for _, h := range e.m.Tasks {
				have[h.Task] = true
			}
			for _, t := range tasks {
				if !have[t] {
					missing = append(missing, t.String())
				}
			}
		}
		c.mu.Unlock()
		if len(missing) > 0 {
			slices.Sort(missing)
			return nil, fmt.Errorf("%w: checkpoint %s has no handle of tasks %s", ErrState, r, strings.Join(missing, ", "))
		}
	}
	return c.Complete(ctx, job, id)
}

// Complete completes in-flight checkpoint id of job with the handles added
// by AddTaskHandle plus handles. It checks that every file not referenced
// yet exists with its size, writes "<job>/chk-<id>/_metadata" (PutIfAbsent:
// exactly once), registers the files, and applies retention: checkpoints of
// the job beyond Options.Retain are discarded (their manifest first, then
// every file no other checkpoint or savepoint references).
//
// Complete of a checkpoint that completed already returns its manifest
// (a retried call). If Complete fails, the checkpoint stays in flight: the
// caller may retry it or Abort it.
func (c *Catalog) Complete(ctx context.Context, job string, id uint64, handles ...*backend.Handle) (*Manifest, error) {
	if c.Replicated() && len(handles) == 0 {
		return c.completeReplicated(ctx, job, id, nil, nil)
	}
	r := ref{job, id}
	if c.isClosed() {
		return nil, ErrClosed
	}
	start := c.withBegin(command{Op: opStartComplete, Job: job, ID: id, Handles: handles})
	plan, err := c.exec(start)
	if err == nil && start.Op == opBatch {
		c.forgetBegin(r)
	}
	if err != nil {
		return nil, err
	}
	if plan.done != nil {
		return plan.done, nil
	}

	m, enc, err := c.writeManifest(ctx, r, plan.started, plan.handles)
	var out outcome
	refused := false
	if err == nil {
		out, err = c.exec(command{Op: opCompleted, Job: job, ID: id, Manifest: enc, decoded: m})
		if errors.Is(err, errLogFailed) {
			// Whether the log took the completion is unknown: the
			// manifest stays (a retry finds it and completes with it), and
			// the leader after this one ends the completion (opTakeOver).
			return nil, err
		}
		refused = err != nil
	}
	if err != nil {
		if _, ferr := c.exec(command{Op: opCompleteFailed, Job: job, ID: id}); ferr != nil {
			err = errors.Join(err, ferr)
		}
		if refused {
			// The manifest must not outlive a failed registration, or a
			// restart would resurrect a checkpoint whose files nothing
			// protected.
			c.deleteNames(ctx, []string{r.manifest()})
		}
		return nil, err
	}

	c.deleteReleased(ctx, out.releaseShared)
	for _, d := range out.discard {
		if err := c.discard(ctx, d); err != nil {
			c.log.Warn("discard after a completion failed; the sweep retries", "discarded", d.ref.String(), "completed", r.String(), "err", err)
		}
	}
	c.saveJobLogged(ctx, job)
	return cloneManifest(m), nil
}

// writeManifest checks the files of a completing checkpoint and writes its
// manifest.
func (c *Catalog) writeManifest(ctx context.Context, r ref, started time.Time, hs []*backend.Handle) (*Manifest, []byte, error) {
	// Check that every file not known yet exists with the size its handle
	// says: a checkpoint must never point at a missing file. Files already
	// registered were checked when their first checkpoint completed.
	// sizeCheck is one object to stat: exactly size bytes, or at least
	// size (a channel state object, whose segments need not reach its end).
	type sizeCheck struct {
		path    string
		size    int64
		atLeast bool
	}
	var check []sizeCheck
	seen := map[string]bool{}
	// Channel state objects and packs of small files must hold every
	// segment and file the handles read.
	chanEnd := map[string]int64{}
	for _, h := range hs {
		if !managed(h) {
			continue
		}
		for _, f := range h.Files {
			if f.Inline != nil {
				continue // in the handle (Validate checked its size)
			}
			if f.Pack != nil {
				chanEnd[f.Pack.Object] = max(chanEnd[f.Pack.Object], f.Pack.Offset+f.Size)
				continue
			}
			if seen[f.Path] {
				continue
			}
			seen[f.Path] = true
			if o, ok := c.mu.reg.Lookup(f.Path); ok {
				if o.Size != f.Size || (o.CRC32C != 0 && o.CRC32C != f.CRC32C) {
					return nil, nil, fmt.Errorf("%w: checkpoint %s lists %s with size %d crc %08x, but it is registered with size %d crc %08x",
						ErrInvalidArgument, r, f.Path, f.Size, f.CRC32C, o.Size, o.CRC32C)
				}
				continue
			}
			check = append(check, sizeCheck{path: f.Path, size: f.Size})
		}
	}
	for _, h := range hs {
		for _, cs := range h.Channels {
			for _, sg := range cs.Segments {
				chanEnd[sg.Path] = max(chanEnd[sg.Path], sg.Offset+sg.Length)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(chanEnd)) {
		if !seen[name] {
			seen[name] = true
			check = append(check, sizeCheck{path: name, size: chanEnd[name], atLeast: true})
		}
	}
	err := c.forEach(ctx, len(check), func(ctx context.Context, i int) error {
		f := check[i]
		info, err := c.store.Stat(ctx, f.path)
		if tiered.IsNotFound(err) {
			return fmt.Errorf("%w: checkpoint %s: file %s does not exist", ErrNotFound, r, f.path)
		}
		if err != nil {
			return fmt.Errorf("catalog: checkpoint %s: stat %s: %w", r, f.path, err)
		}
		switch {
		case f.atLeast && info.Size < f.size:
			return fmt.Errorf("%w: checkpoint %s: object %s (channel state or packed files) has %d bytes, what the handles read of it reaches %d", ErrCorrupt, r, f.path, info.Size, f.size)
		case !f.atLeast && info.Size != f.size:
			return fmt.Errorf("%w: checkpoint %s: file %s has %d bytes, its handle says %d", ErrCorrupt, r, f.path, info.Size, f.size)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	sortTasks(hs)
	m := &Manifest{Version: ManifestVersion, Kind: KindCheckpoint, Job: r.job, CheckpointID: r.id,
		Started: started, Completed: c.opts.Clock(), Tasks: hs}
	for _, h := range hs {
		m.CheckpointedSize += h.CheckpointedSize
		m.FullSize += h.FullSize
	}
	enc, err := EncodeManifest(m)
	if err != nil {
		return nil, nil, err
	}
	if err := c.opts.Guard(ctx); err != nil {
		return nil, nil, fmt.Errorf("catalog: complete %s: %w", r, err)
	}
	err = c.store.PutIfAbsent(ctx, r.manifest(), bytes.NewReader(enc), int64(len(enc)))
	if err == nil {
		// Asked again after the write: if this node still leads now, any
		// later leader lists the store after the manifest landed, so the
		// completion reported to the caller is never lost. If it fails,
		// the caller hears an error; the manifest may stay, and a later
		// Complete of the checkpoint finds it (completions are
		// idempotent).
		if gerr := c.opts.Guard(ctx); gerr != nil {
			return nil, nil, fmt.Errorf("catalog: complete %s: wrote its manifest but %w", r, gerr)
		}
	}
	if errors.Is(err, tiered.ErrExists) {
		// A previous attempt may have written it and then failed to hear
		// the answer. Accept it if it describes the same checkpoint.
		old, rerr := tiered.ReadAll(ctx, c.store, r.manifest(), maxMetaSize)
		if rerr != nil {
			return nil, nil, fmt.Errorf("catalog: complete %s: manifest exists and cannot be read: %w", r, rerr)
		}
		om, derr := DecodeManifest(old)
		if derr != nil || !sameTasks(om, m) {
			return nil, nil, fmt.Errorf("%w: checkpoint %s has a different manifest already (%v)", ErrExists, r, derr)
		}
		return om, old, nil
	}
	if err != nil {
		// The put may have landed anyway; a manifest must not appear for a
		// checkpoint that the caller was told failed.
		c.deleteNames(ctx, []string{r.manifest()})
		return nil, nil, fmt.Errorf("catalog: complete %s: write manifest: %w", r, err)
	}
	return m, enc, nil
}

func sameTasks(a, b *Manifest) bool {
	if len(a.Tasks) != len(b.Tasks) {
		return false
	}
	for i := range a.Tasks {
		x, _ := backend.EncodeHandle(a.Tasks[i])
		y, _ := backend.EncodeHandle(b.Tasks[i])
		if !bytes.Equal(x, y) {
			return false
		}
	}
	return true
}

// record adds or replaces the history record of r.ID.
func (m *machine) record(j *jobState, r Record) {
	i, found := slices.BinarySearchFunc(j.history, r.ID, func(x Record, id uint64) int {
		switch {
		case x.ID < id:
			return -1
		case x.ID > id:
			return 1
		}
		return 0
	})
	if found {
		j.history[i] = r
	} else {
		j.history = slices.Insert(j.history, i, r)
	}
	if n := len(j.history) - m.maxHistory; n > 0 {
		j.history = slices.Delete(j.history, 0, n)
	}
}

// owned returns the checkpoints job owns and may subsume, oldest first:
// adopted ones (in adoption order), then its own by id.
func (m *machine) owned(job string) []*entry {
	var out []*entry
	for _, e := range m.entries {
		if e.owner == job && !e.discarding {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, k int) bool {
		a, b := out[i], out[k]
		aa, ba := a.ref.job != job, b.ref.job != job
		if aa != ba {
			return aa
		}
		if aa && !a.adoptedAt.Equal(b.adoptedAt) {
			return a.adoptedAt.Before(b.adoptedAt)
		}
		if a.ref.job != b.ref.job {
			return a.ref.job < b.ref.job
		}
		return a.ref.id < b.ref.id
	})
	return out
}

// retention marks the checkpoints beyond Retain for discarding and
// returns them.
func (m *machine) retention(job string) []*entry {
	if j := m.jobs[job]; j != nil && j.degraded {
		return nil
	}
	var counted []*entry
	for _, e := range m.owned(job) {
		if !e.pinned {
			counted = append(counted, e)
		}
	}
	n := len(counted) - m.retain
	if n <= 0 {
		return nil
	}
	for _, e := range counted[:n] {
		e.discarding = true
	}
	return counted[:n]
}

// discard deletes a dropped checkpoint: the manifest first (so that a crash
// from here on leaves orphans for the sweep, never a retained checkpoint
// with missing files), then every object of its directory and every shared
// file that no one references any more.
func (c *Catalog) discard(ctx context.Context, e *entry) error {
	return c.discardMany(ctx, []*entry{e})
}

// discardMany is discard of at most maxBatch-maxBegun checkpoints at
// once (room for a replicated catalog's held-back begins in the batch):
// their manifests in one delete, one command for all of them (a batch:
// one log write in a replicated catalog), then each one's files.
func (c *Catalog) discardMany(ctx context.Context, es []*entry) error {
	manifests := make([]string, len(es))
	cmds := make([]command, len(es))
	for i, e := range es {
		manifests[i] = e.ref.manifest()
		cmds[i] = command{Op: opDiscarded, Job: e.ref.job, ID: e.ref.id}
	}
	what := es[0].ref.String()
	if len(es) > 1 {
		what = fmt.Sprintf("%d checkpoints (%s, ...)", len(es), what)
	}
	if err := c.deleteRetried(ctx, manifests); err != nil {
		return fmt.Errorf("catalog: discard %s: delete manifest: %w", what, err)
	}
	cmd := cmds[0]
	if len(cmds) > 1 {
		cmd = command{Op: opBatch, Batch: cmds}
	}
	out, err := c.exec(cmd)
	if err != nil {
		return fmt.Errorf("catalog: discard %s: %w", what, err)
	}
	outs := []outcome{out}
	if len(cmds) > 1 {
		outs = out.subs
	}
	var errs []error
	for i, e := range es {
		errs = append(errs, c.discardFiles(ctx, e, outs[i]))
	}
	return errors.Join(errs...)
}

// discardFiles deletes what a discarded checkpoint leaves: the files out
// released, and its directory.
func (c *Catalog) discardFiles(ctx context.Context, e *entry, out outcome) error {
	for _, err := range out.problems {
		c.log.Warn("a base's shared files are kept", "err", err)
	}
	names := out.release
	// Heap snapshot files of the checkpoint go now too: nothing else
	// refers to them (heap.go).
	_, herr := c.deleteHeapUnder(ctx, e.ref.dir()+"/", false)
	listed, err := c.list(ctx, e.ref.dir()+"/")
	if err != nil {
		_, _ = c.deleteUnreferenced(ctx, names)
		return errors.Join(fmt.Errorf("catalog: discard %s: list its directory (the sweep will finish): %w", e.ref, err), herr)
	}
	for _, o := range listed {
		names = append(names, o.Name)
	}
	_, err = c.deleteUnreferenced(ctx, names)
	return errors.Join(err, herr)
}

// Abort ends in-flight checkpoint id of job without completing it. why is
// StatusAborted, StatusDeclined or StatusExpired, reason a text for the
// history. The catalog never ends a checkpoint on its own: expiry is the
// caller's (the daemon's per-checkpoint timer aborts with StatusExpired),
// so one timer with one default decides it. Abort deletes the checkpoint's private directory now (after
// making sure no manifest for it survives), and its heap snapshot files in
// Options.HeapStore; the shared files it uploaded
// are left to the sweep, which deletes them once they are older than the
// grace period if no completed checkpoint references them (FLINK-24611).
// Aborting an unknown checkpoint cleans its directory and records it.
// Aborting a completed checkpoint is ErrState.
func (c *Catalog) Abort(ctx context.Context, job string, id uint64, why Status, reason string) error {
	if !why.failed() {
		return fmt.Errorf("%w: abort status %q (want aborted, declined or expired)", ErrInvalidArgument, why)
	}
	return c.abort(ctx, job, id, why, reason)
}

// Release ends in-flight checkpoint id of job like Abort, but leaves no
// history record: for a snapshot taken only to be copied into a native
// savepoint (TriggerSavepoint), which is no failed checkpoint. Tell the
// backends NotifyCheckpointAborted(id) so that they never reuse its
// uploads: a savepoint must not move the incremental base (FLINK-23949).
func (c *Catalog) Release(ctx context.Context, job string, id uint64) error {
	return c.abort(ctx, job, id, "", "")
}

func (c *Catalog) abort(ctx context.Context, job string, id uint64, why Status, reason string) error {
	if err := ValidateJob(job); err != nil {
		return err
	}
	r := ref{job, id}
	if err := c.checkNotCompleting(job, id); err != nil {
		return err
	}
	c.forgetBegin(r)
	out, err := c.exec(command{Op: opAbort, Job: job, ID: id, Now: c.opts.Clock(), Status: why, Reason: reason})
	if err != nil {
		return err
	}
	logs := out.release

	if listed, lerr := c.list(ctx, r.dir()+"/"); lerr != nil {
		err = fmt.Errorf("catalog: abort %s: list its directory (the sweep will clean it): %w", r, lerr)
	} else {
		names := make([]string, len(listed), len(listed)+len(logs))
		for i, o := range listed {
			names[i] = o.Name
		}
		names = append(names, logs...)
		if _, derr := c.deleteUnreferenced(ctx, names); derr != nil {
			err = fmt.Errorf("catalog: abort %s (the sweep will finish the cleanup): %w", r, derr)
		}
	}
	if _, herr := c.deleteHeapUnder(ctx, r.dir()+"/", false); herr != nil {
		err = errors.Join(err, fmt.Errorf("catalog: abort %s (the sweep will finish the cleanup): %w", r, herr))
	}
	c.saveJobLogged(ctx, job)
	return err
}

// DeleteCheckpoint discards a retained checkpoint that job owns, pinned or
// not, as retention would. Its files that other checkpoints or savepoints
// reference stay.
func (c *Catalog) DeleteCheckpoint(ctx context.Context, job string, id uint64) error {
	out, err := c.exec(command{Op: opStartDiscard, Job: job, ID: id})
	if err != nil {
		return err
	}
	err = c.discard(ctx, out.entry)
	c.saveJobLogged(ctx, job)
	return err
}

// Latest returns the manifest of the newest retained checkpoint job owns
// (in retention order: its own checkpoints by id, after adopted ones).
func (c *Catalog) Latest(job string) (*Manifest, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	owned := c.mu.owned(job)
	if len(owned) == 0 {
		return nil, false
	}
	return cloneManifest(owned[len(owned)-1].m), true
}

// Checkpoint returns the manifest of retained checkpoint id of job.
func (c *Catalog) Checkpoint(job string, id uint64) (*Manifest, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.mu.entries[ref{job, id}]
	if !ok || e.discarding {
		return nil, false
	}
	return cloneManifest(e.m), true
}

// Retained lists the ids of the retained checkpoints of job's own
// directory (whoever owns them), sorted.
func (c *Catalog) Retained(job string) []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []uint64
	for r, e := range c.mu.entries {
		if r.job == job && !e.discarding {
			ids = append(ids, r.id)
		}
	}
	slices.Sort(ids)
	return ids
}

// List returns the history of job, oldest first: completed (retained or
// subsumed), failed and in-flight checkpoints.
func (c *Catalog) List(job string) []Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	j, ok := c.mu.jobs[job]
	if !ok {
		// A job whose first checkpoint a replicated catalog holds back.
		j = &jobState{name: job}
	}
	byID := map[uint64]Record{}
	for _, r := range j.history {
		byID[r.ID] = r
	}
	for r, e := range c.mu.entries {
		if r.job != job || e.discarding {
			continue
		}
		rec, ok := byID[r.id]
		if !ok || rec.Status != StatusCompleted {
			rec = Record{ID: r.id, Status: StatusCompleted, Started: e.m.Started, Ended: e.m.Completed,
				CheckpointedSize: e.m.CheckpointedSize, FullSize: e.m.FullSize, Tasks: len(e.m.Tasks)}
		}
		rec.Retained, rec.Pinned = true, e.pinned
		if e.owner != job {
			rec.Owner = e.owner
		}
		byID[r.id] = rec
	}
	for id, inf := range j.inflight {
		byID[id] = Record{ID: id, Status: StatusInProgress, Started: inf.started, Tasks: len(inf.handles)}
	}
	for r, at := range c.mu.begun {
		if _, ok := byID[r.id]; r.job == job && !ok {
			byID[r.id] = Record{ID: r.id, Status: StatusInProgress, Started: at}
		}
	}
	if !ok && len(byID) == 0 {
		return nil
	}
	for r, d := range c.mu.damaged {
		if r.job != job {
			continue
		}
		rec, ok := byID[r.id]
		if !ok {
			rec = Record{ID: r.id, Status: StatusCompleted}
		}
		rec.Damaged = d.Err
		byID[r.id] = rec
	}
	out := make([]Record, 0, len(byID))
	for _, r := range byID {
		out = append(out, r)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out
}

// NoteWithoutChannelState records in job's history that a restore skipped
// the channel state of checkpoint id (knowingly losing its in-flight
// data), so that whoever reads the history later knows why records went
// missing. A checkpoint no longer in the history is logged only.
func (c *Catalog) NoteWithoutChannelState(ctx context.Context, job string, id uint64) {
	c.log.Warn("restore without channel state: the checkpoint's in-flight data is skipped", "checkpoint", CheckpointDir(job, id))
	c.mu.Lock()
	found := false
	if j, ok := c.mu.jobs[job]; ok {
		for _, r := range j.history {
			found = found || r.ID == id
		}
	}
	c.mu.Unlock()
	if found {
		if _, err := c.exec(command{Op: opNote, Job: job, ID: id}); err != nil {
			c.log.Warn("noting the restore without channel state in the history failed", "checkpoint", CheckpointDir(job, id), "err", err)
			return
		}
	}
	if found {
		c.saveJobLogged(ctx, job)
	}
}
