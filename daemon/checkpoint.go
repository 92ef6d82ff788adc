package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
)

const (
	statusInProgress = "in-progress"
	statusCompleting = "completing"
	statusCompleted  = "completed"
)

type ckptKey struct {
	job string
	id  uint64
}

// checkpoint is checkpoint id of a job as far as this daemon takes part.
type checkpoint struct {
	key     ckptKey
	started time.Time
	// ctx bounds every asynchronous part; cancelled on abort, expiry or a
	// forced shutdown.
	ctx    context.Context
	cancel context.CancelFunc
	timer  *time.Timer
	tasks  map[backend.TaskID]*taskSnapshot
	// status is statusInProgress, statusCompleting, statusCompleted, or
	// the FailureReason (its String) once aborted; reason is the failure
	// as errors name it.
	status string
	reason string
	// aborted is closed once an abort has finished (the uploads stopped,
	// the catalog recorded it), so that a repeated abort returns only then.
	aborted chan struct{}
	// timedOut: the timer fired while the checkpoint was completing. If
	// the completion fails, it expires at once: the timer is the only
	// expiry, and nothing else would end it.
	timedOut bool
	// chans is the channel state the tasks here write for it (nil until
	// one does). Set under d.mu.
	chans *checkpointChannels
	// holdArmed: a timer will flush the held reports (holdReport); flushes
	// are the flushes under way, closed when done. Under d.mu.
	holdArmed bool
	flushes   []chan struct{}
	// pack holds the small private files the tasks here write for it
	// (nil until one does; pack.go). Set under d.mu.
	pack *checkpointPack
	// inline are the changelog manifests the tasks here wrote for it, by
	// name: their handles carry them (pack.go). Set under d.mu.
	inline map[string][]byte
	// barrier is closed once every task of the job open here has taken
	// its synchronous part (barrier.go); barrierClosed says so. Under d.mu.
	barrier       chan struct{}
	barrierClosed bool
	// joined is when the latest task here snapshotted c: the linger of a
	// pack runs from it (pack.go). Under d.mu.
	joined time.Time
}

type taskSnapshot struct {
	inst *Instance
	// ops is the instance's operator state at the synchronous part; the
	// handle carries it.
	ops    []backend.OperatorList
	done   chan struct{}
	handle *backend.Handle
	err    error
	sync   time.Duration
	async  time.Duration
	// channels is the task's channel state for the checkpoint; stats what
	// the engine reported (nil: nothing).
	channels []backend.ChannelState
	stats    *SnapshotStats
	// wait: the caller waits for the report (SnapshotOptions.Wait), which
	// is then never held.
	wait bool
	// held: the handle's report is held for the completion's own log
	// write (holdReport); release ends the changelog keeper's hold of it
	// once the handle is with the catalog or the checkpoint ended.
	// reportErr is the error of a held report made on its own (flush).
	// Under d.mu.
	held      bool
	release   func()
	reportErr error
	// ran: the backend's asynchronous part returned (it writes no more
	// files). Guarded by d.mu.
	ran bool
	// synced: the synchronous part returned (the task's changes up to the
	// barrier are in the log writer). Guarded by d.mu.
	synced bool
}

// SnapshotOptions are the options of SnapshotWith.
type SnapshotOptions struct {
	// Wait returns only once the asynchronous part has finished.
	Wait bool
	// Stats is what the engine reports of the task's part (nil: nothing).
	Stats *SnapshotStats // Full references no file of an earlier checkpoint (an engine's
	// first checkpoint after a no-claim restore). Externally owned lsm
	// instances only.
	Full bool
}

// SnapshotResult describes one task snapshot.
type SnapshotResult struct {
	Sync time.Duration
	// Done is set when the caller waited for the asynchronous part; the
	// other fields below are then filled.
	Done             bool
	Async            time.Duration
	CheckpointedSize int64
	FullSize         int64
	Files            int
	// External is the handle and files of an externally owned instance's
	// snapshot (when Done).
	External *ExternalSnapshot
}

// Snapshot runs the synchronous part of checkpoint id on inst and starts its
// asynchronous part in a goroutine the daemon owns. With wait it returns
// when that part has finished. The caller must have applied every write the
// snapshot should contain before calling it.
func (d *Daemon) Snapshot(ctx context.Context, inst *Instance, id uint64, wait bool) (SnapshotResult, error) {
	return d.SnapshotWith(ctx, inst, id, SnapshotOptions{Wait: wait})
}

