package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/rescale"
	"github.com/statedhq/stated/tiered"
)

// Externally owned instances (OpenParams.External) keep their checkpoint
// files for an engine that owns them, as Flink owns its checkpoints: the
// engine's metadata lists the files, the engine's registry counts the
// shared ones and the engine deletes them. The daemon's catalog has no say:
// nothing of these instances is completed, retained, swept or deleted by
// it, and a snapshot is never a checkpoint of the job in the catalog.
//
// The files go under a root the engine names, inside Config.ExternalDir (a
// directory both reach). The lsm backend's usual rule (reference only the
// files of a confirmed checkpoint, or of the one restored from) holds with
// the engine confirming per instance (ConfirmExternal) instead of a
// job-level completion; ForgetExternal drops what the daemon remembers of
// a checkpoint the engine subsumed or aborted, and never deletes a file.

// DefaultMaxExternalSnapshots bounds the snapshots one externally owned
// instance remembers (neither confirmed nor forgotten): an engine
// confirms or forgets each, and holds few concurrent checkpoints. Past it
// the oldest finished ones are forgotten (their Confirm then fails).
const DefaultMaxExternalSnapshots = 64

// ExternalParams open an instance in the externally owned mode.
type ExternalParams struct {
	// Root is where the instance's checkpoint files go: a directory path
	// relative to Config.ExternalDir, or an absolute one (a URL with an
	// external store) inside it.
	// Shared files go under Root/shared, private ones into
	// Root/chk-<id> as <task>-<name> (no subdirectory: an engine such as
	// Flink deletes a checkpoint's directory without recursion).
	Root string
	// Restore are the handles the engine assigned to the task (from one
	// or several old subtasks, of any job): the instance restores the
	// parts of them in its key-group range, without a catalog lookup.
	// Their file paths are relative to Config.ExternalDir.
	Restore []*backend.Handle
}

// ExternalFile is one file of an externally owned snapshot.
type ExternalFile struct {
	// Path is the file's name relative to Config.ExternalDir (the handle's
	// FileRef.Path); Location is the absolute path the daemon wrote.
	Path     string
	Location string
	Size     int64
	// Shared: later snapshots may reference the file (an SST), so the
	// engine reference-counts it; private files belong to this snapshot
	// alone.
	Shared bool
}

// ExternalSnapshot is the outcome of an externally owned snapshot: the
// daemon's task handle (backend.EncodeHandle of Handle), which the engine
// keeps and passes back at restore, and the handle's files.
type ExternalSnapshot struct {
	Handle *backend.Handle
	Files  []ExternalFile
}

// external is the state of an externally owned instance. Guarded by mu.
type external struct {
	root string // relative to Config.ExternalDir, no trailing slash
	mu   sync.Mutex
	// snaps are the snapshots neither confirmed nor forgotten.
	snaps map[uint64]*extSnap
	// confirmed is the newest confirmed checkpoint (0: none); restored the
	// one restored from (0: none). Either may be the lsm base.
	confirmed uint64
	restored  uint64
	// forgotten are the checkpoints forgotten before their snapshot
	// arrived: a snapshot of one is refused. An engine's forget is a call
	// of its own and may overtake the snapshot's barrier still queued on
	// the batch stream; taken then, the snapshot would write files no
	// engine knows of, and nobody would delete them. At most
	// DefaultMaxExternalSnapshots, the oldest dropped first.
	forgotten map[uint64]bool
}

type extSnap struct {
	id     uint64
	cancel context.CancelFunc
	done   chan struct{}
	res    *ExternalSnapshot // when done without error
	err    error
}

// externalRoot validates root and returns it relative to dir.
func externalRoot(dir, root string) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("%w: the externally owned mode needs the daemon's external directory (Config.ExternalDir, --external-dir), which is not set",
			ErrUnsupported)
	}
	if root == "" {
		return "", fmt.Errorf("%w: an externally owned instance needs a root (the directory its checkpoint files go to)", backend.ErrInvalidArgument)
	}
	if base := strings.TrimSuffix(dir, "/") + "/"; strings.Contains(dir, "://") {
		// An external store's URL: a root under it is taken relative.
		if r, ok := strings.CutPrefix(root, base); ok {
			root = r
		} else if strings.Contains(root, "://") || filepath.IsAbs(root) {
			return "", fmt.Errorf("%w: root %s is not inside the daemon's external store %s", backend.ErrInvalidArgument, root, dir)
		}
	} else if filepath.IsAbs(root) {
		rel, err := filepath.Rel(dir, filepath.Clean(root))
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return "", fmt.Errorf("%w: root %s is not inside the daemon's external directory %s", backend.ErrInvalidArgument, root, dir)
		}
		root = filepath.ToSlash(rel)
	}
	root = strings.TrimSuffix(root, "/")
	if err := backend.ValidatePath(root); err != nil {
		return "", fmt.Errorf("root %q: %w", root, err)
	}
	return root, nil
}

