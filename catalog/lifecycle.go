package catalog

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/statedhq/stated/backend"
)

// The checkpoint lifecycle as commands to the machine.
//
// A checkpoint goes through the machine as a short series of commands:
// begin, a handle per task, start-complete (the machine checks and fixes
// what the manifest lists), then completed once the effect has written
// the manifest (or complete-failed), or abort; a retained checkpoint that
// retention or DeleteCheckpoint drops ends with discarded once its
// manifest is deleted. Each command carries everything its decision
// depends on, the time included, so the same commands applied in the
// same order to two machines leave them in the same state with the same
// decisions (TestMachineReplaysItsCommands): what a catalog replicated
// through a log needs. A command the machine refuses changes nothing.
//
// Two inputs stay outside: the names being deleted right now
// (deleteGuard.deleting, the deleting node's own effects; a handle that
// lists one is refused), and what the live changelog holds
// (Options.LogHeld, asked by the effects before a delete).

// op is what a command asks of the machine.
type op uint8

const (
	// opBegin: checkpoint ID of Job is in flight from Now.
	opBegin op = iota + 1
	// opAddHandle: Handles[0] is one task's handle for in-flight ID,
	// reported under fencing token Token (0: none). A handle of a task
	// that holds one reported under an older token replaces it: the task
	// was taken over, and its old holder's handle must not complete.
	opAddHandle
	// opStartComplete: Complete of ID begins, with Handles added to the
	// reported ones. The outcome lists what the manifest must hold, or
	// the manifest of ID if it completed already.
	opStartComplete
	// opCompleteFailed: writing the manifest of ID failed; ID stays in
	// flight.
	opCompleteFailed
	// opCompleted: the manifest of ID, Manifest as written, is in the
	// store. The outcome says what to delete: the shared files of the
	// job's former base, and the checkpoints retention drops. It needs
	// no start-complete before it (a replicated catalog completes in one
	// command), and is taken again, deciding nothing, for a checkpoint
	// completed with the same manifest.
	opCompleted
	// opAbort: ID ends without completing, at Now; Status and Reason go
	// into the history (an empty Status: no record, a Release).
	opAbort
	// opStartDiscard: DeleteCheckpoint of retained checkpoint ID.
	opStartDiscard
	// opDiscarded: the manifest of dropped checkpoint ID is deleted. The
	// outcome lists the files nothing references any more.
	opDiscarded
	// opNote: Job's restore skipped the channel state of ID (history).
	opNote
	// opSavepointBegin: savepoint Savepoint is being written.
	opSavepointBegin
	// opSavepointCompleted: its manifest, Manifest as written, is in the
	// store.
	opSavepointCompleted
	// opSavepointFailed: it failed; nothing of it is kept.
	opSavepointFailed
	// opSavepointDeleted: its manifest is deleted. The outcome lists
	// nothing: a savepoint shares no file.
	opSavepointDeleted
	// opRestore: Job restores checkpoint ID of FromJob (0: its latest,
	// AllowFallback past damaged ones) in Mode, at Now. The outcome is the
	// checkpoint, and the jobs whose files record its new owner or pin.
	opRestore
	// opRestoreUndo: writing the job file of opRestore failed; the
	// checkpoint (FromJob, ID) gets back its Owner, Pinned and At.
	opRestoreUndo
	// opRestored: Job's tasks restore checkpoint (FromJob, ID) in Mode:
	// its base moves there (claim) or nowhere (no-claim, which also bars
	// the files of Handles, the checkpoint's, from the job's next
	// checkpoint). The outcome
	// lists the former base's shared files nothing holds any more.
	opRestored
	// opRestoredSavepoint: Job's tasks restore savepoint Savepoint (its
	// base moves nowhere).
	opRestoredSavepoint
	// opLoad: the machine becomes Image, what the first leader of a
	// replicated catalog read from the store (replica.go); refused once
	// loaded.
	opLoad
	// opTakeOver: a new leader's catalog ends the completions and
	// savepoints under way on the one before, which never confirmed them.
	opTakeOver
	// opSavepointAdopted: savepoint Savepoint, whose manifest (Manifest,
	// as stored) another process wrote into the store, joins the
	// catalog as if it had completed here; taken again, deciding
	// nothing, for a savepoint known with the same manifest. Written at
	// version 3 (commandVersion): an older node refuses it as newer.
	opSavepointAdopted
	// opBatch: Batch's commands, in order, stopping at the first refused
	// (those before it stand); the outcome is the last one's. A
	// replicated catalog sends a checkpoint's begin with its first report
	// so, in one log entry, and the begins it holds back with every other
	// command it proposes (Catalog.withHeldBegins). A begin in a batch of
	// a checkpoint that completed meanwhile is a no-op there, not a
	// refusal: such a begin was sent ahead of a command it does not
	// concern.
	opBatch
)