// SnapshotWith is Snapshot with the engine's statistics. The channel state
// the task wrote for id (WriteChannelState) goes into the snapshot.
func (d *Daemon) SnapshotWith(ctx context.Context, inst *Instance, id uint64, o SnapshotOptions) (SnapshotResult, error) {
	task := inst.Task
	wait := o.Wait
	if id == 0 {
		return SnapshotResult{}, fmt.Errorf("daemon: snapshot of %s: %w: checkpoint id 0 (ids start at 1)", task, backend.ErrInvalidArgument)
	}
	if inst.ext != nil {
		return d.snapshotExternal(ctx, inst, id, o)
	}
	if o.Full {
		return SnapshotResult{}, fmt.Errorf("daemon: snapshot %d of %s: %w: a full checkpoint is for externally owned instances; "+
			"the daemon's own checkpoints after a no-claim restore share nothing with it anyway", id, task, backend.ErrInvalidArgument)
	}
	key := ckptKey{task.Job, id}
	d.mu.Lock()
	c, err := d.inProgressLocked(key, task)
	if err != nil {
		d.mu.Unlock()
		return SnapshotResult{}, fmt.Errorf("daemon: snapshot %d of %s: %w", id, task, err)
	}
	if c.tasks[task] != nil {
		d.mu.Unlock()
		return SnapshotResult{}, fmt.Errorf("daemon: snapshot %d of %s: %w: the task already snapshotted this checkpoint",
			id, task, backend.ErrInvalidArgument)
	}
	if err := inst.startSnapshot(); err != nil {
		d.mu.Unlock()
		return SnapshotResult{}, err
	}
	ts := &taskSnapshot{inst: inst, done: make(chan struct{}), stats: o.Stats, wait: wait}
	c.tasks[task] = ts
	c.joined = time.Now()
	d.wg.Add(1)
	if c.chans != nil && d.allSnapshottedLocked(c) {
		c.chans.trigger()
	}
	d.mu.Unlock()
	// No write can add to the task's channel state any more.
	ts.channels = takeChannels(c, inst)

	bi := BackendIndex(inst.Kind)
	t0 := time.Now()
	// The operator state of the same moment as the keyed state: the
	// caller applied every operation it wants in this snapshot.
	ts.ops = inst.OperatorState()
	var ps backend.PendingSnapshot
	err = inst.materializeFailure()
	if err == nil {
		err = inst.snapshotLocked(func() (err error) {
			ps, err = inst.Backend.Snapshot(ctx, id)
			return err
		})
	}
	ts.sync = time.Since(t0)
	d.m.CheckpointSync[bi].Observe(ts.sync)
	if err != nil {
		ts.err = fmt.Errorf("daemon: snapshot %d of %s: %w", id, task, err)
		d.m.SnapshotFailures[bi].Add(1)
		d.mu.Lock()
		ts.ran = true
		d.syncedLocked(c, ts)
		d.packKickLocked(c)
		d.mu.Unlock()
		close(ts.done)
		inst.finishSnapshot()
		d.wg.Done()
		if errors.Is(err, backend.ErrDeclined) {
			// The checkpoint cannot complete without this task: stop the
			// uploads of the others now.
			_ = d.abortFor(ctx, task.Job, id, Failure{FailureDeclined, err.Error()})
		}
		return SnapshotResult{Sync: ts.sync}, ts.err
	}
	d.mu.Lock()
	d.syncedLocked(c, ts)
	d.mu.Unlock()
	release := func() {}
	if d.keeper != nil {
		release = d.keeper.hold()
	}
	go d.runSnapshot(c, ts, ps, id, release)
	res := SnapshotResult{Sync: ts.sync}
	if !wait {
		return res, nil
	}
	select {
	case <-ts.done:
	case <-ctx.Done():
		return res, fmt.Errorf("daemon: snapshot %d of %s: waiting for the upload: %w", id, task, ctx.Err())
	}
	if ts.err != nil {
		return res, ts.err
	}
	res.Done = true
	res.Async = ts.async
	res.CheckpointedSize = ts.handle.CheckpointedSize
	res.FullSize = ts.handle.FullSize
	res.Files = len(ts.handle.Files)
	return res, nil
}

func reasonSuffix(r string) string {
	if r == "" {
		return ""
	}
	return " (" + r + ")"
}

// newCheckpointLocked registers checkpoint key with its expiry timer.
func (d *Daemon) newCheckpointLocked(key ckptKey) *checkpoint {
	ctx, cancel := context.WithCancel(d.baseCtx)
	c := &checkpoint{key: key, started: time.Now(), ctx: ctx, cancel: cancel,
		tasks: map[backend.TaskID]*taskSnapshot{}, status: statusInProgress, aborted: make(chan struct{}),
		barrier: make(chan struct{})}
	c.timer = time.AfterFunc(d.cfg.CheckpointTimeout, func() { d.expire(c) })
	d.ckpts[key] = c
	if len(d.ckpts) > tombstoneLimit {
		d.pruneLocked()
	}
	return c
}