// validateExternal checks p.External against the rest of p.
func (d *Daemon) validateExternal(p *OpenParams) error {
	e := p.External
	var errs []error
	root, err := externalRoot(d.cfg.ExternalDir, e.Root)
	if err != nil {
		errs = append(errs, err)
	}
	e.Root = root
	if p.Kind != backend.KindLSM {
		errs = append(errs, fmt.Errorf("%w: the externally owned mode is for lsm instances (incremental checkpoint files), not %s", backend.ErrInvalidArgument, p.Kind))
	}
	if p.LSM == LSMRemote {
		errs = append(errs, fmt.Errorf("%w: an externally owned instance keeps its SSTs locally (lsm mode local): remote SSTs live in the daemon's store", backend.ErrInvalidArgument))
	}
	if p.Changelog == ChangelogOn {
		errs = append(errs, fmt.Errorf("%w: changelog mode is not available for externally owned instances (its log segments are shared by the daemon's instances and swept by its catalog)", backend.ErrInvalidArgument))
	}
	if p.Restore != nil {
		errs = append(errs, fmt.Errorf("%w: an externally owned instance restores from the handles the engine gives (External.Restore), not from the catalog", backend.ErrInvalidArgument))
	}
	for i, h := range e.Restore {
		if h == nil {
			errs = append(errs, fmt.Errorf("%w: restore handle %d is empty", backend.ErrInvalidArgument, i))
			continue
		}
		switch {
		case h.Backend != backend.KindLSM:
			errs = append(errs, fmt.Errorf("%w: restore handle %d (task %s, checkpoint %d) is a %s handle; an externally owned instance restores lsm handles of its own mode only",
				backend.ErrIncompatible, i, h.Task, h.CheckpointID, h.Backend))
		case h.IsChangelog():
			errs = append(errs, fmt.Errorf("%w: restore handle %d (task %s, checkpoint %d) was written in changelog mode, which externally owned instances do not have",
				backend.ErrIncompatible, i, h.Task, h.CheckpointID))
		case len(h.Channels) > 0:
			errs = append(errs, fmt.Errorf("%w: restore handle %d (task %s, checkpoint %d) holds channel state, which the daemon keeps only for its own checkpoints",
				backend.ErrIncompatible, i, h.Task, h.CheckpointID))
		}
	}
	return errors.Join(errs...)
}

// planExternal plans the restore of an externally owned instance from the
// handles the engine gave, and checks that their files are there.
func (d *Daemon) planExternal(ctx context.Context, p OpenParams) (*rescale.Instance, error) {
	in, err := rescale.PlanAssigned(p.External.Restore, p.MaxParallelism, p.KeyGroups)
	if err != nil {
		return nil, err
	}
	// A missing file would fail the backend's download with a store
	// error; name the file and the handle instead (the engine deleted it,
	// or passed a handle of another directory).
	for _, h := range in.Handles {
		for _, f := range h.Files {
			_, err := d.extStore.Stat(ctx, f.Path)
			if tiered.IsNotFound(err) {
				return nil, fmt.Errorf("%w: file %s of the handle of %s (checkpoint %d) is not in the external directory %s: "+
					"the engine deleted it, or the handle belongs to another directory", backend.ErrNotFound, f.Path, h.Task, h.CheckpointID, d.cfg.ExternalDir)
			}
			if err != nil {
				return nil, fmt.Errorf("file %s of the handle of %s (checkpoint %d): %w", f.Path, h.Task, h.CheckpointID, err)
			}
		}
	}
	return in, nil
}

// fullSnapshotter is an lsm backend's SnapshotFull.
type fullSnapshotter interface {
	SnapshotFull(ctx context.Context, checkpointID uint64) (backend.PendingSnapshot, error)
}