var opNames = [...]string{opBegin: "begin", opAddHandle: "add-handle", opStartComplete: "start-complete",
	opCompleteFailed: "complete-failed", opCompleted: "completed", opAbort: "abort",
	opStartDiscard: "start-discard", opDiscarded: "discarded", opNote: "note",
	opSavepointBegin: "savepoint-begin", opSavepointCompleted: "savepoint-completed",
	opSavepointFailed: "savepoint-failed", opSavepointDeleted: "savepoint-deleted",
	opRestore: "restore", opRestoreUndo: "restore-undo", opRestored: "restored",
	opRestoredSavepoint: "restored-savepoint", opLoad: "load", opTakeOver: "take-over",
	opSavepointAdopted: "savepoint-adopted", opBatch: "batch"}

func (o op) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// command is one decision asked of the machine.
type command struct {
	Op      op
	Job     string
	ID      uint64
	Now     time.Time
	Handles []*backend.Handle
	// Token is the fencing token an add-handle's report was made under
	// (0: none).
	Token uint64
	// Manifest is the manifest as written (opCompleted).
	Manifest []byte
	Status   Status
	Reason   string
	// Savepoint is the savepoint id of the savepoint commands.
	Savepoint string
	// FromJob, Mode and AllowFallback are a restore's (opRestore).
	FromJob       string
	Mode          Mode
	AllowFallback bool
	// Owner, Pinned and At are what opRestoreUndo puts back.
	Owner  string
	Pinned bool
	At     time.Time
	// Image is a machine image (opLoad).
	Image []byte
	// Batch are opBatch's commands (none of them a batch).
	Batch []command

	// decoded is Manifest decoded, when the caller has it already.
	decoded *Manifest
}

// outcome is what the machine decided on a command.
type outcome struct {
	// done is the manifest of a checkpoint that had completed already
	// (opStartComplete: a retried Complete).
	done *Manifest
	// started and handles are what the manifest of a completing
	// checkpoint lists (opStartComplete).
	started time.Time
	handles []*backend.Handle
	// entry is the completed checkpoint (opCompleted) or the one to
	// discard (opStartDiscard).
	entry *entry
	// release are names the command let go of: delete those nothing
	// references (deleteUnreferenced).
	release []string
	// releaseShared are shared files of dropped bases (opCompleted).
	releaseShared []string
	// discard are the checkpoints retention dropped: delete each one's
	// manifest, then apply opDiscarded.
	discard []*entry
	// problems are for the log; they failed nothing.
	problems []error
	// restored is the manifest a restore reads (opRestore), skipped the
	// newer damaged checkpoints it passed over, save the jobs whose job
	// files must record the ownership change (the new owner's first).
	restored *Manifest
	skipped  []DamagedCheckpoint
	save     []string
	// undo is opRestoreUndo of a restore: the entry as it was.
	undo command
	// subs are the outcomes of a batch's commands, in order.
	subs []outcome
}

