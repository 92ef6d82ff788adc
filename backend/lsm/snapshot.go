package lsm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
)

// Snapshot implements backend.Backend. The synchronous part flushes the
// memtable (the WAL is off, so unflushed writes exist nowhere else) and
// takes a Pebble checkpoint: hard links that freeze the current SSTs, which
// Run uploads while the task keeps writing. In remote mode it hands the
// SSTs over instead (remotesnap.go).
func (b *Backend) Snapshot(ctx context.Context, checkpointID uint64) (backend.PendingSnapshot, error) {
	return b.mode.snapshot(ctx, checkpointID)
}

// BaseSnapshot implements backend.BaseSnapshotter: an incremental
// snapshot whose private files (MANIFEST, OPTIONS) go under dir; its SSTs
// are shared files like a checkpoint's, reused by later ones once id is
// confirmed. In remote mode it is a hand-off held by the instance
// (remotebase.go), with no private files.
func (b *Backend) BaseSnapshot(ctx context.Context, id uint64, dir string) (backend.PendingSnapshot, error) {
	if err := backend.ValidatePath(dir); err != nil {
		return nil, fmt.Errorf("lsm: base snapshot %d of %s: %w", id, b.opts.Task, err)
	}
	return b.mode.baseSnapshot(ctx, id, dir)
}

// SnapshotFull is Snapshot that references no file of an earlier
// checkpoint, confirmed or restored from: every file is uploaded anew, so
// the checkpoint shares nothing with older ones (an engine's first
// checkpoint after a no-claim restore, Flink's FULL_CHECKPOINT). Once
// confirmed, it is the base of later incremental checkpoints as any
// other. Local mode only (ErrInvalidArgument in remote mode, whose SSTs are
// in the store already).
func (b *Backend) SnapshotFull(ctx context.Context, checkpointID uint64) (backend.PendingSnapshot, error) {
	if b.lo.Remote != nil {
		return nil, fmt.Errorf("lsm: full checkpoint %d of %s: %w: remote mode references its SSTs in place", checkpointID, b.opts.Task, backend.ErrInvalidArgument)
	}
	ps, err := b.mode.snapshot(ctx, checkpointID)
	if err != nil {
		return nil, err
	}
	ps.(*checkpointSnapshot).full = true
	return ps, nil
}

// DropBase makes later checkpoints reference no file of checkpoint id
// when it is the base (the last confirmed, or the one restored from while
// none is confirmed): its owner (an engine that owns the files) is about
// to delete them. Checkpoints confirmed later become the base as usual; one
// confirmed before is never the base again. When a later checkpoint is the
// base already, nothing changes: an engine confirms n and forgets n-1 at
// once (Flink's completion notification carries the subsumption), and the
// forget of n-1, decided while n-1 was still the base, must not drop n's
// files from the base once n's confirmation won the race.
func (b *Backend) DropBase(id uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inc.completed && b.inc.last != id {
		return
	}
	b.inc.base = nil
}

// objectPrefix is Options.ObjectPrefix or its default.
func (b *Backend) objectPrefix() string {
	if b.lo.ObjectPrefix != "" {
		return b.lo.ObjectPrefix
	}
	return b.opts.Task.Job + "/"
}

