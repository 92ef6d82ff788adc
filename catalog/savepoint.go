package catalog

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
)

// SavepointRequest asks for a savepoint of a job.
type SavepointRequest struct {
	// ID names the savepoint (ValidateSavepointID). Default: generated from
	// the job, the checkpoint id and random bytes.
	ID string
	// Job is the job the state belongs to. Required.
	Job string
	// CheckpointID is the checkpoint id the snapshots are taken with; it is
	// recorded in the manifest and passed to CanonicalSnapshot.
	CheckpointID uint64
	// Format is native or canonical. Default FormatNative.
	Format Format

	// Handles (native) are the task handles whose files are copied, from a
	// snapshot taken for the savepoint or from a completed checkpoint.
	Handles []*backend.Handle
	// Source (native) is the store the Handles' files are in: the
	// checkpoint root for file and lsm (the default), the heap backend's
	// in-memory store for heap.
	Source tiered.Store

	// Backends (canonical) are the instances of every task of the job; each
	// must implement backend.CanonicalSnapshotter. Their synchronous parts
	// run one after the other first, then the uploads run in parallel.
	Backends []backend.Backend
}

// TriggerSavepoint takes a savepoint into "savepoints/<id>/" and returns its
// manifest.
//
// Native: every file of every handle is copied (its size and CRC32C are
// checked while copying, so a corrupt source never makes a savepoint) to
// "savepoints/<id>/data/<original name>", and the handles are rewritten to
// those relative paths. Canonical: every backend writes its canonical
// snapshot into the savepoint directory (under "<operator>-<subtask>/").
//
// Either way the directory is self-contained: it references no checkpoint
// file, it can be moved anywhere and restored with LoadSavepoint, deleting it
// never touches a checkpoint, and taking it changes nothing that later
// incremental checkpoints reuse. If it fails, everything it wrote is
// deleted.
func (c *Catalog) TriggerSavepoint(ctx context.Context, req SavepointRequest) (*Manifest, error) {
	if err := ValidateJob(req.Job); err != nil {
		return nil, err
	}
	if req.Format == "" {
		req.Format = FormatNative
	}
	if req.ID == "" {
		req.ID = newSavepointID(req.Job, req.CheckpointID)
	}
	if err := ValidateSavepointID(req.ID); err != nil {
		return nil, err
	}
	switch req.Format {
	case FormatNative:
		if len(req.Handles) == 0 {
			return nil, fmt.Errorf("%w: native savepoint %s of job %s: no task handle", ErrInvalidArgument, req.ID, req.Job)
		}
		for _, h := range req.Handles {
			if h == nil {
				return nil, fmt.Errorf("%w: native savepoint %s: nil handle", ErrInvalidArgument, req.ID)
			}
			if err := h.Validate(); err != nil {
				return nil, fmt.Errorf("catalog: savepoint %s: %w", req.ID, err)
			}
			if h.Task.Job != req.Job {
				return nil, fmt.Errorf("%w: savepoint %s of job %s: handle of task %s", ErrInvalidArgument, req.ID, req.Job, h.Task)
			}
		}
	case FormatCanonical:
		if len(req.Backends) == 0 {
			return nil, fmt.Errorf("%w: canonical savepoint %s of job %s: no backend", ErrInvalidArgument, req.ID, req.Job)
		}
	default:
		return nil, fmt.Errorf("%w: savepoint format %q (want native or canonical)", ErrInvalidArgument, req.Format)
	}
	if err := c.beginSavepoint(ctx, req.ID); err != nil {
		return nil, err
	}
	var handles []*backend.Handle
	var err error
	if req.Format == FormatNative {
		src := req.Source
		if src == nil {
			src = c.store
		}
		handles, err = c.copyNative(ctx, req.ID, req.Handles, src)
	} else {
		handles, err = c.writeCanonical(ctx, req)
	}
	if err == nil {
		var m *Manifest
		if m, err = c.completeSavepoint(ctx, req, handles); err == nil {
			return m, nil
		}
	}
	c.abortSavepoint(ctx, req.ID)
	return nil, err
}

// SavepointFromCheckpoint takes a native savepoint by copying retained
// checkpoint id of job.
func (c *Catalog) SavepointFromCheckpoint(ctx context.Context, savepointID, job string, id uint64) (*Manifest, error) {
	m, ok := c.Checkpoint(job, id)
	if !ok {
		return nil, fmt.Errorf("%w: checkpoint %s is not retained", ErrNotFound, CheckpointDir(job, id))
	}
	return c.TriggerSavepoint(ctx, SavepointRequest{ID: savepointID, Job: job, CheckpointID: id,
		Format: FormatNative, Handles: m.Tasks, Source: c.store})
}