// apply decides on cmd. A refused command (an error) changed nothing.
func (m *machine) apply(cmd command) (outcome, error) {
	var out outcome
	var err error
	switch cmd.Op {
	case opBegin:
		err = m.begin(cmd.Job, cmd.ID, cmd.Now)
	case opAddHandle:
		if len(cmd.Handles) != 1 {
			return out, fmt.Errorf("%w: add-handle with %d handles", ErrInvalidArgument, len(cmd.Handles))
		}
		err = m.addHandle(cmd.Job, cmd.ID, cmd.Handles[0], cmd.Token)
	case opStartComplete:
		out, err = m.startComplete(cmd.Job, cmd.ID, cmd.Handles)
	case opCompleteFailed:
		err = m.completeFailed(cmd.Job, cmd.ID)
	case opCompleted:
		out, err = m.completed(cmd)
	case opAbort:
		out, err = m.abort(cmd.Job, cmd.ID, cmd.Now, cmd.Status, cmd.Reason)
	case opStartDiscard:
		out, err = m.startDiscard(cmd.Job, cmd.ID)
	case opDiscarded:
		out = m.discarded(cmd.Job, cmd.ID)
	case opNote:
		m.note(cmd.Job, cmd.ID)
	case opSavepointBegin:
		err = m.savepointBegin(cmd.Savepoint)
	case opSavepointCompleted:
		out, err = m.savepointCompleted(cmd)
	case opSavepointFailed:
		delete(m.spInflight, cmd.Savepoint)
	case opSavepointDeleted:
		if _, ok := m.savepoints[cmd.Savepoint]; !ok {
			return out, fmt.Errorf("%w: savepoint %s", ErrNotFound, cmd.Savepoint)
		}
		delete(m.savepoints, cmd.Savepoint)
		m.reg.Unregister(spOwner(cmd.Savepoint))
	case opSavepointAdopted:
		out, err = m.savepointAdopted(cmd)
	case opRestore:
		out, err = m.restore(cmd)
	case opRestoreUndo:
		if e := m.entries[ref{cmd.FromJob, cmd.ID}]; e != nil {
			e.owner, e.pinned, e.adoptedAt = cmd.Owner, cmd.Pinned, cmd.At
		}
	case opRestored:
		out = m.restored(cmd)
	case opRestoredSavepoint:
		out, err = m.restoredSavepoint(cmd.Job, cmd.Savepoint)
	case opLoad:
		err = m.load(cmd.Image)
	case opTakeOver:
		m.takeOver()
	case opBatch:
		var subs []outcome
		for i, sub := range cmd.Batch {
			if sub.Op == opBatch {
				return out, fmt.Errorf("%w: a batch inside a batch", ErrInvalidArgument)
			}
			var o outcome
			if o, err = m.apply(sub); err != nil {
				if sub.Op == opBegin && errors.Is(err, ErrExists) {
					err = nil // completed since: nothing to begin
					subs = append(subs, outcome{})
					continue
				}
				err = fmt.Errorf("command %d of a batch (%s): %w", i, sub.Op, err)
				break
			}
			subs = append(subs, o)
		}
		if err == nil && len(subs) > 0 {
			out = subs[len(subs)-1]
			out.subs = subs
		}
		// Each command taken was observed on its own.
		return out, err
	default:
		return out, fmt.Errorf("%w: unknown catalog command %s", ErrInvalidArgument, cmd.Op)
	}
	if err == nil && m.observe != nil {
		m.observe(cmd)
	}
	return out, err
}

func (m *machine) begin(job string, id uint64, now time.Time) error {
	if m.completedAlready(job, id) {
		return fmt.Errorf("%w: checkpoint %s completed already", ErrExists, CheckpointDir(job, id))
	}
	j := m.job(job)
	if _, ok := j.inflight[id]; !ok {
		j.inflight[id] = &inflight{started: now}
		m.pin(j, id)
	}
	return nil
}