// snapshot is Snapshot with the object-name prefix of the private files.
func (b *Backend) snapshot(ctx context.Context, checkpointID uint64, privatePrefix string) (backend.PendingSnapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lsm: checkpoint %d of %s: %w", checkpointID, b.opts.Task, err)
	}
	var p *checkpointSnapshot
	err := b.Exclusive(func(states []backend.StateDescriptor) error {
		b.mu.Lock()
		b.seq++
		seq := b.seq
		b.mu.Unlock()
		fs := b.lo.FS
		dir := fs.PathJoin(b.lo.Dir, "chk", fmt.Sprintf("%d-%d", checkpointID, seq))
		if err := b.db.Flush(); err != nil {
			return fmt.Errorf("lsm: checkpoint %d of %s: flush: %w", checkpointID, b.opts.Task, err)
		}
		if err := fs.MkdirAll(fs.PathDir(dir), 0o755); err != nil {
			return fmt.Errorf("lsm: checkpoint %d of %s: %w", checkpointID, b.opts.Task, err)
		}
		if err := b.db.Checkpoint(dir); err != nil {
			return fmt.Errorf("lsm: checkpoint %d of %s: pebble checkpoint into %s: %w", checkpointID, b.opts.Task, dir, err)
		}
		p = &checkpointSnapshot{b: b, id: checkpointID, dir: dir, states: states, privatePrefix: privatePrefix}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// checkpointSnapshot is the asynchronous part of an incremental checkpoint.
type checkpointSnapshot struct {
	b      *Backend
	id     uint64
	dir    string
	states []backend.StateDescriptor
	// privatePrefix is where the private files go: the checkpoint's
	// directory, or a changelog base's.
	privatePrefix string
	used          atomic.Bool // Run or Release happened
	// full: reference no earlier file (SnapshotFull).
	full bool
}

// Release implements backend.PendingSnapshot.
func (p *checkpointSnapshot) Release() {
	if p.used.CompareAndSwap(false, true) {
		_ = p.b.lo.FS.RemoveAll(p.dir)
	}
}

// isShared reports whether a local file of a checkpoint is immutable data
// that later checkpoints may reference: SSTs and blob files. Everything
// else (MANIFEST, OPTIONS, markers) describes this checkpoint only.
func isShared(name string) bool {
	return isSST(name) || strings.HasSuffix(name, ".blob")
}

// isSST reports whether a local file is an SST (the files that hold keys
// and get key-group bounds in the handle).
func isSST(name string) bool { return strings.HasSuffix(name, ".sst") }

// Run implements backend.PendingSnapshot.
func (p *checkpointSnapshot) Run(ctx context.Context) (*backend.Handle, error) {
	b := p.b
	if !p.used.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("lsm: checkpoint %d of %s: %w: snapshot already run or released",
			p.id, b.opts.Task, backend.ErrInvalidArgument)
	}
	fs := b.lo.FS
	defer func() { _ = fs.RemoveAll(p.dir) }()

	b.mu.Lock()
	base := b.inc.base
	if p.full {
		base = nil
	}
	b.inc.running[p.id]++
	b.mu.Unlock()
	var set fileSet
	defer func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		aborted := b.inc.aborted[p.id]
		if b.inc.running[p.id]--; b.inc.running[p.id] == 0 {
			delete(b.inc.running, p.id)
			delete(b.inc.aborted, p.id)
		}
		if set != nil && !aborted && (!b.inc.completed || p.id > b.inc.last) {
			b.inc.done[p.id] = set
		}
	}()

	h, err := p.upload(ctx, base)
	if err != nil {
		return nil, err
	}
	set = fileSet{}
	for _, f := range h.Files {
		if f.Shared {
			set[f.LocalName] = f
		}
	}
	return h, nil
}

func (p *checkpointSnapshot) upload(ctx context.Context, base fileSet) (*backend.Handle, error) {
	b := p.b
	fs := b.lo.FS
	task := b.opts.Task
	fail := func(format string, args ...any) error {
		return fmt.Errorf("lsm: checkpoint %d of %s: "+format, append([]any{p.id, task}, args...)...)
	}
	names, err := fs.List(p.dir)
	if err != nil {
		return nil, fail("list %s: %w", p.dir, err)
	}
	sort.Strings(names)
	privatePrefix := p.privatePrefix
	files := make([]backend.FileRef, 0, len(names))
	// todo are the files to upload; bounds the referenced SSTs whose refs
	// have no key-group bounds yet (handles written before they existed).
	var todo, bounds []int
	for _, name := range names {
		info, err := fs.Stat(fs.PathJoin(p.dir, name))
		if err != nil {
			return nil, fail("stat %s: %w", name, err)
		}
		if info.IsDir() {
			return nil, fail("unexpected directory %s in the Pebble checkpoint", name)
		}
		shared := isShared(name)
		if shared {
			// Same local name in the same store lineage means the same
			// immutable file (Pebble never reuses file numbers); the size
			// check is a cheap guard on top.
			if ref, ok := base[name]; ok && ref.Size == info.Size() {
				if ref.KeyGroupBounds == nil && isSST(name) {
					bounds = append(bounds, len(files))
				}
				files = append(files, ref)
				continue
			}
		}
		ref := backend.FileRef{LocalName: name, Size: info.Size(), Shared: shared}
		if shared {
			id, err := randomID()
			if err != nil {
				return nil, fail("%w", err)
			}
			ref.Path = b.objectPrefix() + "shared/" + id + "-" + name
		} else {
			ref.Path = privatePrefix + name
		}
		todo = append(todo, len(files))
		files = append(files, ref)
	}
	ro := b.pebbleOptions(true).MakeReaderOptions()
	work := append(append([]int(nil), todo...), bounds...)
	err = parallel(ctx, b.lo.UploadConcurrency, len(work), func(ctx context.Context, i int) error {
		f := &files[work[i]]
		if i < len(todo) {
			if err := p.uploadFile(ctx, f); err != nil {
				return err
			}
		}
		ref, err := fileBounds(ctx, fs, fs.PathJoin(p.dir, f.LocalName), *f, ro)
		if err != nil {
			return fail("%w", err)
		}
		*f = ref
		return nil
	})
	if err != nil {
		return nil, p.removeWritten(err, files, todo)
	}
	h := &backend.Handle{
		Version:        backend.HandleVersionBase,
		Backend:        backend.KindLSM,
		Task:           task,
		CheckpointID:   p.id,
		KeyGroups:      b.opts.KeyGroups,
		MaxParallelism: b.opts.MaxParallelism,
		States:         p.states,
		Files:          files,
	}
	for _, f := range files {
		h.FullSize += f.Size
	}
	for _, i := range todo {
		h.CheckpointedSize += files[i].Size
	}
	if err := h.Validate(); err != nil {
		return nil, fail("built an invalid handle: %w", err)
	}
	return h, nil
}