func newSavepointID(job string, id uint64) string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand contract)
	if len(job) > 80 {
		job = job[:80]
	}
	return fmt.Sprintf("%s-%d-%s", job, id, hex.EncodeToString(b[:]))
}

// beginSavepoint reserves id: not known, not in flight, and its directory
// empty (a native copy uses Put, which must never overwrite someone else's
// files).
func (c *Catalog) beginSavepoint(ctx context.Context, id string) error {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.mu.Unlock()
	if _, err := c.exec(command{Op: opSavepointBegin, Savepoint: id}); err != nil {
		return err
	}
	page, err := c.store.List(ctx, SavepointDir(id)+"/", "", 1)
	if err == nil && len(page.Objects) > 0 {
		err = fmt.Errorf("%w: savepoint directory %s is not empty", ErrExists, SavepointDir(id))
	}
	if err != nil {
		if _, ferr := c.exec(command{Op: opSavepointFailed, Savepoint: id}); ferr != nil {
			err = errors.Join(err, ferr)
		}
		return err
	}
	return nil
}

// copyNative copies every file of hs from src into the savepoint and
// returns the rewritten handles.
func (c *Catalog) copyNative(ctx context.Context, id string, hs []*backend.Handle, src tiered.Store) ([]*backend.Handle, error) {
	dst := tiered.WithPrefix(c.store, SavepointDir(id))
	// A packed file is read from its pack, an inline one from its handle,
	// and each becomes a file of its own: a savepoint holds plain files.
	src = backend.PackedStore(src, hs)
	files := map[string]backend.FileRef{}
	written := map[string]bool{} // made in place by SelfContain: not copied
	var out []*backend.Handle
	for _, h := range hs {
		if len(h.Channels) > 0 {
			// Savepoints are aligned (as Flink's): in-flight data would tie
			// a relocatable savepoint to the job's network layout.
			return nil, fmt.Errorf("%w: savepoint %s: task %s wrote channel state for it; savepoints are taken aligned, without in-flight data",
				ErrInvalidArgument, id, h.Task)
		}
		if c.opts.SelfContain != nil && h.Log != nil && len(h.Log.Segments) > 0 {
			nh, names, err := c.opts.SelfContain(ctx, src, c.logStore, h, tiered.WithPrefix(dst, savepointDataDir))
			if err != nil {
				return nil, fmt.Errorf("catalog: savepoint %s: %w", id, err)
			}
			for _, n := range names {
				written[n] = true
			}
			h = nh
		}
		h = h.Clone()
		for i, f := range h.Files {
			if old, ok := files[f.Path]; ok && (old.Size != f.Size || old.CRC32C != f.CRC32C) {
				return nil, fmt.Errorf("%w: savepoint %s: file %s listed twice with different size or checksum", ErrInvalidArgument, id, f.Path)
			}
			files[f.Path] = f
			h.Files[i].Path = savepointDataDir + "/" + f.Path
			h.Files[i].Pack = nil
			h.Files[i].Inline = nil
		}
		out = append(out, h)
	}
	names := make([]string, 0, len(files))
	for p := range files {
		if !written[p] {
			names = append(names, p)
		}
	}
	sort.Strings(names)
	err := c.forEach(ctx, len(names), func(ctx context.Context, i int) error {
		f := files[names[i]]
		return copyVerified(ctx, src, f, dst, savepointDataDir+"/"+f.Path)
	})
	if err != nil {
		return nil, fmt.Errorf("catalog: savepoint %s: %w", id, err)
	}
	return out, nil
}

// copyVerified copies f from src to dst/name, checking size and CRC32C of
// the bytes on the way.
func copyVerified(ctx context.Context, src tiered.Store, f backend.FileRef, dst tiered.Store, name string) error {
	rc, err := src.Get(ctx, f.Path)
	if tiered.IsNotFound(err) {
		return fmt.Errorf("%w: copy %s: %v", ErrNotFound, f.Path, err)
	}
	if err != nil {
		return fmt.Errorf("copy %s: %w", f.Path, err)
	}
	defer rc.Close()
	vr := &verifyingReader{r: rc, name: f.Path, want: f}
	if err := dst.Put(ctx, name, vr, f.Size); err != nil {
		if errors.Is(err, ErrCorrupt) {
			return err
		}
		return fmt.Errorf("copy %s: %w", f.Path, err)
	}
	if !vr.done {
		// The store read exactly Size bytes without reaching the check;
		// finish reading to make sure nothing follows and the CRC holds.
		if _, err := io.Copy(io.Discard, vr); err != nil {
			return err
		}
		if !vr.done {
			return fmt.Errorf("%w: %s is shorter than the %d bytes its handle says", ErrCorrupt, f.Path, f.Size)
		}
	}
	return nil
}