// pruneLocked forgets the oldest aborted checkpoints past tombstoneLimit.
func (d *Daemon) pruneLocked() {
	var dead []*checkpoint
	for _, c := range d.ckpts {
		if c.status != statusInProgress && c.status != statusCompleting {
			dead = append(dead, c)
		}
	}
	sort.Slice(dead, func(i, j int) bool { return dead[i].started.Before(dead[j].started) })
	for _, c := range dead[:max(0, len(d.ckpts)-tombstoneLimit)] {
		delete(d.ckpts, c.key)
	}
}

// runSnapshot is the asynchronous part of one task snapshot. It calls
// handedOver once the handle is with the catalog (or the part failed),
// before anyone waiting for the part hears of it.
func (d *Daemon) runSnapshot(c *checkpoint, ts *taskSnapshot, ps backend.PendingSnapshot, id uint64, handedOver func()) {
	defer d.wg.Done()
	inst := ts.inst
	bi := BackendIndex(inst.Kind)
	t0 := time.Now()
	h, err := ps.Run(c.ctx)
	d.mu.Lock()
	ts.ran = true
	d.packKickLocked(c) // the others waiting in a pack may be all that is left
	d.mu.Unlock()
	if err == nil && (h == nil || h.Task != inst.Task || h.CheckpointID != id) {
		err = fmt.Errorf("%w: the backend returned a handle for another task or checkpoint", backend.ErrCorrupt)
	}
	if err == nil {
		h = d.packedHandle(c, h)
	}
	// A fenced instance must not report: the task's newer holder reports
	// its own handle for this checkpoint. The catalog checks the token
	// (cluster mode: in the same log write that keeps the report).
	if err == nil && len(ts.channels) > 0 {
		err = d.sealChannels(c)
	}
	held := false
	if err == nil {
		h = withOperatorState(h, ts.ops)
		h = withChannels(h, ts.channels, ts.taskStats(time.Since(t0)))
		if d.holdReport(c, ts, h, handedOver) {
			held = true
		} else {
			err = d.cfg.Catalog.AddFencedTaskHandle(inst.Task.Job, id, h, inst.fence)
			if errors.Is(err, ErrFenced) {
				err = fmt.Errorf("daemon: snapshot %d of %s (instance %s): %w", id, inst.Task, inst.IDString(), err)
			}
		}
	}
	if !held {
		handedOver()
	}
	ts.async = time.Since(t0)
	d.m.CheckpointAsync[bi].Observe(ts.async)
	if err != nil {
		if c.ctx.Err() != nil && !errors.Is(err, context.Canceled) {
			err = fmt.Errorf("%w (%w)", err, context.Canceled)
		}
		ts.err = fmt.Errorf("daemon: snapshot %d of %s: upload: %w", id, inst.Task, err)
		d.corruption(CorruptionEvent{Site: CorruptionSnapshot, Job: inst.Task.Job, Task: inst.Task, Source: fmt.Sprintf("checkpoint %d of job %s", id, inst.Task.Job), Err: ts.err})
		d.m.SnapshotFailures[bi].Add(1)
		d.log.Warn("snapshot failed", "task", inst.Task.String(), "checkpoint", id, "err", err)
	} else {
		if !held {
			ts.handle = h // holdReport set it under d.mu
		}
		d.m.ChannelStateBytes.Add(uint64(h.ChannelBytes()))
		if h.Stats != nil && h.Stats.Unaligned {
			d.m.UnalignedSnapshots.Add(1)
		}
		if s := ts.stats; s != nil {
			d.m.Alignment.Observe(s.Alignment)
			d.m.StartDelay.Observe(s.StartDelay)
		}
		d.m.CheckpointedBytes[bi].Add(uint64(max(0, h.CheckpointedSize)))
		d.m.FullBytes[bi].Add(uint64(max(0, h.FullSize)))
	}
	close(ts.done)
	inst.finishSnapshot()
	if err != nil && c.ctx.Err() == nil && !errors.Is(err, ErrFenced) {
		// The checkpoint cannot complete without this task: abort it now so
		// the other tasks' uploads stop and the catalog records why. Not
		// for a fenced instance (a zombie whose task was opened again
		// elsewhere): the task's new holder reports its own handle of
		// this checkpoint, and the other tasks' parts stay.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = d.abortFor(ctx, inst.Task.Job, id, snapshotFailure(ts.err))
	}
}