// completedAlready says whether checkpoint id of job completed: it is
// retained, or its history record says so (retention dropped it). A node
// replaying its reports to a new leader begins again the checkpoints it
// did not hear complete (their completion went through another node);
// begun again, a dropped one would be aborted by the next completion,
// and its history would list an acknowledged completion as aborted.
func (m *machine) completedAlready(job string, id uint64) bool {
	if _, ok := m.entries[ref{job, id}]; ok {
		return true
	}
	j, ok := m.jobs[job]
	if !ok {
		return false
	}
	i, found := slices.BinarySearchFunc(j.history, id, func(r Record, id uint64) int { return cmpUint(r.ID, id) })
	return found && j.history[i].Status == StatusCompleted
}

// inflightOf returns in-flight checkpoint id of job, or an error.
func (m *machine) inflightOf(job string, id uint64, hint string) (*jobState, *inflight, error) {
	j, ok := m.jobs[job]
	var inf *inflight
	if ok {
		inf = j.inflight[id]
	}
	if inf == nil {
		return nil, nil, fmt.Errorf("%w: checkpoint %s is not in flight%s", ErrState, CheckpointDir(job, id), hint)
	}
	return j, inf, nil
}

func (m *machine) addHandle(job string, id uint64, h *backend.Handle, token uint64) error {
	j, inf, err := m.inflightOf(job, id, "")
	if err != nil {
		return err
	}
	if inf.completing {
		return fmt.Errorf("%w: checkpoint %s is completing", ErrState, CheckpointDir(job, id))
	}
	if err := m.checkHandle(j, id, h); err != nil {
		return err
	}
	for i, o := range inf.handles {
		if o.Task != h.Task {
			continue
		}
		old := inf.tokens[h.Task]
		switch {
		case sameHandle(o, h) && (token == old || token == 0):
			// The same report again: a forwarded call retried after
			// its answer was lost, or a node replaying its reports to
			// a new leader.
			return nil
		case token != 0 && old != 0 && token > old:
			// The task was taken over (opened again, a newer token)
			// since its old holder reported: the new holder's handle
			// replaces the old one, which must never complete.
			m.guard.add(o, -1)
			h = h.Clone()
			inf.handles[i] = h
			inf.tokens[h.Task] = token
			m.guard.add(h, +1)
			return nil
		case token != 0 && old != 0 && token < old:
			return fmt.Errorf("%w: checkpoint %s: the report of task %s under fencing token %d is older than the one it holds (token %d)",
				ErrFenced, CheckpointDir(job, id), h.Task, token, old)
		}
		return fmt.Errorf("%w: checkpoint %s already has a handle of task %s", ErrExists, CheckpointDir(job, id), h.Task)
	}
	h = h.Clone()
	inf.handles = append(inf.handles, h)
	if token != 0 {
		if inf.tokens == nil {
			inf.tokens = map[backend.TaskID]uint64{}
		}
		inf.tokens[h.Task] = token
	}
	m.guard.add(h, +1)
	return nil
}

func (m *machine) startComplete(job string, id uint64, handles []*backend.Handle) (outcome, error) {
	r := ref{job, id}
	if e, ok := m.entries[r]; ok && !e.discarding {
		return outcome{done: cloneManifest(e.m)}, nil
	}
	j, inf, err := m.inflightOf(job, id, " (BeginCheckpoint first)")
	if err != nil {
		return outcome{}, err
	}
	if inf.completing {
		return outcome{}, fmt.Errorf("%w: checkpoint %s is already completing", ErrState, r)
	}
	seen := map[backend.TaskID]bool{}
	for _, h := range inf.handles {
		seen[h.Task] = true
	}
	var extra []*backend.Handle
	for _, h := range handles {
		if err := m.checkHandle(j, id, h); err != nil {
			return outcome{}, err
		}
		if seen[h.Task] {
			return outcome{}, fmt.Errorf("%w: checkpoint %s has two handles of task %s", ErrInvalidArgument, r, h.Task)
		}
		seen[h.Task] = true
		extra = append(extra, h.Clone())
	}
	if len(inf.handles)+len(extra) == 0 {
		return outcome{}, fmt.Errorf("%w: checkpoint %s has no task handle", ErrInvalidArgument, r)
	}
	for _, h := range extra {
		m.guard.add(h, +1)
	}
	inf.extra = extra
	inf.completing = true
	return outcome{started: inf.started, handles: append(slices.Clone(inf.handles), extra...)}, nil
}

