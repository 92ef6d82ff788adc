package changelog

import (
	"bytes"
	"context"
	"fmt"
	"github.com/statedhq/stated/tiered"
	"path"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/dstl"
	"github.com/statedhq/stated/internal/frame"
)

// savepointSegmentSize is the raw size at which a native savepoint's copy
// of the log window starts another segment file: it bounds the memory the
// copy takes.
const savepointSegmentSize = 32 << 20

// SavepointSnapshot is Snapshot for a native savepoint. It neither claims
// nor consumes a materialization (FLINK-40302): it uses the newest
// uploaded base, or takes one of its own that no checkpoint will use. Its
// handle is self-contained: the log window's blocks are copied out of the
// shared segments into a private file of the snapshot, so a savepoint
// copied elsewhere needs nothing from the log store. The daemon copies the
// handle's files into the savepoint and then tells the backend
// NotifyCheckpointAborted(checkpointID).
func (b *Backend) SavepointSnapshot(ctx context.Context, checkpointID uint64) (backend.PendingSnapshot, error) {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	if b.closed {
		return nil, backend.ErrClosed
	}
	p := &pending{b: b, id: checkpointID, upto: b.lastSeq, states: b.inner.States(), info: b.inner.Info(), savepoint: true}
	// Used, not claimed: the next checkpoint still takes the newest base.
	if err := b.baseFor(ctx, p, false); err != nil {
		return nil, err
	}
	return p, nil
}

// runSavepoint is Run of a SavepointSnapshot once its base is uploaded:
// persist the window, copy its blocks into one file, write the manifest.
func (p *pending) runSavepoint(ctx context.Context, m *materialization) (*backend.Handle, error) {
	b, info := p.b, p.info
	dir := fmt.Sprintf("%s/chk-%d/%s", info.Task.Job, p.id, info.Task.Dir())
	h := &backend.Handle{
		Version: handleVersion(m.h), Backend: info.Kind, Task: info.Task, CheckpointID: p.id,
		KeyGroups: info.KeyGroups, MaxParallelism: info.MaxParallelism, States: p.states,
		Log: &backend.HandleLog{},
	}
	for _, f := range m.h.Files {
		f.Shared = true
		h.Files = append(h.Files, f)
		h.FullSize += f.Size
	}
	mf := manifest{Version: 1, BaseSeq: m.seq}
	if p.upto > m.seq {
		lh, err := b.w.Persist(ctx, b.id, p.upto)
		if err != nil {
			return nil, fmt.Errorf("changelog: savepoint snapshot %d of %s: persist the log: %w", p.id, info.Task, err)
		}
		lh = trim(lh, m.seq+1)
		if lh.From != m.seq+1 || lh.To != p.upto {
			return nil, fmt.Errorf("%w: changelog: savepoint snapshot %d of %s: the log was truncated past its base (window %d..%d, want %d..%d)",
				backend.ErrDeclined, p.id, info.Task, lh.From, lh.To, m.seq+1, p.upto)
		}
		refs, ranges, err := b.copyLog(ctx, lh, dir)
		if err != nil {
			return nil, fmt.Errorf("changelog: savepoint snapshot %d of %s: %w", p.id, info.Task, err)
		}
		addLogFiles(h, &mf, lh, refs, ranges)
	}
	base := *m.h
	base.Files = nil
	mf.Base = &base
	if _, err := putManifest(ctx, b.opts.Store, dir, &mf, h); err != nil {
		return nil, fmt.Errorf("changelog: savepoint snapshot %d of %s: %w", p.id, info.Task, err)
	}
	return h, nil
}

// addLogFiles adds the files of a log window copied out of the shared
// segments (refs, holding ranges) to h and mf (a version 2 manifest).
func addLogFiles(h *backend.Handle, mf *manifest, lh dstl.Handle, refs []backend.FileRef, ranges []dstl.Range) {
	lh.Ranges = ranges
	var idx []int
	for _, ref := range refs {
		idx = append(idx, len(h.Files))
		h.Files = append(h.Files, ref)
		h.FullSize += ref.Size
		h.Log.Bytes += ref.Size
	}
	mf.Version, mf.Log, mf.LogFiles = 2, &lh, idx
}

// putManifest writes mf as dir's manifest in store and adds it to h as its
// last file; it returns the manifest's name.
func putManifest(ctx context.Context, store tiered.Store, dir string, mf *manifest, h *backend.Handle) (string, error) {
	data, err := encodeManifest(mf)
	if err != nil {
		return "", err
	}
	name := dir + "/" + manifestName
	if err := store.Put(ctx, name, bytes.NewReader(data), int64(len(data))); err != nil {
		return "", fmt.Errorf("write %s: %w", name, err)
	}
	h.Files = append(h.Files, backend.FileRef{Path: name, Size: int64(len(data)), CRC32C: frame.Checksum(data)})
	h.FullSize += int64(len(data))
	h.CheckpointedSize = h.FullSize
	return name, nil
}

