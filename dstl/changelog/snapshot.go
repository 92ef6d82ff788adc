package changelog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"sync"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/dstl"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/rescale"
	"github.com/statedhq/stated/tiered"
)

// Manifest framing. Frozen.
const (
	manifestMagic = "STCM"
	// manifestVersion is the newest manifest version this build reads and
	// the one it writes. Version 2 added LogFiles (a native savepoint's
	// copied log); version 3 compresses the JSON payload (zstdblock): a
	// window's ranges repeat their segments' prefix, and a manifest of at
	// most backend.MaxInlineBytes travels in its handle instead of being
	// an object of its own, for about six times more checkpoints between
	// materializations.
	manifestVersion = 3
	// manifestCompressed is the first version whose payload is compressed.
	manifestCompressed = 3
	// manifestName is the manifest's file name in the checkpoint's task
	// directory; a handle holding a private file of this name is a
	// changelog handle.
	manifestName = "_changelog"
	// maxManifestSize bounds what a restore reads for a manifest.
	maxManifestSize = 64 << 20
)

// manifest is the JSON payload of a changelog handle's manifest file.
type manifest struct {
	Version int `json:"version"`
	// Base is the materialized canonical handle without its files: those
	// are the changelog handle's files other than the manifest, in order.
	Base *backend.Handle `json:"base"`
	// BaseSeq is the last log seq the base covers.
	BaseSeq uint64 `json:"baseSeq"`
	// Log is the log window after the base; nil when it is empty.
	Log *dstl.Handle `json:"log,omitempty"`
	// LogFiles, when set (version 2), are the indexes in the handle's files
	// of the segments that hold the window, one per range of Log in order:
	// the window's records copied out of the shared segments (a native
	// savepoint, which must need nothing from the log store). The ranges
	// are read from those files, in the store the handle is restored from.
	LogFiles []int `json:"logFiles,omitempty"`
}

// Snapshot implements backend.Backend. The synchronous part records the
// log's end (and, when the instance has no base yet, freezes one); the
// asynchronous part persists the log up to there and writes the manifest.
func (b *Backend) Snapshot(ctx context.Context, checkpointID uint64) (backend.PendingSnapshot, error) {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	if b.closed {
		return nil, backend.ErrClosed
	}
	p := &pending{b: b, id: checkpointID, upto: b.lastSeq, states: b.inner.States(), info: b.inner.Info()}
	// The first checkpoint to reference a base claims it.
	if err := b.baseFor(ctx, p, true); err != nil {
		return nil, err
	}
	return p, nil
}

// baseFor gives p its base and registers it as pending: the newest
// uploaded base (taken from the next checkpoints if claim), else the
// confirmed one, else a new materialization that p's Run uploads. Call
// with wmu held.
func (b *Backend) baseFor(ctx context.Context, p *pending, claim bool) error {
	var m *materialization
	var mp backend.PendingSnapshot
	switch {
	case b.mat != nil:
		m = b.mat
	case b.conf != nil:
		m = b.conf
	default:
		var err error
		if m, mp, err = b.startMaterialization(ctx); err != nil {
			return err
		}
	}
	if err := b.holdBase(ctx, m, p.id); err != nil {
		if mp != nil {
			mp.Release()
		}
		return err
	}
	if m == b.mat && claim {
		b.mat = nil
	}
	p.m, p.upload = m, mp
	b.pend[p] = struct{}{}
	return nil
}

// holdBase has the inner backend hold the files of base m for checkpoint
// id, when its bases need that (backend.BaseHolder: lsm remote mode, whose
// SSTs Pebble deletes once no marker holds them). Call with wmu held: the
// inner backend holds m itself until a newer base is confirmed, which
// takes wmu.
func (b *Backend) holdBase(ctx context.Context, m *materialization, id uint64) error {
	bh, ok := b.inner.(backend.BaseHolder)
	if !ok || !m.native {
		return nil
	}
	if err := bh.HoldBase(ctx, uint64(m.n), id); err != nil {
		return fmt.Errorf("changelog: checkpoint %d of %s: %w", id, b.opts.Task, err)
	}
	return nil
}

// handleVersion is the version of a changelog handle over base h: a
// remote-mode lsm base's table references need version 4.
func handleVersion(h *backend.Handle) int {
	return max(backend.HandleVersionLog, h.Version)
}