// baseDropper is an lsm backend's DropBase.
type baseDropper interface{ DropBase(id uint64) }

// snapshotExternal is SnapshotWith for an externally owned instance: no
// checkpoint of the job, no catalog; the asynchronous part runs in a
// goroutine the daemon owns, until done or forgotten.
func (d *Daemon) snapshotExternal(ctx context.Context, inst *Instance, id uint64, o SnapshotOptions) (SnapshotResult, error) {
	e := inst.ext
	task := inst.Task
	fail := func(err error) (SnapshotResult, error) {
		return SnapshotResult{}, fmt.Errorf("daemon: snapshot %d of %s: %w", id, task, err)
	}
	e.mu.Lock()
	if e.snaps[id] != nil || id <= e.confirmed || id == e.restored {
		e.mu.Unlock()
		return fail(fmt.Errorf("%w: the instance already snapshotted checkpoint %d (or confirmed a later one)", backend.ErrInvalidArgument, id))
	}
	if e.forgotten[id] {
		e.mu.Unlock()
		return fail(fmt.Errorf("%w: checkpoint %d was forgotten (ForgetSnapshot) before its snapshot arrived; its snapshot would be no engine's",
			backend.ErrInvalidArgument, id))
	}
	d.mu.Lock()
	closing := d.closing
	if !closing {
		d.wg.Add(1)
	}
	d.mu.Unlock()
	if closing {
		e.mu.Unlock()
		return fail(ErrShuttingDown)
	}
	if err := inst.startSnapshot(); err != nil {
		e.mu.Unlock()
		d.wg.Done()
		return SnapshotResult{}, err
	}
	sctx, cancel := context.WithCancel(d.baseCtx)
	s := &extSnap{id: id, cancel: cancel, done: make(chan struct{})}
	e.snaps[id] = s
	e.pruneLocked()
	e.mu.Unlock()

	bi := BackendIndex(inst.Kind)
	t0 := time.Now()
	ops := inst.OperatorState()
	var ps backend.PendingSnapshot
	err := inst.snapshotLocked(func() (err error) {
		if o.Full {
			fs, ok := inst.Backend.(fullSnapshotter)
			if !ok {
				return fmt.Errorf("%w: the %s backend takes no full checkpoint", backend.ErrInvalidArgument, inst.Kind)
			}
			ps, err = fs.SnapshotFull(ctx, id)
			return err
		}
		ps, err = inst.Backend.Snapshot(ctx, id)
		return err
	})
	sync := time.Since(t0)
	d.m.CheckpointSync[bi].Observe(sync)
	if err != nil {
		d.m.SnapshotFailures[bi].Add(1)
		e.mu.Lock()
		delete(e.snaps, id)
		e.mu.Unlock()
		cancel()
		s.err = err
		close(s.done)
		inst.finishSnapshot()
		d.wg.Done()
		return SnapshotResult{Sync: sync}, fmt.Errorf("daemon: snapshot %d of %s: %w", id, task, err)
	}
	go func() {
		defer d.wg.Done()
		defer inst.finishSnapshot()
		defer cancel()
		t1 := time.Now()
		h, err := ps.Run(sctx)
		if err == nil && (h == nil || h.Task != task || h.CheckpointID != id) {
			err = fmt.Errorf("%w: the backend returned a handle for another task or checkpoint", backend.ErrCorrupt)
		}
		async := time.Since(t1)
		d.m.CheckpointAsync[bi].Observe(async)
		if err != nil {
			d.m.SnapshotFailures[bi].Add(1)
			s.err = fmt.Errorf("daemon: snapshot %d of %s: upload: %w", id, task, err)
			d.log.Warn("externally owned snapshot failed", "task", task.String(), "checkpoint", id, "err", err)
		} else {
			h = withOperatorState(h, ops)
			s.res = d.externalResult(h)
			d.m.CheckpointedBytes[bi].Add(uint64(max(0, h.CheckpointedSize)))
			d.m.FullBytes[bi].Add(uint64(max(0, h.FullSize)))
		}
		close(s.done)
	}()
	res := SnapshotResult{Sync: sync}
	if !o.Wait {
		return res, nil
	}
	r, err := d.awaitExternal(ctx, inst, s)
	if err != nil {
		return res, err
	}
	res.Done = true
	res.Async = time.Since(t0) - sync
	res.CheckpointedSize = r.Handle.CheckpointedSize
	res.FullSize = r.Handle.FullSize
	res.Files = len(r.Files)
	res.External = r
	return res, nil
}