// CompleteCheckpoint waits for every task snapshot of checkpoint id of job
// in this daemon and records the checkpoint as completed in the catalog
// (its _metadata). tasks, when not empty, are the tasks it must contain;
// otherwise every open instance of the job must have snapshotted it. A
// checkpoint with a failed task snapshot is aborted and the error wraps
// ErrCheckpointFailed. Completing a completed checkpoint returns it again.
func (d *Daemon) CompleteCheckpoint(ctx context.Context, job string, id uint64, tasks []backend.TaskID) (CheckpointInfo, error) {
	key := ckptKey{job, id}
	d.mu.Lock()
	c := d.ckpts[key]
	if c == nil {
		d.mu.Unlock()
		if m, ok := d.cfg.Catalog.Checkpoint(job, id); ok {
			return infoFromManifest(m), nil // a retried call
		}
		if d.cfg.SharedCatalog {
			// Every task lives on other daemons: the catalog completes it
			// when they all reported (without a task list, when every
			// task of the job open anywhere did).
			m, err := d.cfg.Catalog.CompleteWithReports(ctx, job, id, tasks, nil, nil)
			if err != nil {
				return CheckpointInfo{}, fmt.Errorf("daemon: complete checkpoint %d of job %s: %w", id, job, err)
			}
			return infoFromManifest(m), nil
		}
		return CheckpointInfo{}, fmt.Errorf("daemon: complete checkpoint %d of job %s: %w: no task of this daemon snapshotted it",
			id, job, backend.ErrNotFound)
	}
	if c.status != statusInProgress {
		st, r := c.status, c.reason
		d.mu.Unlock()
		return CheckpointInfo{}, fmt.Errorf("daemon: complete checkpoint %d of job %s: %w: it is %s%s", id, job, ErrCheckpointFailed, st, reasonSuffix(r))
	}
	var missing []string
	if len(tasks) > 0 {
		for _, t := range tasks {
			// With a shared catalog, a task not open here is another
			// daemon's: the catalog checks that it reported.
			if c.tasks[t] == nil && (!d.cfg.SharedCatalog || d.byTask[t] != nil) {
				missing = append(missing, t.String())
			}
		}
	} else {
		for t := range d.byTask {
			if t.Job == job && c.tasks[t] == nil {
				missing = append(missing, t.String())
			}
		}
	}
	if len(missing) > 0 {
		d.mu.Unlock()
		sort.Strings(missing)
		return CheckpointInfo{}, fmt.Errorf("daemon: complete checkpoint %d of job %s: %w: tasks %s did not snapshot it",
			id, job, ErrCheckpointFailed, strings.Join(missing, ", "))
	}
	c.status = statusCompleting
	if c.chans != nil {
		// The coordinator is waiting: upload the shared channel state now.
		c.chans.trigger()
	}
	snaps := make([]*taskSnapshot, 0, len(c.tasks))
	for _, ts := range c.tasks {
		snaps = append(snaps, ts)
	}
	// No flush of held reports starts while it completes; those under way
	// must end first (their reports are then in the catalog, or failed).
	flushes := slices.Clone(c.flushes)
	d.mu.Unlock()
	reopen := func() {
		d.mu.Lock()
		expired := false
		if c.status == statusCompleting {
			c.status = statusInProgress
			expired = c.timedOut
		}
		d.mu.Unlock()
		if expired {
			d.expire(c)
		}
	}

	for _, ts := range snaps {
		select {
		case <-ts.done:
		case <-ctx.Done():
			reopen()
			return CheckpointInfo{}, fmt.Errorf("daemon: complete checkpoint %d of job %s: waiting for uploads: %w", id, job, ctx.Err())
		}
	}
	for _, f := range flushes {
		select {
		case <-f:
		case <-ctx.Done():
			reopen()
			return CheckpointInfo{}, fmt.Errorf("daemon: complete checkpoint %d of job %s: waiting for reports: %w", id, job, ctx.Err())
		}
	}
	d.mu.Lock()
	for _, ts := range snaps {
		if ts.err == nil && ts.reportErr != nil {
			ts.err = ts.reportErr // a held report made on its own failed
		}
	}
	d.mu.Unlock()
	// The snapshots of fenced instances (their tasks were opened again on
	// another node) are left out: the tasks' new holders report theirs
	// (the catalog refuses the completion until they have).
	var fenced []error
	live := snaps[:0]
	for _, ts := range snaps {
		switch {
		case ts.err != nil && errors.Is(ts.err, ErrFenced) && d.cfg.SharedCatalog:
			fenced = append(fenced, ts.err)
		case ts.err != nil:
			reopen()
			_ = d.abortFor(ctx, job, id, snapshotFailure(ts.err))
			return CheckpointInfo{}, fmt.Errorf("daemon: complete checkpoint %d of job %s: %w: %w", id, job, ErrCheckpointFailed, ts.err)
		default:
			live = append(live, ts)
		}
	}
	snaps = live
	withFenced := func(err error) error {
		if err == nil || len(fenced) == 0 {
			return err
		}
		return fmt.Errorf("%w (this daemon's instances of some of its tasks were fenced, their tasks opened elsewhere: %w)", err, errors.Join(fenced...))
	}
	// The catalog checks the tokens (cluster mode: on the leader, within
	// the completion's own confirmation of the leadership). The held
	// reports go in the completion's own log entry, each under its
	// token.
	tokens := map[backend.TaskID]uint64{}
	var reports []catalog.FencedHandle
	var merged []*taskSnapshot
	d.mu.Lock()
	for _, ts := range snaps {
		if ts.inst.fence != 0 {
			tokens[ts.inst.Task] = ts.inst.fence
		}
		if ts.held {
			ts.held = false
			merged = append(merged, ts)
			reports = append(reports, catalog.FencedHandle{Handle: ts.handle, Token: ts.inst.fence})
		}
	}
	d.mu.Unlock()
	m, err := d.cfg.Catalog.CompleteWithReports(ctx, job, id, tasks, tokens, reports)
	err = withFenced(err)
	if err != nil && len(merged) > 0 {
		// The reports are not in the catalog: report them on their own
		// (a completion through another node, or a retry, needs them; a
		// stale token's report is refused then, the others are taken).
		d.mu.Lock()
		for _, ts := range merged {
			ts.held = true
		}
		d.mu.Unlock()
		reopen()
		if d.flushHeld(c, nil) {
			d.mu.Lock()
			if c.ctx.Err() == nil && !d.closing {
				d.armHoldLocked(c, reportRetry)
			}
			d.mu.Unlock()
		}
	}
	if errors.Is(err, ErrFenced) {
		reopen()
		return CheckpointInfo{}, fmt.Errorf("daemon: complete checkpoint %d of job %s: %w", id, job, err)
	}
	if err != nil {
		// The catalog keeps it in flight: the coordinator may retry or
		// abort.
		reopen()
		return CheckpointInfo{}, d.corruption(CorruptionEvent{Site: CorruptionCatalog, Job: job, Source: fmt.Sprintf("checkpoint %d of job %s", id, job),
			Err: fmt.Errorf("daemon: complete checkpoint %d of job %s: %w", id, job, err)})
	}
	for _, ts := range merged {
		ts.release()
	}
	d.m.ReportsMerged.Add(uint64(len(merged)))
	var subsumed []*checkpoint
	d.mu.Lock()
	d.wholeHere[job] = d.allOpenHereLocked(m)
	c.status = statusCompleted
	c.timer.Stop()
	c.cancel()
	delete(d.ckpts, key)
	if id > d.lastCompleted[job] {
		d.lastCompleted[job] = id
	}
	for k, o := range d.ckpts {
		if k.job != job || k.id > id {
			continue
		}
		if o.status == statusInProgress {
			subsumed = append(subsumed, o)
		} else if o.status != statusCompleting {
			delete(d.ckpts, k) // ids <= id are refused anyway
		}
	}
	d.mu.Unlock()
	d.closeChannels(c)
	d.closePack(c)
	d.timing.record(key, snaps)
	for _, ts := range snaps {
		ts.inst.Backend.NotifyCheckpointComplete(id)
	}
	if d.keeper != nil {
		d.keeper.nudge() // the logs were likely truncated
	}
	for _, o := range subsumed {
		_ = d.abortFor(ctx, job, o.key.id, Failure{FailureAborted, fmt.Sprintf("subsumed by checkpoint %d", id)})
	}
	d.m.CheckpointsCompleted.Add(1)
	dur := time.Since(c.started)
	d.m.CheckpointDuration.Observe(dur)
	info := infoFromManifest(m)
	d.log.Info("checkpoint completed", "job", job, "checkpoint", id, "tasks", len(snaps),
		"checkpointedSize", info.CheckpointedSize, "fullSize", info.FullSize, "duration", dur)
	return info, nil
}