// completeFailed takes back startComplete.
func (m *machine) completeFailed(job string, id uint64) error {
	_, inf, err := m.inflightOf(job, id, "")
	if err != nil {
		return err
	}
	if !inf.completing {
		return fmt.Errorf("%w: checkpoint %s is not completing", ErrState, CheckpointDir(job, id))
	}
	for _, h := range inf.extra {
		m.guard.add(h, -1)
	}
	inf.extra, inf.completing = nil, false
	return nil
}

func (m *machine) completed(cmd command) (outcome, error) {
	r := ref{cmd.Job, cmd.ID}
	if e, ok := m.entries[r]; ok && !e.discarding && bytes.Equal(e.enc, cmd.Manifest) {
		// Completed already with this manifest: two nodes completed it
		// at once, and the first one's command won.
		return outcome{entry: e}, nil
	}
	// A replicated catalog completes in one command, without
	// start-complete (its completing mark is the leader's own).
	j, inf, err := m.inflightOf(cmd.Job, cmd.ID, "")
	if err != nil {
		return outcome{}, err
	}
	mf := cmd.decoded
	if mf == nil {
		if mf, err = DecodeManifest(cmd.Manifest); err != nil {
			return outcome{}, fmt.Errorf("catalog: complete %s: %w", r, err)
		}
	}
	if err := checkManifestPlace(objName{kind: objCheckpointManifest, job: cmd.Job, id: cmd.ID}, mf); err != nil {
		return outcome{}, fmt.Errorf("catalog: complete %s: %w", r, err)
	}
	e := &entry{ref: r, m: mf, enc: cmd.Manifest, owner: cmd.Job}
	if err := m.reg.Register(r.dir(), checkpointObjects(mf, cmd.Manifest)); err != nil {
		return outcome{}, fmt.Errorf("catalog: complete %s: %w", r, err)
	}
	m.entries[r] = e
	delete(j.inflight, cmd.ID)
	for _, hs := range [][]*backend.Handle{inf.handles, inf.extra} {
		for _, h := range hs {
			m.guard.add(h, -1)
		}
	}
	// After the registration: what the checkpoint reuses of its base
	// stays registered.
	unpinned := m.unpin(j, cmd.ID)
	rec := Record{ID: cmd.ID, Status: StatusCompleted, Started: mf.Started, Ended: mf.Completed,
		CheckpointedSize: mf.CheckpointedSize, FullSize: mf.FullSize, Tasks: len(mf.Tasks)}
	rec.Stats = mf.Stats()
	m.record(j, rec)
	out := outcome{entry: e}
	// The base moves as the backends' bases do (lsm's
	// NotifyCheckpointComplete): to the first completion after a restore,
	// then to newer completions only. A backend told of an older
	// completion after a newer one keeps building on the newer, so the
	// job's base must stay there, or a DeleteCheckpoint of the newer one
	// would delete shared files the next checkpoint reuses.
	if j.baseRestored || j.base.job != cmd.Job || cmd.ID > j.base.id {
		out.releaseShared = m.setBase(j, r)
		j.baseRestored = false
	}
	out.releaseShared = append(out.releaseShared, unpinned...)
	out.discard = m.retention(cmd.Job)
	return out, nil
}