// removeWritten deletes the files a failed upload was to write (todo:
// their indexes in files), when no catalog of the daemon will: with an
// ObjectPrefix the files belong to an engine that learns of a snapshot's
// files only from its handle, which a failed upload never returns, so
// whatever reached the store would stay there for good. The names are
// this snapshot's own (fresh random shared names, this checkpoint's
// private directory), never a reused file's. Missing ones (not uploaded
// yet) are success. The deletes run even when ctx was cancelled (the
// upload's own failure), within cleanupTimeout; err, which the caller
// returns, names any file left behind. With the catalog's layout its
// orphan sweep removes them after --gc-grace, as for every failed upload.
func (p *checkpointSnapshot) removeWritten(err error, files []backend.FileRef, todo []int) error {
	if p.b.lo.ObjectPrefix == "" || len(todo) == 0 {
		return err
	}
	names := make([]string, 0, len(todo))
	for _, i := range todo {
		names = append(names, files[i].Path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if derr := p.b.opts.Store.DeleteBatch(ctx, names); derr != nil {
		return fmt.Errorf("%w (and the files it wrote could not all be deleted: %v)", err, derr)
	}
	return err
}

// cleanupTimeout bounds removeWritten's deletes.
const cleanupTimeout = 30 * time.Second

// uploadFile streams one local file to the store and fills in its CRC32C.
// Shared names are unique, so they are written with PutIfAbsent: a
// collision is an error, never an overwrite of another checkpoint's file.
//
// A store that can link a local file (a checkpoint directory on the same
// file system, tiered.FilePuts) gets a hard link of the checkpoint's file
// instead of a copy: the copy was 7% of the daemon's CPU in the 1 GiB
// Flink benchmark, whose checkpoints go to a local directory every second.
// Only shared files (tables: immutable, and on disk, where the private
// metadata files are in memory, metaMemFS), and only when the instance's
// files are on the operating system's file system (diskFS is vfs.Default);
// otherwise, or when the link cannot be made, the file is streamed.
func (p *checkpointSnapshot) uploadFile(ctx context.Context, ref *backend.FileRef) error {
	b := p.b
	fs := b.lo.FS
	if fp, ok := tiered.AsFilePuts(b.opts.Store); ok && ref.Shared && b.diskFS == vfs.Default {
		size, crc, err := fp.PutFile(ctx, ref.Path, b.diskFS.PathJoin(p.dir, ref.LocalName), true)
		switch {
		case err == nil && size != ref.Size:
			return fmt.Errorf("lsm: checkpoint %d of %s: upload %s: linked %d of %d bytes (the file changed)",
				p.id, b.opts.Task, ref.LocalName, size, ref.Size)
		case err == nil:
			ref.CRC32C = crc
			return nil
		case !errors.Is(err, tiered.ErrNotLinked):
			return fmt.Errorf("lsm: checkpoint %d of %s: upload %s as %s: %w", p.id, b.opts.Task, ref.LocalName, ref.Path, err)
		}
	}
	f, err := fs.Open(fs.PathJoin(p.dir, ref.LocalName))
	if err != nil {
		return fmt.Errorf("lsm: checkpoint %d of %s: open %s: %w", p.id, b.opts.Task, ref.LocalName, err)
	}
	defer f.Close()
	crc := crc32.New(frame.Table())
	cr := &countingReader{r: io.TeeReader(io.LimitReader(f, ref.Size), crc)}
	put := b.opts.Store.Put
	if ref.Shared {
		put = b.opts.Store.PutIfAbsent
	}
	if err := put(ctx, ref.Path, cr, ref.Size); err != nil {
		return fmt.Errorf("lsm: checkpoint %d of %s: upload %s as %s: %w", p.id, b.opts.Task, ref.LocalName, ref.Path, err)
	}
	if cr.n != ref.Size {
		return fmt.Errorf("lsm: checkpoint %d of %s: upload %s: read %d of %d bytes (the file changed or the store stopped early)",
			p.id, b.opts.Task, ref.LocalName, cr.n, ref.Size)
	}
	ref.CRC32C = crc.Sum32()
	return nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// randomID returns 128 random bits in hex: shared object names are unique
// by construction, whatever the local name (FLINK-29095).
func randomID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("random object id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// parallel runs fn(ctx, 0..n-1) on up to workers goroutines and waits for
// all of them. The first failure cancels the rest; it returns the failure
// of the lowest index, preferring real errors over the cancellations they
// caused.
func parallel(ctx context.Context, workers, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < min(workers, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := ctx.Err(); err != nil {
					errs[i] = err
					continue
				}
				if err := fn(ctx, i); err != nil {
					errs[i] = err
					cancel()
				}
			}
		}()
	}
	wg.Wait()
	var first error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if !errors.Is(err, context.Canceled) {
			return err
		}
		if first == nil {
			first = err
		}
	}
	return first
}