// copyLog reads the records of lh's window (verifying every block) and
// writes them into segments of their own under dir, each at most about
// savepointSegmentSize, and returns those files and the window's ranges
// in them (one per file; their names are resolved again on restore).
func (b *Backend) copyLog(ctx context.Context, lh dstl.Handle, dir string) ([]backend.FileRef, []dstl.Range, error) {
	return copyLogOut(ctx, b.log, lh, b.opts.Store, dir)
}

// copyLogOut is copyLog of the window lh (of writer lh.WriterID) read
// from log and written to dst.
func copyLogOut(ctx context.Context, log dstl.LogStore, lh dstl.Handle, dst tiered.Store, dir string) ([]backend.FileRef, []dstl.Range, error) {
	id := lh.WriterID
	var refs []backend.FileRef
	var ranges []dstl.Range
	sb := dstl.NewSegmentBuilder(0, true)
	flush := func() error {
		data, idx, err := sb.Encode()
		if err != nil {
			return err
		}
		sb.Reset()
		wi, ok := idx.Writer(id)
		if !ok {
			return fmt.Errorf("the copied segment has no blocks of %s", id)
		}
		name := fmt.Sprintf("%s/_changelog-%d.log", dir, len(refs))
		if err := dst.Put(ctx, name, bytes.NewReader(data), int64(len(data))); err != nil {
			return fmt.Errorf("copy the log window into %s: %w", name, err)
		}
		refs = append(refs, backend.FileRef{Path: name, Size: int64(len(data)), CRC32C: frame.Checksum(data)})
		ranges = append(ranges, dstl.Range{Segment: name, SegmentSize: int64(len(data)), Offset: wi.Offset(), Length: wi.Length(),
			FirstSeq: wi.FirstSeq(), LastSeq: wi.LastSeq()})
		return nil
	}
	err := dstl.Read(ctx, log, lh, dstl.ReadOptions{}, func(r dstl.Record) error {
		if err := sb.Add(id, r.Seq, r.KeyGroup, r.Change); err != nil {
			return err
		}
		if sb.Len() >= savepointSegmentSize {
			return flush()
		}
		return nil
	})
	if err == nil && sb.Len() > 0 {
		err = flush()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("copy the log window: %w", err)
	}
	return refs, ranges, nil
}

// SelfContained returns a handle of the same state as h that needs nothing
// from the log store, for a savepoint copied from a checkpoint (cluster
// mode's savepoint-from-checkpoint): h's log window, read from log, is
// copied into files of their own with a version 2 manifest, as
// SavepointSnapshot writes them. Those are written to dst under the
// directory of h's manifest, and their names are returned in written;
// the new handle lists them (with the same relative paths) after h's
// other files, which the caller copies as they are. A handle whose window
// reads no shared segment is returned unchanged. h's manifest is read
// from src and checked as a restore checks it.
func SelfContained(ctx context.Context, src, log tiered.Store, h *backend.Handle, dst tiered.Store) (nh *backend.Handle, written []string, err error) {
	if !h.IsChangelog() || len(h.Log.Segments) == 0 {
		return h, nil, nil
	}
	rs, err := readRestores(ctx, src, []*backend.Handle{h})
	if err != nil {
		return nil, nil, err
	}
	r := rs[0]
	mi := manifestIndex(h)
	dir := path.Dir(h.Files[mi].Path)
	nh = &backend.Handle{Version: h.Version, Backend: h.Backend, Task: h.Task, CheckpointID: h.CheckpointID,
		KeyGroups: h.KeyGroups, MaxParallelism: h.MaxParallelism, States: h.States, Log: &backend.HandleLog{}}
	for j, f := range h.Files {
		if j != mi {
			nh.Files = append(nh.Files, f)
			nh.FullSize += f.Size
		}
	}
	base := *r.base
	base.Files = nil
	mf := manifest{Version: 1, Base: &base, BaseSeq: r.seq}
	if r.log != nil {
		refs, ranges, err := copyLogOut(ctx, dstl.TieredLogStore{Store: log}, *r.log, dst, dir)
		if err != nil {
			return nil, nil, fmt.Errorf("changelog: self-contained copy of %s: %w", h.Task, err)
		}
		for _, ref := range refs {
			written = append(written, ref.Path)
		}
		addLogFiles(nh, &mf, *r.log, refs, ranges)
	}
	name, err := putManifest(ctx, dst, dir, &mf, nh)
	if err != nil {
		return nil, nil, fmt.Errorf("changelog: self-contained copy of %s: %w", h.Task, err)
	}
	written = append(written, name)
	return nh, written, nil
}