// externalResult lists the files of h for the engine.
func (d *Daemon) externalResult(h *backend.Handle) *ExternalSnapshot {
	r := &ExternalSnapshot{Handle: h}
	for _, f := range h.Files {
		r.Files = append(r.Files, ExternalFile{
			Path: f.Path, Location: d.externalLocation(f.Path),
			Size: f.Size, Shared: f.Shared,
		})
	}
	return r
}

// externalLocation is where the engine finds the file at path (relative
// to Config.ExternalDir): a local path, or a URL under an external store's.
func (d *Daemon) externalLocation(path string) string {
	if d.cfg.ExternalStore != nil {
		return strings.TrimSuffix(d.cfg.ExternalDir, "/") + "/" + path
	}
	return filepath.Join(d.cfg.ExternalDir, filepath.FromSlash(path))
}

// awaitExternal waits for s's asynchronous part.
func (d *Daemon) awaitExternal(ctx context.Context, inst *Instance, s *extSnap) (*ExternalSnapshot, error) {
	select {
	case <-s.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("daemon: snapshot %d of %s: waiting for the upload: %w", s.id, inst.Task, ctx.Err())
	}
	if s.err != nil {
		return nil, s.err
	}
	return s.res, nil
}

// AwaitExternal waits for the asynchronous part of snapshot id of an
// externally owned instance and returns its handle and files.
func (d *Daemon) AwaitExternal(ctx context.Context, inst *Instance, id uint64) (*ExternalSnapshot, error) {
	s, err := inst.externalSnap(id, "await")
	if err != nil {
		return nil, err
	}
	return d.awaitExternal(ctx, inst, s)
}