func (m *machine) abort(job string, id uint64, now time.Time, why Status, reason string) (outcome, error) {
	r := ref{job, id}
	j := m.job(job)
	completed := m.completedAlready(job, id)
	if completed && j.inflight[id] == nil {
		// Retained, or dropped by retention since: a node that did not
		// hear of the completion (it went through another node) aborts
		// its own copy when a later checkpoint completes through it.
		return outcome{}, fmt.Errorf("%w: checkpoint %s completed; it cannot be aborted", ErrState, r)
	}
	rec := Record{ID: id, Status: why, Started: now, Ended: now, Reason: reason}
	var out outcome
	if inf := j.inflight[id]; inf != nil {
		if inf.completing {
			return outcome{}, fmt.Errorf("%w: checkpoint %s is completing", ErrState, r)
		}
		for _, h := range inf.handles {
			// The log segments its handles read: the live log may have
			// let go of them while this checkpoint protected them, and
			// then nothing else would delete them before the sweep.
			if h.Log != nil {
				out.release = append(out.release, h.Log.Segments...)
			}
			// Remote-mode lsm SSTs the attempt marked: released now
			// (their markers of this checkpoint go) rather than at the
			// sweep.
			for _, f := range h.Files {
				if f.Table != nil && isRemoteLSM(f.Path) {
					out.release = append(out.release, f.Path)
				}
			}
			m.guard.add(h, -1)
			rec.CheckpointedSize += h.CheckpointedSize
			rec.FullSize += h.FullSize
		}
		rec.Started = inf.started
		rec.Tasks = len(inf.handles)
		delete(j.inflight, id)
		out.release = append(out.release, m.unpin(j, id)...)
	}
	if why != "" && !completed {
		m.record(j, rec)
	}
	return out, nil
}

func (m *machine) startDiscard(job string, id uint64) (outcome, error) {
	r := ref{job, id}
	e, ok := m.entries[r]
	if !ok || e.discarding {
		return outcome{}, fmt.Errorf("%w: checkpoint %s is not retained", ErrNotFound, r)
	}
	if e.owner != job {
		return outcome{}, fmt.Errorf("%w: checkpoint %s belongs to job %s (claimed)", ErrState, r, e.owner)
	}
	e.discarding = true
	return outcome{entry: e}, nil
}

// discarded drops checkpoint id of job, whose manifest is gone. Its
// files that nothing references any more are released, but shared ones
// while a job that may build on it has a checkpoint in flight (base.go).
func (m *machine) discarded(job string, id uint64) outcome {
	r := ref{job, id}
	e := m.entries[r]
	if e == nil || !e.discarding {
		// Discarded already (a sweep's retry and a completion's
		// retention may race to it), or never dropped.
		return outcome{}
	}
	delete(m.entries, r)
	// Jobs that build on e keep its shared files (base.go) before the
	// registration that protected them goes.
	deferShared, problems := m.dropBase(e)
	dropped := m.reg.Unregister(r.dir())
	out := outcome{problems: problems}
	if !deferShared {
		for _, o := range dropped {
			out.release = append(out.release, o.Path)
		}
	}
	return out
}

// note marks in job's history that a restore skipped the channel state
// of checkpoint id.
func (m *machine) note(job string, id uint64) {
	if j, ok := m.jobs[job]; ok {
		for i := range j.history {
			if j.history[i].ID == id {
				j.history[i].WithoutChannelState = true
			}
		}
	}
}

func (m *machine) savepointBegin(id string) error {
	if _, ok := m.savepoints[id]; ok || m.spInflight[id] {
		return fmt.Errorf("%w: savepoint %s", ErrExists, id)
	}
	m.spInflight[id] = true
	return nil
}