// writeCanonical has every backend write its canonical snapshot into the
// savepoint directory.
func (c *Catalog) writeCanonical(ctx context.Context, req SavepointRequest) ([]*backend.Handle, error) {
	dst := tiered.WithPrefix(c.store, SavepointDir(req.ID))
	pending := make([]backend.PendingSnapshot, 0, len(req.Backends))
	release := func() {
		for _, p := range pending {
			p.Release()
		}
	}
	seen := map[backend.TaskID]bool{}
	for _, b := range req.Backends {
		// CanonicalSnapshotter is optional: a backend without it cannot
		// write a canonical savepoint, and the whole savepoint is refused
		// (ErrInvalidArgument) before anything is written; the caller may
		// take a native savepoint of it instead.
		cs, ok := b.(backend.CanonicalSnapshotter)
		if !ok {
			release()
			return nil, fmt.Errorf("%w: savepoint %s: backend %T has no canonical snapshot", ErrInvalidArgument, req.ID, b)
		}
		task := b.Info().Task
		if task.Job != req.Job || seen[task] {
			release()
			return nil, fmt.Errorf("%w: savepoint %s of job %s: backend of task %s (other job or listed twice)", ErrInvalidArgument, req.ID, req.Job, task)
		}
		seen[task] = true
		p, err := cs.CanonicalSnapshot(ctx, req.CheckpointID, dst, task.Dir())
		if err != nil {
			release()
			return nil, fmt.Errorf("catalog: savepoint %s: task %s: %w", req.ID, task, err)
		}
		pending = append(pending, p)
	}
	out := make([]*backend.Handle, len(pending))
	err := c.forEach(ctx, len(pending), func(ctx context.Context, i int) error {
		h, err := pending[i].Run(ctx)
		if err != nil {
			return err
		}
		out[i] = h
		return nil
	})
	release() // no-op after Run; frees the ones never run after a failure
	if err != nil {
		return nil, fmt.Errorf("catalog: savepoint %s: %w", req.ID, err)
	}
	return out, nil
}

