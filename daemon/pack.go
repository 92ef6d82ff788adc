package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/chanstate"
	"github.com/statedhq/stated/tiered"
)

// Packing a checkpoint's small private files (issue 39, as Flink's
// FLIP-306 does): on an object store every file is a billed request, and
// a daemon of many tasks writes a few small files per task and
// checkpoint. The instances write through packingStore; a small file of
// checkpoint N of the job goes into the checkpoint's pack writer (a
// chanstate.Writer, the same mechanism that puts the channel state of
// all tasks here into one object), and its Put returns once the pack is
// durable. The pack is sealed (uploaded) once every task of the job here
// has snapshotted and each of their asynchronous parts is either waiting
// in such a Put or done, or when a waiting Put has lingered
// Config.ChannelStateLinger while a task here has not snapshotted (a
// task that never snapshots must not hold the others back). runSnapshot
// then records in the task's handle where each packed file lies
// (backend.FileRef.Pack), and restores read them through
// backend.PackedStore with ranged reads.

// maxPackObjectBytes bounds one pack object: the pack of a checkpoint is
// one object up to it, so that a checkpoint of the file backend costs one
// PUT (a multipart upload of one request per 16 MiB part on S3, fewer
// than a multipart upload per file). s3store's multipart uploads have at
// most 10,000 parts of 16 MiB (156 GiB); a bigger checkpoint of a job
// here is split into objects of this size.
const maxPackObjectBytes = 64 << 30

// packName is the stem of the pack objects of this daemon, beside its
// channel state objects ("packed-<run>" next to "channels-<run>").
func (d *Daemon) packName() string { return "packed-" + strings.TrimPrefix(d.chanName, "channels-") }

// checkpointPack is what a checkpoint packed so far. Guarded by d.mu.
type checkpointPack struct {
	w *chanstate.Writer
	// files are the packed files by name.
	files map[string]backend.FilePack
	// waiting counts the Puts waiting for the current round's seal.
	waiting int
	round   *packRound
}

// packRound is one seal of a pack: every file appended before it.
type packRound struct {
	done chan struct{}
	err  error
}

// packingStore is the store of an instance of job: Put and PutIfAbsent
// of a small private file of a checkpoint in progress here are packed.
type packingStore struct {
	tiered.Store
	d    *Daemon
	job  string
	kind backend.Kind
}

// Unwrap is the store written to (tiered.Unwrapper: AsAppender sees
// through it).
func (s *packingStore) Unwrap() tiered.Store { return s.Store }

// packingStore returns the store instances of job and kind write to.
// Also with a shared catalog (cluster mode): the pack object is
// registered and counted by the same catalog code the cluster's leader
// hosts (the handles name it, as they name channel state objects), a
// pack holds only this daemon's tasks, and a report waits for the pack
// of its daemon's tasks alone, never for another daemon's.
func (d *Daemon) packingStore(job string, kind backend.Kind) tiered.Store {
	if d.cfg.PackFileBytes < 0 || d.cfg.Store == nil {
		return d.cfg.Store
	}
	return &packingStore{Store: d.cfg.Store, d: d, job: job, kind: kind}
}

func (s *packingStore) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	if ok, err := s.d.packPut(ctx, s, name, r, size, s.Store.Put); ok {
		return err
	}
	return s.Store.Put(ctx, name, r, size)
}

func (s *packingStore) PutIfAbsent(ctx context.Context, name string, r io.Reader, size int64) error {
	// A name of a checkpoint's directory is written once: a packed one
	// cannot exist as an object of its own.
	if ok, err := s.d.packPut(ctx, s, name, r, size, s.Store.PutIfAbsent); ok {
		return err
	}
	return s.Store.PutIfAbsent(ctx, name, r, size)
}