func (m *machine) savepointCompleted(cmd command) (outcome, error) {
	if !m.spInflight[cmd.Savepoint] {
		return outcome{}, fmt.Errorf("%w: savepoint %s is not being written", ErrState, cmd.Savepoint)
	}
	mf := cmd.decoded
	if mf == nil {
		var err error
		if mf, err = DecodeManifest(cmd.Manifest); err != nil {
			return outcome{}, fmt.Errorf("catalog: savepoint %s: %w", cmd.Savepoint, err)
		}
	}
	if err := checkManifestPlace(objName{kind: objSavepointManifest, sp: cmd.Savepoint}, mf); err != nil {
		return outcome{}, fmt.Errorf("catalog: savepoint %s: %w", cmd.Savepoint, err)
	}
	if err := m.reg.Register(spOwner(cmd.Savepoint), savepointObjects(mf, cmd.Manifest)); err != nil {
		return outcome{}, fmt.Errorf("catalog: savepoint %s: %w", cmd.Savepoint, err)
	}
	m.savepoints[cmd.Savepoint] = &spEntry{m: mf, enc: cmd.Manifest}
	delete(m.spInflight, cmd.Savepoint)
	return outcome{restored: cloneManifest(mf)}, nil
}

// savepointAdopted registers a savepoint another process wrote
// (Catalog.adoptSavepoint read its manifest from the store), exactly as
// Open registers the savepoints it finds. It refuses a savepoint this
// catalog is writing, one known with another manifest, and one with an
// object a delete of this node is removing right now (the delete checked
// before the savepoint was known: the object may be gone).
func (m *machine) savepointAdopted(cmd command) (outcome, error) {
	id := cmd.Savepoint
	if sp, ok := m.savepoints[id]; ok {
		if !bytes.Equal(sp.enc, cmd.Manifest) {
			return outcome{}, fmt.Errorf("%w: savepoint %s is in the catalog with another manifest", ErrExists, id)
		}
		return outcome{restored: cloneManifest(sp.m)}, nil
	}
	if m.spInflight[id] {
		return outcome{}, fmt.Errorf("%w: savepoint %s is being written by this catalog", ErrState, id)
	}
	mf := cmd.decoded
	if mf == nil {
		var err error
		if mf, err = DecodeManifest(cmd.Manifest); err != nil {
			return outcome{}, fmt.Errorf("catalog: adopt savepoint %s: %w", id, err)
		}
	}
	if err := checkManifestPlace(objName{kind: objSavepointManifest, sp: id}, mf); err != nil {
		return outcome{}, fmt.Errorf("catalog: adopt savepoint %s: %w", id, err)
	}
	objs := savepointObjects(mf, cmd.Manifest)
	for _, o := range objs {
		if m.guard.deleting[o.Path] {
			return outcome{}, fmt.Errorf("%w: savepoint %s: %s is being deleted as unreferenced; it cannot be adopted",
				ErrNotFound, id, o.Path)
		}
	}
	if err := m.reg.Register(spOwner(id), objs); err != nil {
		return outcome{}, fmt.Errorf("catalog: adopt savepoint %s: %w", id, err)
	}
	m.savepoints[id] = &spEntry{m: mf, enc: cmd.Manifest}
	delete(m.damagedSavepoints, id)
	return outcome{restored: cloneManifest(mf)}, nil
}