type pending struct {
	b    *Backend
	id   uint64
	upto uint64
	m    *materialization
	// savepoint: a native savepoint's snapshot (SavepointSnapshot).
	savepoint bool
	upload    backend.PendingSnapshot // uploads m, when this checkpoint took it
	info      backend.Info
	states    []backend.StateDescriptor
	once      sync.Once
}

// Release frees the base this checkpoint froze, or hands a claimed base
// back to the next checkpoint.
func (p *pending) Release() {
	p.once.Do(func() {
		defer p.b.snapshotDone(p)
		if p.upload != nil {
			p.upload.Release()
			return
		}
		b := p.b
		b.wmu.Lock()
		if p.m != b.conf {
			b.offer(p.m)
		}
		b.wmu.Unlock()
	})
}

func (p *pending) Run(ctx context.Context) (*backend.Handle, error) {
	ran := false
	p.once.Do(func() {
		ran = true
		if p.upload != nil {
			p.b.runMaterialization(ctx, p.m, p.upload)
		}
	})
	if !ran {
		return nil, fmt.Errorf("%w: changelog: snapshot %d already ran or was released", backend.ErrInvalidArgument, p.id)
	}
	defer p.b.snapshotDone(p)
	b, m := p.b, p.m
	select {
	case <-m.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if m.err != nil {
		return nil, fmt.Errorf("changelog: checkpoint %d: %w", p.id, m.err)
	}
	if p.savepoint {
		return p.runSavepoint(ctx, m)
	}
	mf := manifest{Version: 1, BaseSeq: m.seq}
	if p.upto > m.seq {
		if b.beforePersist != nil {
			b.beforePersist(ctx, p.id)
		}
		lh, err := b.w.Persist(ctx, b.id, p.upto)
		if err != nil {
			return nil, fmt.Errorf("changelog: checkpoint %d of %s: persist the log: %w", p.id, b.opts.Task, err)
		}
		lh = trim(lh, m.seq+1)
		if lh.From != m.seq+1 || lh.To != p.upto {
			// A later checkpoint completed and truncated the log past this
			// one's base: this older checkpoint can no longer be written.
			return nil, fmt.Errorf("%w: changelog: checkpoint %d of %s: the log was truncated past its base (window %d..%d, want %d..%d)",
				backend.ErrDeclined, p.id, b.opts.Task, lh.From, lh.To, m.seq+1, p.upto)
		}
		mf.Log = &lh
	}
	base := *m.h
	base.Files = nil
	mf.Base = &base
	data, err := encodeManifest(&mf)
	if err != nil {
		return nil, fmt.Errorf("changelog: %w", err)
	}
	info := p.info
	name := fmt.Sprintf("%s/chk-%d/%s/%s", info.Task.Job, p.id, info.Task.Dir(), manifestName)
	if err := b.opts.Store.Put(ctx, name, bytes.NewReader(data), int64(len(data))); err != nil {
		return nil, fmt.Errorf("changelog: checkpoint %d of %s: write %s: %w", p.id, info.Task, name, err)
	}
	h := &backend.Handle{
		Version: handleVersion(m.h), Backend: info.Kind, Task: info.Task, CheckpointID: p.id,
		KeyGroups: info.KeyGroups, MaxParallelism: info.MaxParallelism, States: p.states,
		Log: &backend.HandleLog{},
	}
	if mf.Log != nil {
		h.Log.Segments = sortedSegments(*mf.Log)
		h.Log.Bytes = mf.Log.Bytes()
	}
	for _, f := range m.h.Files {
		f.Shared = true
		h.Files = append(h.Files, f)
		h.FullSize += f.Size
	}
	if p.upload != nil {
		h.CheckpointedSize = h.FullSize
	}
	h.Files = append(h.Files, backend.FileRef{Path: name, Size: int64(len(data)), CRC32C: frame.Checksum(data)})
	h.FullSize += int64(len(data))
	h.CheckpointedSize += int64(len(data))
	b.wmu.Lock()
	b.used[p.id] = m
	b.wmu.Unlock()
	return h, nil
}

// snapshotDone ends a pending snapshot; the last one to end after Close
// drops the instance's log from the writer.
func (b *Backend) snapshotDone(p *pending) {
	b.wmu.Lock()
	delete(b.pend, p)
	if p.m != nil {
		// A savepoint's or a released snapshot's base that nothing else
		// uses any more.
		b.dropBase(p.m)
	}
	b.truncateLocked()
	forget := b.closed && len(b.pend) == 0
	b.wmu.Unlock()
	if forget {
		b.w.Forget(b.id)
	}
}

// trim narrows a log handle to start at from: Persist's window starts at
// the writer's truncation mark, which may lie before the base.
func trim(h dstl.Handle, from uint64) dstl.Handle {
	if h.From >= from {
		return h
	}
	h.From = from
	var rs []dstl.Range
	for _, r := range h.Ranges {
		if r.LastSeq >= from {
			rs = append(rs, r)
		}
	}
	h.Ranges = rs
	return h
}

// restoreSource is one restored handle: the base the inner backend
// restores and the log to replay after it.
type restoreSource struct {
	h    *backend.Handle
	base *backend.Handle
	seq  uint64
	log  *dstl.Handle
	// ls is where log is read from: nil for the daemon's log store; the
	// restore store for a log copied into the handle's files.
	ls dstl.LogStore
}

// IsChangelog reports whether h was written in changelog mode (it has a
// Log and holds a manifest). Such a handle restores only through Open: the
// daemon must route it here even when changelog mode was switched off
// since.
func IsChangelog(h *backend.Handle) bool { return h.IsChangelog() }

// sortedSegments is the handle's Log.Segments: the log window's segments,
// sorted and distinct.
func sortedSegments(l dstl.Handle) []string {
	segs := slices.Clone(l.Segments())
	slices.Sort(segs)
	return slices.Compact(segs)
}

// manifestIndex is the index of h's manifest in Files, or -1.
func manifestIndex(h *backend.Handle) int {
	for j, f := range h.Files {
		if !f.Shared && path.Base(f.Path) == manifestName {
			return j
		}
	}
	return -1
}

// readRestores reads the manifests of handles; a handle without one is a
// base with no log.
func readRestores(ctx context.Context, store tiered.Store, handles []*backend.Handle) ([]restoreSource, error) {
	out := make([]restoreSource, len(handles))
	for i, h := range handles {
		out[i] = restoreSource{h: h, base: h}
		mi := manifestIndex(h)
		if !h.IsChangelog() {
			if mi >= 0 {
				return nil, fmt.Errorf("%w: handle of %s holds a changelog manifest %s but no log", backend.ErrCorrupt, h.Task, h.Files[mi].Path)
			}
			continue
		}
		if mi < 0 {
			return nil, fmt.Errorf("%w: changelog handle of %s has no manifest (%s) among its files", backend.ErrCorrupt, h.Task, manifestName)
		}
		f := h.Files[mi]
		data, err := tiered.ReadAll(ctx, store, f.Path, maxManifestSize)
		if err != nil {
			if errors.Is(err, tiered.ErrNotFound) {
				return nil, fmt.Errorf("%w: changelog manifest %s of %s: %v", backend.ErrNotFound, f.Path, h.Task, err)
			}
			return nil, fmt.Errorf("changelog: read manifest %s of %s: %w", f.Path, h.Task, err)
		}
		if int64(len(data)) != f.Size || frame.Checksum(data) != f.CRC32C {
			return nil, fmt.Errorf("%w: changelog manifest %s of %s has %d bytes crc %08x, the handle says %d bytes crc %08x",
				backend.ErrCorrupt, f.Path, h.Task, len(data), frame.Checksum(data), f.Size, f.CRC32C)
		}
		mf, err := decodeManifest(data)
		if err != nil {
			return nil, fmt.Errorf("changelog manifest %s: %w", f.Path, err)
		}
		if err := manifestMatchesHandle(h, mf); err != nil {
			return nil, fmt.Errorf("%w: changelog manifest %s: %v", backend.ErrCorrupt, f.Path, err)
		}
		logFiles := map[int]bool{}
		if len(mf.LogFiles) > 0 {
			if mf.Version < 2 || mf.Log == nil || len(mf.LogFiles) != len(mf.Log.Ranges) || len(h.Log.Segments) > 0 {
				return nil, fmt.Errorf("%w: changelog manifest %s: %d log files for a window of %d ranges, in a handle with log segments %v",
					backend.ErrCorrupt, f.Path, len(mf.LogFiles), len(mf.Log.Ranges), h.Log.Segments)
			}
			// The blocks are in the handle's own files, wherever the handle
			// was copied to: read them from the store it is restored from.
			for k, fi := range mf.LogFiles {
				if fi < 0 || fi >= len(h.Files) || fi == mi || h.Files[fi].Shared || logFiles[fi] {
					return nil, fmt.Errorf("%w: changelog manifest %s: log file %d of a handle with %d files",
						backend.ErrCorrupt, f.Path, fi, len(h.Files))
				}
				logFiles[fi] = true
				r := &mf.Log.Ranges[k]
				r.Segment, r.SegmentSize = h.Files[fi].Path, h.Files[fi].Size
			}
			out[i].ls = dstl.TieredLogStore{Store: store}
		}
		base := *mf.Base
		base.Files = nil
		for j, bf := range h.Files {
			if j != mi && !logFiles[j] {
				// Canonical files are private to the base's own handle; a
				// native lsm base's SSTs stay shared, so that the restored
				// instance reuses them in its next base.
				bf.Shared = base.Backend == backend.KindLSM
				base.Files = append(base.Files, bf)
			}
		}
		if err := base.Validate(); err != nil {
			return nil, fmt.Errorf("changelog manifest %s: base: %w", f.Path, err)
		}
		if base.KeyGroups != h.KeyGroups || base.MaxParallelism != h.MaxParallelism {
			return nil, fmt.Errorf("%w: changelog manifest %s: base of %s/%d in a handle of %s/%d",
				backend.ErrCorrupt, f.Path, base.KeyGroups, base.MaxParallelism, h.KeyGroups, h.MaxParallelism)
		}
		if l := mf.Log; l != nil && (l.WriterID == "" || l.From != mf.BaseSeq+1 || l.Empty()) {
			return nil, fmt.Errorf("%w: changelog manifest %s: log window %d..%d does not follow base seq %d",
				backend.ErrCorrupt, f.Path, l.From, l.To, mf.BaseSeq)
		}
		var segs []string
		if mf.Log != nil && len(mf.LogFiles) == 0 {
			segs = sortedSegments(*mf.Log)
		}
		if !slices.Equal(segs, h.Log.Segments) {
			// The catalog keeps the segments the handle lists: a window that
			// reads others could read deleted ones.
			return nil, fmt.Errorf("%w: changelog manifest %s reads log segments %v, but the handle lists %v",
				backend.ErrCorrupt, f.Path, segs, h.Log.Segments)
		}
		out[i].base, out[i].seq, out[i].log = &base, mf.BaseSeq, mf.Log
	}
	return out, nil
}

// replay applies the logs of the restored handles: each key group of the
// instance from the first handle that holds it (rescale.Assign, the rule
// of backend.ValidateRestore), so overlapping and rescaled handles replay
// every key group exactly once.
func (b *Backend) replay(ctx context.Context, rs []restoreSource) error {
	handles := make([]*backend.Handle, len(rs))
	for i, s := range rs {
		handles[i] = s.h
	}
	owners := rescale.Assign(handles, b.opts.KeyGroups)
	defer b.pin.Store(nil)
	for i, s := range rs {
		if s.log == nil {
			continue
		}
		for _, run := range owners.Runs(i) {
			run := run
			ls := b.log
			if s.ls != nil {
				ls = s.ls
			}
			err := dstl.Read(ctx, ls, *s.log, dstl.ReadOptions{KeyGroups: &run}, func(rec dstl.Record) error {
				c, err := DecodeChange(rec.Change)
				if err != nil {
					return fmt.Errorf("changelog: replay of %s seq %d: %w", s.log.WriterID, rec.Seq, err)
				}
				if kg := c.KeyGroup(); kg != rec.KeyGroup && !(c.Op == OpRegister && rec.KeyGroup == dstl.NoKeyGroup) {
					return fmt.Errorf("%w: changelog: replay of %s seq %d: change of key group %d logged under %d",
						backend.ErrCorrupt, s.log.WriterID, rec.Seq, kg, rec.KeyGroup)
				}
				if err := b.apply(c); err != nil {
					return fmt.Errorf("changelog: replay of %s seq %d (op %d): %w", s.log.WriterID, rec.Seq, c.Op, err)
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
	}
	// A state registered after a base is in the log of the handle that
	// registered it, but a handle that owns no key group of this range is
	// not read: register what the handles list (identical ones are no-ops,
	// conflicting ones ErrIncompatible, as for the bases).
	for _, s := range rs {
		for _, d := range s.h.States {
			if err := b.inner.RegisterState(d); err != nil {
				return fmt.Errorf("changelog: restore of %s: state %q: %w", s.h.Task, d.Name, err)
			}
			b.states[d.Name] = d
		}
	}
	return nil
}

// apply replays one change on the inner backend at the change's time.
func (b *Backend) apply(c *Change) error {
	t := timeOf(c.Time)
	b.pin.Store(&t)
	in := b.inner
	var err error
	switch c.Op {
	case OpPut:
		err = in.Put(c.State, c.Key, c.Values[0])
	case OpDelete:
		err = in.Delete(c.State, c.Key)
	case OpListAppend:
		err = in.ListAppend(c.State, c.Key, c.Values...)
	case OpMapPut:
		err = in.MapPut(c.State, c.Key, c.UserKey, c.Value)
	case OpMapRemove:
		err = in.MapRemove(c.State, c.Key, c.UserKey)
	case OpAggregate:
		err = in.AggregateAdd(c.State, c.Key, c.Number)
	case OpTimerAdd:
		err = in.RegisterTimer(c.State, c.Timer)
	case OpTimerDelete:
		err = in.DeleteTimer(c.State, c.Timer)
	case OpRegister:
		if err = in.RegisterState(c.Desc); err == nil {
			b.smu.Lock()
			b.states[c.Desc.Name] = c.Desc
			b.smu.Unlock()
		}
	case OpGet:
		_, _, err = in.Get(c.State, c.Key)
	case OpListGet:
		_, err = in.ListGet(c.State, c.Key)
	case OpMapGet:
		_, _, err = in.MapGet(c.State, c.Key, c.UserKey)
	case OpMapIterate:
		var after []byte
		if c.HasAfter {
			after = c.After
			if after == nil {
				after = []byte{}
			}
		}
		_, _, err = in.MapIterate(c.State, c.Key, after, int(c.Limit))
	case OpAggGet:
		_, _, err = in.AggregateGet(c.State, c.Key)
	default:
		err = fmt.Errorf("%w: unknown op %d", backend.ErrCorrupt, c.Op)
	}
	if err != nil && !errors.Is(err, backend.ErrIncompatible) && !errors.Is(err, backend.ErrCorrupt) {
		// The change applied once: failing now means the log does not
		// match the base it follows.
		err = fmt.Errorf("%w: %v", backend.ErrCorrupt, err)
	}
	return err
}

// Layout is what a changelog handle is made of.
type Layout struct {
	// Base is the materialized handle the inner backend restores (for a
	// handle without a manifest, the handle itself).
	Base *backend.Handle
	// BaseSeq is the last log seq the base covers.
	BaseSeq uint64
	// Log is the log window replayed after the base; nil when empty.
	Log *dstl.Handle
}

// ReadLayout reads and verifies the manifest of h from store (the store
// h's paths are relative to): what a restore would use. The daemon needs
// it to register the log segments a checkpoint references
// (Layout.Log.Segments) with the refcount registry, and to report the log
// bytes of a checkpoint.
func ReadLayout(ctx context.Context, store tiered.Store, h *backend.Handle) (*Layout, error) {
	rs, err := readRestores(ctx, store, []*backend.Handle{h})
	if err != nil {
		return nil, err
	}
	return &Layout{Base: rs[0].base, BaseSeq: rs[0].seq, Log: rs[0].log}, nil
}

// manifestMatchesHandle checks that a changelog manifest describes the log
// window its handle was written with. The handle's checksum of the
// manifest cannot: the manifest is a frame ending in its own CRC32C, and
// the CRC32C of such bytes is the same constant for every frame, so
// another valid manifest of the same size (another checkpoint's, under
// this name) would pass it and restore another window.
func manifestMatchesHandle(h *backend.Handle, mf *manifest) error {
	if len(mf.LogFiles) > 0 {
		// A native savepoint: the window's blocks are the handle's own
		// files, and the handle counts their bytes.
		var n int64
		for _, fi := range mf.LogFiles {
			if fi >= 0 && fi < len(h.Files) {
				n += h.Files[fi].Size
			}
		}
		if n != h.Log.Bytes {
			return fmt.Errorf("its log files hold %d bytes, the handle says %d", n, h.Log.Bytes)
		}
		return nil
	}
	var segs []string
	var n int64
	if mf.Log != nil {
		segs, n = sortedSegments(*mf.Log), mf.Log.Bytes()
	}
	if !slices.Equal(segs, h.Log.Segments) || n != h.Log.Bytes {
		return fmt.Errorf("its log window (%d segments, %d bytes) is not the handle's (%d segments, %d bytes)",
			len(segs), n, len(h.Log.Segments), h.Log.Bytes)
	}
	return nil
}