// checkpointOf returns the checkpoint id of name when it is a file in a
// checkpoint directory of job ("<job>/chk-<id>/...").
func checkpointOf(job, name string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, job+"/chk-")
	if !ok {
		return 0, false
	}
	num, _, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(num, 10, 64)
	return id, err == nil && catalog.CheckpointDir(job, id)+"/" == name[:len(job)+len("/chk-")+len(num)+1]
}

// packable says whether a file of an instance of kind is packed: the
// file backend's snapshot files and any changelog manifest (heap
// snapshots live elsewhere, lsm's private files are few next to its
// SSTs and are left alone).
func packable(kind backend.Kind, name string) bool {
	return kind == backend.KindFile || path.Base(name) == "_changelog"
}

// inlined says whether a packable file goes into its task's handle
// instead of an object or a pack: a changelog manifest (a few hundred
// bytes naming the log window) of at most backend.MaxInlineBytes. With
// the changelog a checkpoint's other files are the log's barrier
// segment and the catalog's own objects, so a pack of the tasks'
// manifests would be one PUT of four per checkpoint.
func inlined(name string, size int64) bool {
	return path.Base(name) == "_changelog" && size <= backend.MaxInlineBytes
}

// packPut packs the file name of size bytes from r when it is small, a
// private file of a checkpoint in progress here, and of a kind that is
// packed; ok false leaves it to the store. put is the store's call it
// stands for, which writes an inline file read before the checkpoint
// turned out to have ended.
func (d *Daemon) packPut(ctx context.Context, s *packingStore, name string, r io.Reader, size int64,
	put func(context.Context, string, io.Reader, int64) error) (ok bool, err error) {
	if size > d.cfg.PackFileBytes || !packable(s.kind, name) {
		return false, nil
	}
	id, isCkpt := checkpointOf(s.job, name)
	if !isCkpt {
		return false, nil
	}
	inline := inlined(name, size)
	var data []byte
	if inline {
		data = make([]byte, size)
		if _, err := io.ReadFull(r, data); err != nil {
			return true, fmt.Errorf("daemon: read %s: %w", name, err)
		}
	}
	d.mu.Lock()
	c := d.ckpts[ckptKey{s.job, id}]
	// A completion may already wait for the asynchronous parts.
	if c == nil || (c.status != statusInProgress && c.status != statusCompleting) {
		d.mu.Unlock()
		if inline {
			return true, put(ctx, name, bytes.NewReader(data), size)
		}
		return false, nil
	}
	if inline {
		// The handle carries it into the catalog's manifest, which is
		// written anyway: no object, no PUT, nothing to wait for.
		if c.inline == nil {
			c.inline = map[string][]byte{}
		}
		c.inline[name] = data
		d.mu.Unlock()
		return true, nil
	}
	pk, err := d.packLocked(c)
	d.mu.Unlock()
	if err != nil {
		return true, err
	}
	// Streamed into the pack's spool (a snapshot file may be large).
	ref, err := pk.w.AppendFileFrom(ctx, r, size)
	if err != nil {
		return true, fmt.Errorf("daemon: pack %s: %w", name, err)
	}
	d.mu.Lock()
	pk.files[name] = backend.FilePack{Object: ref.Path, Offset: ref.Offset}
	pk.waiting++
	rd := pk.round
	d.packKickLocked(c)
	d.mu.Unlock()

	// The linger bounds the wait for a task that has not snapshotted (it
	// may never): the pack is sealed without it once no task here has
	// snapshotted for a linger. While tasks keep arriving (a loaded
	// host reaches them one by one, each past the linger after the
	// first) the pack waits for them. Once every task here has
	// snapshotted, each of them comes with its files or finishes
	// (packKickLocked seals then), however long it takes to write them: a
	// big state's files are written seconds apart, and a seal per linger
	// would cut the pack into several objects.
	t := time.NewTimer(d.cfg.ChannelStateLinger)
	defer t.Stop()
	for sealed := false; !sealed; {
		select {
		case <-rd.done:
			sealed = true
		case <-t.C:
			next := d.cfg.ChannelStateLinger
			d.mu.Lock()
			if pk.round == rd && !d.allSnapshottedLocked(c) {
				if quiet := time.Since(c.joined); quiet < next {
					next -= quiet
				} else {
					d.packSealLocked(c)
				}
			}
			d.mu.Unlock()
			t.Reset(next)
		case <-ctx.Done():
			return true, fmt.Errorf("daemon: pack %s: %w", name, ctx.Err())
		}
	}
	if rd.err != nil {
		return true, fmt.Errorf("daemon: pack %s: %w", name, rd.err)
	}
	return true, nil
}