// restore picks the checkpoint a restore reads and changes its owner or
// pin as the mode says.
func (m *machine) restore(cmd command) (outcome, error) {
	// A damaged job file may have lost a pin or an adoption: which
	// checkpoint is the job's latest, and who may delete it, is unknown.
	for _, job := range []string{cmd.Job, cmd.FromJob} {
		if j := m.jobs[job]; j != nil && j.degraded {
			return outcome{}, jobFileErr(j)
		}
	}
	var e *entry
	var skipped []DamagedCheckpoint
	if cmd.ID == 0 {
		if owned := m.owned(cmd.FromJob); len(owned) > 0 {
			e = owned[len(owned)-1]
		}
		skipped = m.newerDamaged(cmd.FromJob, e)
		if len(skipped) > 0 && !cmd.AllowFallback {
			return outcome{}, latestDamagedErr(cmd.FromJob, skipped, e)
		}
	} else if x, ok := m.entries[ref{cmd.FromJob, cmd.ID}]; ok && !x.discarding {
		e = x
	} else if d, ok := m.damaged[ref{cmd.FromJob, cmd.ID}]; ok {
		return outcome{}, damagedErr(d)
	}
	if e == nil {
		if cmd.ID == 0 {
			if len(skipped) > 0 {
				return outcome{}, latestDamagedErr(cmd.FromJob, skipped, nil)
			}
			return outcome{}, fmt.Errorf("%w: job %s has no retained checkpoint", ErrNotFound, cmd.FromJob)
		}
		return outcome{}, fmt.Errorf("%w: checkpoint %s is not retained", ErrNotFound, CheckpointDir(cmd.FromJob, cmd.ID))
	}
	out := outcome{entry: e, restored: cloneManifest(e.m), skipped: skipped,
		undo: command{Op: opRestoreUndo, FromJob: e.ref.job, ID: e.ref.id, Owner: e.owner, Pinned: e.pinned, At: e.adoptedAt}}
	switch prevOwner := e.owner; {
	case cmd.Mode == ModeClaim && e.owner != cmd.Job:
		e.owner, e.pinned, e.adoptedAt = cmd.Job, false, cmd.Now
		if e.ref.job == cmd.Job {
			e.adoptedAt = time.Time{}
		}
		// The new owner's file first: if the second write is lost, the
		// newest adoption wins on Open.
		out.save = []string{cmd.Job, prevOwner}
	case cmd.Mode == ModeClaim && e.pinned:
		e.pinned = false
		out.save = []string{cmd.Job}
	case cmd.Mode == ModeNoClaim && e.owner == cmd.Job && !e.pinned:
		e.pinned = true
		out.save = []string{cmd.Job}
	}
	m.job(cmd.Job)
	return out, nil
}

// restored moves Job's base to the restored checkpoint (claim) or nowhere
// (no-claim).
func (m *machine) restored(cmd command) outcome {
	j := m.job(cmd.Job)
	j.noClaim, j.noClaimFrom = nil, ""
	base := ref{cmd.FromJob, cmd.ID}
	if cmd.Mode == ModeNoClaim {
		// The tasks may reuse nothing of the checkpoint: no base.
		base = ref{}
		dir := CheckpointDir(cmd.FromJob, cmd.ID)
		j.noClaim = map[string]string{}
		j.noClaimFrom = dir
		for _, h := range cmd.Handles {
			for _, f := range h.Files {
				j.noClaim[f.Path] = dir
			}
		}
	}
	out := outcome{release: m.setBase(j, base)}
	j.baseRestored = true
	return out
}

func (m *machine) restoredSavepoint(job, id string) (outcome, error) {
	sp, ok := m.savepoints[id]
	if !ok {
		if err := m.damagedSavepoints[id]; err != nil {
			return outcome{}, err
		}
		return outcome{}, fmt.Errorf("%w: savepoint %s", ErrNotFound, id)
	}
	j := m.job(job)
	// Savepoint files live under savepoints/, which Complete refuses
	// anyway; a restore replaces any earlier no-claim source, and the
	// tasks build on no checkpoint.
	j.noClaim, j.noClaimFrom = nil, ""
	out := outcome{release: m.setBase(j, ref{}), restored: cloneManifest(sp.m)}
	j.baseRestored = true
	return out, nil
}

func (m *machine) load(img []byte) error {
	if m.loaded {
		return fmt.Errorf("%w: the catalog is loaded already", ErrExists)
	}
	n, err := restoreMachine(img, m.retain, m.maxHistory)
	if err != nil {
		return err
	}
	n.observe, n.loaded = m.observe, true
	*m = n
	return nil
}

// takeOver ends every completion and savepoint under way: their callers
// were never told they succeeded. A completing checkpoint stays in
// flight with the handles reported for it.
func (m *machine) takeOver() {
	for _, j := range m.jobs {
		for _, inf := range j.inflight {
			if inf.completing {
				for _, h := range inf.extra {
					m.guard.add(h, -1)
				}
				inf.extra, inf.completing = nil, false
			}
		}
	}
	clear(m.spInflight)
}