// Failure is why a checkpoint failed, typed where the failure happens (a
// backend declining, an upload failing, the timer, a coordinator's abort):
// Reason is counted in Metrics.CheckpointFailures and recorded as the
// catalog status, Text is the history's reason (ListCheckpoints).
type Failure struct {
	Reason FailureReason
	Text   string
}

// String is the failure as people read it: "declined: <text>", or the
// class alone without a text.
func (f Failure) String() string {
	if f.Text == "" {
		return f.Reason.String()
	}
	return f.Reason.String() + ": " + f.Text
}

// ParseFailure reads a reason in its text form, as the API's
// AbortCheckpoint carries it: "declined", "expired" or "aborted",
// optionally followed by ": " and a text; anything else is an abort with
// that text. It is the one place a reason is parsed; everything inside the
// daemon passes a Failure.
func ParseFailure(reason string) Failure {
	for r := range numFailureReasons {
		if name := r.String(); strings.HasPrefix(reason, name) {
			return Failure{r, strings.TrimPrefix(strings.TrimPrefix(reason, name), ": ")}
		}
	}
	return Failure{FailureAborted, reason}
}

// snapshotFailure is the failure of a checkpoint one of whose task
// snapshots failed with err: declined if the backend declined it.
func snapshotFailure(err error) Failure {
	if errors.Is(err, backend.ErrDeclined) {
		return Failure{FailureDeclined, err.Error()}
	}
	return Failure{FailureAborted, err.Error()}
}