// completeSavepoint writes the savepoint's manifest and registers it.
func (c *Catalog) completeSavepoint(ctx context.Context, req SavepointRequest, hs []*backend.Handle) (*Manifest, error) {
	hs = slices.Clone(hs)
	sortTasks(hs)
	// A savepoint must never list a file it does not hold.
	dst := tiered.WithPrefix(c.store, SavepointDir(req.ID))
	var files []backend.FileRef
	for _, h := range hs {
		if h == nil || h.Task.Job != req.Job {
			return nil, fmt.Errorf("%w: savepoint %s of job %s: a backend returned a handle of another job", ErrInvalidArgument, req.ID, req.Job)
		}
		files = append(files, h.Files...)
	}
	err := c.forEach(ctx, len(files), func(ctx context.Context, i int) error {
		info, err := dst.Stat(ctx, files[i].Path)
		if err != nil {
			return fmt.Errorf("%w: savepoint %s: file %s: %v", ErrNotFound, req.ID, files[i].Path, err)
		}
		if info.Size != files[i].Size {
			return fmt.Errorf("%w: savepoint %s: file %s has %d bytes, its handle says %d", ErrCorrupt, req.ID, files[i].Path, info.Size, files[i].Size)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	now := c.opts.Clock()
	m := &Manifest{Version: ManifestVersion, Kind: KindSavepoint, Job: req.Job, CheckpointID: req.CheckpointID,
		SavepointID: req.ID, Format: req.Format, Started: now, Completed: now, Tasks: hs}
	for _, h := range hs {
		var size int64
		for _, f := range h.Files {
			size += f.Size
		}
		m.CheckpointedSize += size
		m.FullSize += size
	}
	enc, err := EncodeManifest(m)
	if err != nil {
		return nil, err
	}
	name := SavepointDir(req.ID) + "/" + ManifestName
	if err := c.store.PutIfAbsent(ctx, name, bytes.NewReader(enc), int64(len(enc))); err != nil {
		return nil, fmt.Errorf("catalog: savepoint %s: write manifest: %w", req.ID, err)
	}
	out, err := c.exec(command{Op: opSavepointCompleted, Savepoint: req.ID, Manifest: enc, decoded: m})
	if err != nil {
		return nil, err
	}
	return out.restored, nil
}

// abortSavepoint deletes whatever a failed savepoint wrote.
func (c *Catalog) abortSavepoint(ctx context.Context, id string) {
	if _, err := c.exec(command{Op: opSavepointFailed, Savepoint: id}); err != nil {
		c.log.Warn("ending a failed savepoint failed; the next leader ends it", "savepoint", id, "err", err)
	}
	listed, err := c.list(ctx, SavepointDir(id)+"/")
	if err != nil {
		c.log.Warn("clean up of a failed savepoint failed; the sweep will finish it", "savepoint", id, "err", err)
		return
	}
	names := make([]string, len(listed))
	for i, o := range listed {
		names[i] = o.Name
	}
	if _, err := c.deleteUnreferenced(ctx, names); err != nil {
		c.log.Warn("clean up of a failed savepoint failed; the sweep will finish it", "savepoint", id, "err", err)
	}
}

// DeleteSavepoint deletes a savepoint: its manifest first, then its
// directory. Checkpoint files are never touched: a savepoint references
// none.
func (c *Catalog) DeleteSavepoint(ctx context.Context, id string) error {
	if err := ValidateSavepointID(id); err != nil {
		return err
	}
	c.mu.Lock()
	_, ok := c.mu.savepoints[id]
	deleting := c.mu.spDeleting[id]
	if ok && !deleting {
		if c.mu.spDeleting == nil {
			c.mu.spDeleting = map[string]bool{}
		}
		c.mu.spDeleting[id] = true
	}
	c.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: savepoint %s", ErrNotFound, id)
	}
	if deleting {
		return fmt.Errorf("%w: savepoint %s is being deleted by another call", ErrState, id)
	}
	defer func() {
		c.mu.Lock()
		delete(c.mu.spDeleting, id)
		c.mu.Unlock()
	}()
	if err := c.deleteRetried(ctx, []string{SavepointDir(id) + "/" + ManifestName}); err != nil {
		return fmt.Errorf("catalog: delete savepoint %s: %w", id, err)
	}
	if _, err := c.exec(command{Op: opSavepointDeleted, Savepoint: id}); err != nil {
		// Deleted meanwhile by a concurrent call, which cleans up.
		return err
	}
	c.noteDropped(id)
	listed, err := c.list(ctx, SavepointDir(id)+"/")
	if err != nil {
		return fmt.Errorf("catalog: delete savepoint %s: list (the sweep will finish): %w", id, err)
	}
	names := make([]string, len(listed))
	for i, o := range listed {
		names[i] = o.Name
	}
	if _, err := c.deleteUnreferenced(ctx, names); err != nil {
		return fmt.Errorf("catalog: delete savepoint %s (the sweep will finish): %w", id, err)
	}
	return nil
}

// Savepoint returns the manifest of savepoint id.
func (c *Catalog) Savepoint(id string) (*Manifest, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sp, ok := c.mu.savepoints[id]
	if !ok {
		return nil, false
	}
	return cloneManifest(sp.m), true
}

// Savepoints returns the manifests of all savepoints, sorted by id.
func (c *Catalog) Savepoints() []*Manifest {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Manifest, 0, len(c.mu.savepoints))
	for _, sp := range c.mu.savepoints {
		out = append(out, cloneManifest(sp.m))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SavepointID < out[j].SavepointID })
	return out
}

// verifyingReader checks size and CRC32C of what it passes through and
// fails the read that reaches the end if they do not match, so a store's
// Put never commits a corrupt copy.
type verifyingReader struct {
	r    io.Reader
	name string
	want backend.FileRef
	n    int64
	crc  uint32
	done bool
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	if v.n+int64(len(p)) > v.want.Size+1 {
		p = p[:v.want.Size+1-v.n]
	}
	k, err := v.r.Read(p)
	v.crc = crc32Update(v.crc, p[:k])
	v.n += int64(k)
	if v.n > v.want.Size {
		return k, fmt.Errorf("%w: %s is longer than the %d bytes its handle says", ErrCorrupt, v.name, v.want.Size)
	}
	if v.n == v.want.Size && !v.done {
		v.done = true
		if !v.want.SizeOnly && v.crc != v.want.CRC32C {
			return k, fmt.Errorf("%w: %s has crc32c %08x, its handle says %08x", ErrCorrupt, v.name, v.crc, v.want.CRC32C)
		}
	}
	if err == io.EOF && v.n < v.want.Size {
		return k, fmt.Errorf("%w: %s has %d bytes, its handle says %d (truncated)", ErrCorrupt, v.name, v.n, v.want.Size)
	}
	return k, err
}