// packLocked returns c's pack, creating it. d.mu is held.
func (d *Daemon) packLocked(c *checkpoint) (*checkpointPack, error) {
	if c.pack != nil {
		return c.pack, nil
	}
	w, err := chanstate.NewWriter(chanstate.WriterOptions{
		Store:          d.cfg.Store,
		Dir:            catalog.CheckpointDir(c.key.job, c.key.id),
		Name:           d.packName(),
		MaxObjectBytes: maxPackObjectBytes,
		SpoolDir:       filepath.Join(d.cfg.DataDir, ChannelsDir),
	})
	if err != nil {
		return nil, err
	}
	c.pack = &checkpointPack{w: w, files: map[string]backend.FilePack{}, round: &packRound{done: make(chan struct{})}}
	return c.pack, nil
}

// packKickLocked seals c's pack when nothing more can join the round:
// every task of the job here snapshotted, and each asynchronous part
// still running waits for this round. d.mu is held.
func (d *Daemon) packKickLocked(c *checkpoint) {
	pk := c.pack
	if pk == nil || pk.waiting == 0 || !d.allSnapshottedLocked(c) {
		return
	}
	running := 0
	for _, ts := range c.tasks {
		if !ts.ran {
			running++
		}
	}
	if pk.waiting >= running {
		d.packSealLocked(c)
	}
}

// packSealLocked uploads the files of the current round in the
// background and starts the next round. d.mu is held.
func (d *Daemon) packSealLocked(c *checkpoint) {
	pk := c.pack
	rd := pk.round
	pk.round = &packRound{done: make(chan struct{})}
	pk.waiting = 0
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		rd.err = pk.w.Seal(c.ctx)
		close(rd.done)
	}()
}

// packedHandle returns h with the files packed for c marked with where
// they lie, at the handle version that holds them (h itself when none
// is).
func (d *Daemon) packedHandle(c *checkpoint, h *backend.Handle) *backend.Handle {
	d.mu.Lock()
	defer d.mu.Unlock()
	pk := c.pack
	if (pk == nil || len(pk.files) == 0) && len(c.inline) == 0 {
		return h
	}
	var files []backend.FileRef
	version := h.Version
	for i, f := range h.Files {
		if f.Shared {
			continue
		}
		if data, ok := c.inline[f.Path]; ok {
			if files == nil {
				files = append([]backend.FileRef(nil), h.Files...)
			}
			files[i].Inline = data
			version = max(version, backend.HandleVersionInline)
			continue
		}
		if pk == nil {
			continue
		}
		fp, ok := pk.files[f.Path]
		if !ok {
			continue
		}
		if files == nil {
			files = append([]backend.FileRef(nil), h.Files...)
		}
		files[i].Pack = &fp
		version = max(version, backend.HandleVersionPacked)
	}
	if files == nil {
		return h
	}
	h2 := *h
	h2.Files = files
	h2.Version = version
	return &h2
}

// closePack lets go of c's pack writer (its spool files); the uploaded
// objects go with the checkpoint's directory.
func (d *Daemon) closePack(c *checkpoint) {
	d.mu.Lock()
	pk := c.pack
	d.mu.Unlock()
	if pk == nil {
		return
	}
	if err := pk.w.Close(); err != nil {
		d.log.Warn("closing the pack writer", "job", c.key.job, "checkpoint", c.key.id, "err", err)
	}
}