// ConfirmExternal records that the engine completed checkpoint id, which
// inst snapshotted: later snapshots may reference its shared files (the
// engine keeps them while a checkpoint references them). It waits for the
// snapshot's upload, and fails if that failed. Confirming the checkpoint
// restored from, or one older than the last confirmed, is a no-op.
func (d *Daemon) ConfirmExternal(ctx context.Context, inst *Instance, id uint64) error {
	e := inst.ext
	if e == nil {
		return fmt.Errorf("daemon: confirm %d of %s: %w: instance %s is not externally owned (its checkpoints complete with CompleteCheckpoint)",
			id, inst.Task, backend.ErrInvalidArgument, inst.IDString())
	}
	e.mu.Lock()
	if id != 0 && (id == e.restored || id <= e.confirmed) {
		e.mu.Unlock()
		return nil
	}
	e.mu.Unlock()
	s, err := inst.externalSnap(id, "confirm")
	if err != nil {
		return err
	}
	if _, err := d.awaitExternal(ctx, inst, s); err != nil {
		return fmt.Errorf("daemon: confirm %d of %s: %w", id, inst.Task, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.snaps[id] != s {
		return fmt.Errorf("daemon: confirm %d of %s: %w: it was forgotten meanwhile", id, inst.Task, backend.ErrNotFound)
	}
	// The backend keeps the newest confirmed set; older pending ones can
	// never become the base any more, as it forgets them too.
	inst.Backend.NotifyCheckpointComplete(id)
	for k := range e.snaps {
		if k <= id && e.snaps[k].finished() {
			delete(e.snaps, k)
		}
	}
	if id > e.confirmed {
		e.confirmed = id
	}
	return nil
}

// ForgetExternal drops what the daemon remembers of checkpoint id of inst,
// which the engine subsumed or aborted: a running upload stops, and no
// later snapshot references its files (nor, if it is the confirmed or
// restored one, the files of the base). The files are the engine's to
// delete; the daemon deletes nothing. Forgetting an unknown id is a no-op
// (the engine may forget what the daemon pruned or never took).
//
// abandon says the engine never got the snapshot's files: ForgetExternal
// then waits (until ctx ends) for the stopped upload, which deletes what
// it wrote when it stops early (the lsm backend's removeWritten), and
// returns the snapshot if it had finished, for the engine to delete its
// files. Without abandon it returns nil.
func (d *Daemon) ForgetExternal(ctx context.Context, inst *Instance, id uint64, abandon bool) (*ExternalSnapshot, error) {
	e := inst.ext
	if e == nil {
		return nil, fmt.Errorf("daemon: forget %d of %s: %w: instance %s is not externally owned (its checkpoints end with AbortCheckpoint)",
			id, inst.Task, backend.ErrInvalidArgument, inst.IDString())
	}
	if id == 0 {
		return nil, fmt.Errorf("daemon: forget of %s: %w: checkpoint id 0", inst.Task, backend.ErrInvalidArgument)
	}
	e.mu.Lock()
	s := e.snaps[id]
	delete(e.snaps, id)
	dropBase := (id == e.confirmed) || (e.confirmed == 0 && id == e.restored)
	if s == nil && id > e.confirmed && id != e.restored {
		e.forgetAheadLocked(id)
	}
	e.mu.Unlock()
	if s != nil {
		s.cancel()
	}
	inst.Backend.NotifyCheckpointAborted(id)
	if dropBase {
		if b, ok := inst.Backend.(baseDropper); ok {
			b.DropBase(id)
		}
	}
	if !abandon || s == nil {
		return nil, nil
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("daemon: abandon %d of %s: waiting for its upload to stop: %w", id, inst.Task, ctx.Err())
	}
	if s.err != nil {
		// Stopped early or failed: the upload deleted what it wrote.
		return nil, nil
	}
	return s.res, nil
}

// externalSnap returns snapshot id of inst, which must be externally
// owned and remember it.
func (inst *Instance) externalSnap(id uint64, what string) (*extSnap, error) {
	e := inst.ext
	if e == nil {
		return nil, fmt.Errorf("daemon: %s %d of %s: %w: instance %s is not externally owned", what, id, inst.Task, backend.ErrInvalidArgument, inst.IDString())
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.snaps[id]
	if s == nil {
		return nil, fmt.Errorf("daemon: %s %d of %s: %w: instance %s has no snapshot of checkpoint %d (it knows %s)",
			what, id, inst.Task, backend.ErrNotFound, inst.IDString(), id, e.knownLocked())
	}
	return s, nil
}

// knownLocked names the checkpoints e remembers, for errors.
func (e *external) knownLocked() string {
	var ids []uint64
	for id := range e.snaps {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var parts []string
	if len(ids) > 0 {
		parts = append(parts, fmt.Sprintf("unconfirmed snapshots %v", ids))
	}
	if e.confirmed != 0 {
		parts = append(parts, fmt.Sprintf("confirmed checkpoint %d", e.confirmed))
	}
	if e.restored != 0 {
		parts = append(parts, fmt.Sprintf("restored checkpoint %d", e.restored))
	}
	if len(parts) == 0 {
		return "no checkpoint"
	}
	return strings.Join(parts, ", ")
}

// pruneLocked forgets the oldest finished snapshots past
// DefaultMaxExternalSnapshots.
func (e *external) pruneLocked() {
	if len(e.snaps) <= DefaultMaxExternalSnapshots {
		return
	}
	var old []uint64
	for id, s := range e.snaps {
		if s.finished() {
			old = append(old, id)
		}
	}
	sort.Slice(old, func(i, j int) bool { return old[i] < old[j] })
	for _, id := range old[:min(len(old), len(e.snaps)-DefaultMaxExternalSnapshots)] {
		delete(e.snaps, id)
	}
}

// forgetAheadLocked remembers that id was forgotten before its snapshot
// arrived (external.forgotten), dropping those a confirmation made moot
// and, past the bound, the oldest.
func (e *external) forgetAheadLocked(id uint64) {
	if e.forgotten == nil {
		e.forgotten = map[uint64]bool{}
	}
	e.forgotten[id] = true
	for old := range e.forgotten {
		if old <= e.confirmed {
			delete(e.forgotten, old)
		}
	}
	for len(e.forgotten) > DefaultMaxExternalSnapshots {
		delete(e.forgotten, slices.Min(slices.Collect(maps.Keys(e.forgotten))))
	}
}

func (s *extSnap) finished() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// closeExternal stops the running uploads of inst (it closes).
func (inst *Instance) closeExternal() {
	e := inst.ext
	if e == nil {
		return
	}
	e.mu.Lock()
	for _, s := range e.snaps {
		s.cancel()
	}
	e.mu.Unlock()
}