// LastCompleted is the highest checkpoint id of job completed as far as
// this daemon knows, in this run or retained in the catalog (0: none): a
// new checkpoint id must be larger.
func (d *Daemon) LastCompleted(job string) uint64 {
	d.mu.Lock()
	last := d.lastCompleted[job]
	d.mu.Unlock()
	if ids := d.cfg.Catalog.Retained(job); len(ids) > 0 {
		last = max(last, ids[len(ids)-1])
	}
	return last
}

// AbortCheckpoint cancels checkpoint id of job: running uploads stop, the
// catalog discards what only this checkpoint uploaded, and a later
// Snapshot of it is refused. reason is in the text form ParseFailure reads
// ("aborted" when empty). Aborting an aborted checkpoint is a no-op;
// aborting a completed one is an error.
func (d *Daemon) AbortCheckpoint(ctx context.Context, job string, id uint64, reason string) error {
	if reason == "" {
		reason = "aborted"
	}
	return d.abort(ctx, job, id, ParseFailure(reason), reason)
}

// abortFor aborts with a failure the daemon met itself.
func (d *Daemon) abortFor(ctx context.Context, job string, id uint64, f Failure) error {
	return d.abort(ctx, job, id, f, f.String())
}

// abort is AbortCheckpoint with the failure typed; shown is how errors and
// logs name it (the caller's text as given, for AbortCheckpoint).
func (d *Daemon) abort(ctx context.Context, job string, id uint64, f Failure, shown string) error {
	class := f.Reason
	if class >= numFailureReasons {
		class = FailureAborted
	}
	key := ckptKey{job, id}
	d.mu.Lock()
	c := d.ckpts[key]
	if c == nil {
		if last := d.lastCompleted[job]; id <= last {
			d.mu.Unlock()
			done := "it already completed"
			if id < last {
				done = fmt.Sprintf("the job already completed checkpoint %d, which subsumes it", last)
			}
			return fmt.Errorf("daemon: abort checkpoint %d of job %s: %w: %s; there is nothing to abort", id, job, ErrCheckpointFailed, done)
		}
		// No task here snapshotted it yet: remember the abort so that a
		// late Snapshot is refused.
		c = d.newCheckpointLocked(key)
	}
	switch status := c.status; status {
	case statusCompleting, statusCompleted:
		d.mu.Unlock()
		// status, not c.status: a completion may change it once the lock
		// is let go.
		return fmt.Errorf("daemon: abort checkpoint %d of job %s: %w: it is %s", id, job, ErrCheckpointFailed, status)
	case statusInProgress:
	default:
		// Aborted already, or being aborted: done once that abort is.
		d.mu.Unlock()
		select {
		case <-c.aborted:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("daemon: abort checkpoint %d of job %s: waiting for the abort under way: %w", id, job, ctx.Err())
		}
	}
	c.status = class.String()
	c.reason = shown
	c.timer.Stop()
	c.cancel()
	snaps := make([]*taskSnapshot, 0, len(c.tasks))
	for _, ts := range c.tasks {
		snaps = append(snaps, ts)
	}
	d.mu.Unlock()

	// The uploads see the cancellation; wait so that nothing writes after
	// the catalog has discarded the checkpoint.
	defer close(c.aborted)
	for _, ts := range snaps {
		<-ts.done
	}
	d.flushHeld(c, nil) // drops them: the checkpoint ended
	// Its uploads have stopped: the catalog's cleanup below sees every
	// channel state object there will be.
	d.closeChannels(c)
	d.closePack(c)
	var err error
	// Also for a checkpoint no task here began: the catalog records it and
	// cleans what tasks elsewhere may have written.
	if e := d.cfg.Catalog.Abort(ctx, job, id, class.Status(), f.Text); e != nil {
		err = fmt.Errorf("daemon: abort checkpoint %d of job %s: %w", id, job, e)
	}
	for _, ts := range snaps {
		ts.inst.Backend.NotifyCheckpointAborted(id)
	}
	d.m.CheckpointFailures[class].Add(1)
	d.log.Warn("checkpoint aborted", "job", job, "checkpoint", id, "reason", shown)
	return err
}

// expire aborts a checkpoint that outlived the timeout: the uploads stop,
// the catalog records it as expired and deletes its files, the backends
// hear of it, and the expired metric counts it. A checkpoint completing
// when the timer fires is left to its completion; should that fail, reopen
// calls expire again.
func (d *Daemon) expire(c *checkpoint) {
	d.mu.Lock()
	if c.status == statusCompleting {
		c.timedOut = true
	}
	skip := d.closing || c.status != statusInProgress
	d.mu.Unlock()
	if skip {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = d.abortFor(ctx, c.key.job, c.key.id,
		Failure{FailureExpired, fmt.Sprintf("not completed within %s", d.cfg.CheckpointTimeout)})
}

// ListCheckpoints returns the checkpoint history of job from the catalog,
// oldest first.
func (d *Daemon) ListCheckpoints(ctx context.Context, job string) ([]CheckpointInfo, error) {
	if err := catalog.ValidateJob(job); err != nil {
		return nil, fmt.Errorf("daemon: list checkpoints: %w", err)
	}
	now := time.Now()
	look := d.cfg.Catalog
	recs, err := look.ListContext(ctx, job)
	if err != nil {
		return nil, fmt.Errorf("daemon: list checkpoints of job %s: %w", job, err)
	}
	var out []CheckpointInfo
	for _, r := range recs {
		in := infoFromRecord(job, r, now)
		if r.Retained {
			m, ok, err := look.CheckpointContext(ctx, job, r.ID)
			if err != nil {
				return nil, fmt.Errorf("daemon: list checkpoints of job %s: checkpoint %d: %w", job, r.ID, err)
			}
			if ok {
				in.ChangelogSize = m.ChangelogSize()
			}
		}
		out = append(out, in)
	}
	return out, nil
}

// taskStats is what the handle records of how the task took the snapshot:
// nil unless the engine reported statistics or the task wrote channel
// state (so handles of engines that do neither keep their older format).
func (ts *taskSnapshot) taskStats(async time.Duration) *backend.TaskStats {
	if ts.stats == nil && len(ts.channels) == 0 {
		return nil
	}
	st := &backend.TaskStats{SyncMicros: ts.sync.Microseconds(), AsyncMicros: async.Microseconds()}
	if s := ts.stats; s != nil {
		st.Unaligned = s.Unaligned
		st.AlignmentMicros = max(0, s.Alignment.Microseconds())
		st.StartDelayMicros = max(0, s.StartDelay.Microseconds())
	}
	return st
}

// reportHold bounds how long a task's report is held for its daemon's
// completion (holdReport): a completion through this daemon within it
// takes the report in its own log write, a later one finds it reported.
const reportHold = 25 * time.Millisecond

// holdReport holds the report of ts's handle h for the completion's own
// log entry, and reports whether it did. A cluster completion's path
// otherwise holds two log writes: the reports' entry, then the
// completion's. It holds only a report whose caller does not wait for it,
// of a job whose last checkpoint completed through this daemon with every
// task open here (the completion then most likely comes here too; a
// completion through another node meanwhile is refused as not whole,
// never partial: the tasks hold fencing tokens), and only for reportHold,
// after which the reports go on their own (flushHeld).
func (d *Daemon) holdReport(c *checkpoint, ts *taskSnapshot, h *backend.Handle, handedOver func()) bool {
	if ts.wait || d.cfg.Fence == nil || ts.inst.fence == 0 {
		return false // no cluster: no log write to save
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.wholeHere[c.key.job] || c.status != statusInProgress && c.status != statusCompleting {
		return false
	}
	ts.held, ts.handle, ts.release = true, h, handedOver
	d.armHoldLocked(c, reportHold)
	return true
}

// reportRetry is how long a held report whose own report failed waits
// for the next try (or for its daemon's completion, which takes it).
const reportRetry = time.Second

// armHoldLocked has a timer flush c's held reports after delay, unless
// one will already. The caller holds a count of d.wg (runSnapshot, or the
// timer's own callback), or saw d.closing unset: Shutdown is not past its
// wait.
func (d *Daemon) armHoldLocked(c *checkpoint, delay time.Duration) {
	if c.holdArmed {
		return
	}
	c.holdArmed = true
	d.wg.Add(1)
	time.AfterFunc(delay, func() {
		defer d.wg.Done()
		d.mu.Lock()
		c.holdArmed = false
		d.mu.Unlock()
		if d.flushHeld(c, nil) {
			d.mu.Lock()
			if c.ctx.Err() == nil && !d.closing {
				d.armHoldLocked(c, reportRetry)
			}
			d.mu.Unlock()
		}
	})
}

// flushInstance reports the held reports of inst (it closes: its token
// goes next).
func (d *Daemon) flushInstance(inst *Instance) {
	d.mu.Lock()
	var cs []*checkpoint
	for _, c := range d.ckpts {
		if ts := c.tasks[inst.Task]; ts != nil && ts.inst == inst && ts.held {
			cs = append(cs, c)
		}
	}
	d.mu.Unlock()
	for _, c := range cs {
		d.flushHeld(c, inst)
	}
}

// flushHeld reports the held reports of checkpoint c (of inst's task only,
// unless nil), each on its own (the leader's catalog puts reports made at
// once in one log entry), and waits for them. Not while c completes: the
// completion takes them, or flushes them itself when it fails. The
// reports of an ended checkpoint are dropped. A report refused for a
// stale token leaves its task out of the checkpoint (its new holder
// reports); a report the catalog refused otherwise (the checkpoint
// completed or ended through another node meanwhile) stays held for this
// daemon's completion, which then finds it so; one whose outcome is
// unknown (no leader) stays held for the next try too, and flushHeld
// reports true.
func (d *Daemon) flushHeld(c *checkpoint, inst *Instance) (again bool) {
	d.mu.Lock()
	if c.status == statusCompleting {
		d.mu.Unlock()
		return false
	}
	var todo []*taskSnapshot
	for _, ts := range c.tasks {
		if ts.held && (inst == nil || ts.inst == inst) {
			ts.held = false
			todo = append(todo, ts)
		}
	}
	ended := c.ctx.Err() != nil
	done := make(chan struct{})
	if len(todo) > 0 && !ended {
		c.flushes = append(c.flushes, done)
	}
	d.mu.Unlock()
	if len(todo) == 0 || ended {
		for _, ts := range todo {
			ts.release()
		}
		return false
	}
	defer func() {
		d.mu.Lock()
		c.flushes = slices.DeleteFunc(c.flushes, func(f chan struct{}) bool { return f == done })
		d.mu.Unlock()
		close(done)
	}()
	job, id := c.key.job, c.key.id
	var wg sync.WaitGroup
	for _, ts := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-ts.done
			err := d.cfg.Catalog.AddFencedTaskHandle(job, id, ts.handle, ts.inst.fence)
			if err == nil {
				ts.release()
				return
			}
			err = fmt.Errorf("daemon: snapshot %d of %s (instance %s): report: %w", id, ts.inst.Task, ts.inst.IDString(), err)
			fenced := errors.Is(err, ErrFenced)
			refused := !fenced && refusedReport(err)
			d.mu.Lock()
			switch {
			case fenced:
				ts.reportErr = err
			case refused:
				// The checkpoint completed or ended elsewhere: a
				// completion here finds it so; no retry.
				ts.held = true
			default:
				ts.held, again = true, true
			}
			d.mu.Unlock()
			if fenced || refused {
				ts.release()
			}
			d.log.Warn("held snapshot report failed", "task", ts.inst.Task.String(), "checkpoint", id, "err", err)
		}()
	}
	wg.Wait()
	return again
}

// refusedReport reports whether the catalog answered a report with a
// refusal (a retry gets the same), not an unknown outcome.
func refusedReport(err error) bool {
	for _, e := range []error{catalog.ErrState, catalog.ErrExists, catalog.ErrNotFound, catalog.ErrInvalidArgument, catalog.ErrCorrupt} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// allOpenHereLocked reports whether every task of m is open here.
func (d *Daemon) allOpenHereLocked(m *catalog.Manifest) bool {
	for _, h := range m.Tasks {
		if d.byTask[h.Task] == nil {
			return false
		}
	}
	return len(m.Tasks) > 0
}
