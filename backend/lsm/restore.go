package lsm

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"regexp"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/record"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/internal/kvstate"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
)

// restoreBatchBytes is the size at which restore copies commit a batch.
const restoreBatchBytes = 4 << 20

// localNameRE is what a Pebble file name looks like. A handle is input from
// disk: a local name like "../x" must not write outside the directory.
var localNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$`)

// restore opens b.db from b.opts.Restore and returns the states the handles
// recorded. keepHistory keeps the base handle's SSTs as the confirmed base.
func (b *Backend) restore(ctx context.Context, keepHistory bool) (states []backend.StateDescriptor, err error) {
	// Pebble panics on some malformed inputs; a bad handle or file must
	// surface as an error (DESIGN.md: nothing panics on input from disk).
	defer func() {
		if r := recover(); r != nil {
			// The store is in an unknown state: never touch it again.
			b.db = nil
			err = fmt.Errorf("lsm: restore %s: %w: pebble failed on the restored files: %v", b.opts.Task, backend.ErrCorrupt, r)
		}
	}()
	handles := b.opts.Restore
	r := b.opts.KeyGroups
	for _, h := range handles {
		states = append(states, h.States...)
		if h.Backend != backend.KindLSM && h.Backend != backend.KindFile && h.Backend != backend.KindHeap {
			return nil, fmt.Errorf("lsm: restore %s: %w: handle of %s has backend %q", b.opts.Task, backend.ErrIncompatible, h.Task, h.Backend)
		}
	}
	// owner[kg-r.Start] is the handle a key group is restored from: the
	// first one listed that holds it (backend.ValidateRestore).
	owner := make([]int, r.Len())
	for i := range owner {
		owner[i] = -1
		for j, h := range handles {
			if h.KeyGroups.Contains(r.Start + i) {
				owner[i] = j
				break
			}
		}
	}
	// The base is the lsm handle that owns the most key groups: its files
	// become the store as they are; the others are copied in.
	baseIdx, best := -1, 0
	for j, h := range handles {
		if h.Backend != backend.KindLSM {
			continue
		}
		n := 0
		for _, o := range owner {
			if o == j {
				n++
			}
		}
		if n > best {
			baseIdx, best = j, n
		}
	}
	if baseIdx >= 0 {
		h := handles[baseIdx]
		if err := b.download(ctx, h, b.dbDir); err != nil {
			return nil, err
		}
		if err := b.checkManifests(h, b.dbDir); err != nil {
			return nil, err
		}
		o := b.pebbleOptions(false)
		o.ErrorIfNotExists = true
		b.db, err = pebble.Open(b.dbDir, o)
		if err != nil {
			return nil, fmt.Errorf("lsm: restore %s from checkpoint %d of %s: %w: open pebble: %v",
				b.opts.Task, h.CheckpointID, h.Task, backend.ErrCorrupt, err)
		}
		if err := b.clip(ctx, h, func(kg int) bool { return r.Contains(kg) && owner[kg-r.Start] == baseIdx }); err != nil {
			return nil, err
		}
		if keepHistory {
			set := fileSet{}
			for _, f := range h.Files {
				if f.Shared {
					set[f.LocalName] = f
				}
			}
			b.inc.base = set
		}
	} else {
		b.db, err = pebble.Open(b.dbDir, b.pebbleOptions(false))
		if err != nil {
			return nil, fmt.Errorf("lsm: restore %s: pebble in %s: %w", b.opts.Task, b.dbDir, err)
		}
	}
	for j, h := range handles {
		if j == baseIdx {
			continue
		}
		runs := ownedRuns(r, owner, j)
		if len(runs) == 0 {
			continue
		}
		switch h.Backend {
		case backend.KindLSM:
			err = b.copyFromLSM(ctx, j, h, runs)
		default:
			err = b.copyFromCanonical(ctx, h, runs)
		}
		if err != nil {
			return nil, err
		}
	}
	return states, nil
}

// ownedRuns returns the maximal runs of key groups of r that handle j owns.
func ownedRuns(r backend.KeyGroupRange, owner []int, j int) []backend.KeyGroupRange {
	var runs []backend.KeyGroupRange
	for i, o := range owner {
		if o != j {
			continue
		}
		kg := r.Start + i
		if n := len(runs); n > 0 && runs[n-1].End == kg-1 {
			runs[n-1].End = kg
		} else {
			runs = append(runs, backend.KeyGroupRange{Start: kg, End: kg})
		}
	}
	return runs
}

// clip excises every key span of the base store whose key group it must
// not keep. Excise drops whole files at once and turns the at most two
// files per level that straddle a boundary into virtual ones, so the cost
// does not depend on the amount of data removed (FLINK-21321) and clipped
// keys are gone for good: later checkpoints record the virtual bounds.
func (b *Backend) clip(ctx context.Context, h *backend.Handle, keep func(kg int) bool) error {
	needed := false
	for kg := h.KeyGroups.Start; kg <= h.KeyGroups.End; kg++ {
		if !keep(kg) {
			needed = true
			break
		}
	}
	if !needed {
		return nil
	}
	// Spans cover every possible key: from the empty key up to the first
	// byte 0xff (valid keys start with a key group below 0x8000), so
	// nothing outside the kept key groups survives, valid or not.
	var spans []pebble.KeyRange
	start := -1
	for kg := 0; kg <= backend.MaxMaxParallelism; kg++ {
		k := kg < backend.MaxMaxParallelism && keep(kg)
		switch {
		case !k && start < 0 && kg < backend.MaxMaxParallelism:
			start = kg
		case (k || kg == backend.MaxMaxParallelism) && start >= 0:
			s := kvstate.KeyGroupPrefix(start)
			if start == 0 {
				s = []byte{}
			}
			e := kvstate.KeyGroupPrefix(kg)
			if kg == backend.MaxMaxParallelism {
				e = []byte{0xff}
			}
			spans = append(spans, pebble.KeyRange{Start: s, End: e})
			start = -1
		}
	}
	for _, s := range spans {
		if err := b.db.Excise(ctx, s); err != nil {
			return fmt.Errorf("lsm: restore %s: clip checkpoint %d of %s to %s: excise [%x, %x): %w",
				b.opts.Task, h.CheckpointID, h.Task, b.opts.KeyGroups, s.Start, s.End, err)
		}
	}
	return nil
}

// copyFromLSM downloads an extra lsm handle into a temporary directory,
// opens it read-only and copies the key groups of runs into b.db.
func (b *Backend) copyFromLSM(ctx context.Context, j int, h *backend.Handle, runs []backend.KeyGroupRange) error {
	fs := b.lo.FS
	dir := fs.PathJoin(b.lo.Dir, "restore", fmt.Sprint(j))
	defer func() { _ = fs.RemoveAll(dir) }()
	if err := b.download(ctx, h, dir); err != nil {
		return err
	}
	if err := b.checkManifests(h, dir); err != nil {
		return err
	}
	o := b.pebbleOptions(true)
	o.ErrorIfNotExists = true
	src, err := pebble.Open(dir, o)
	if err != nil {
		return fmt.Errorf("lsm: restore %s from checkpoint %d of %s: %w: open pebble: %v",
			b.opts.Task, h.CheckpointID, h.Task, backend.ErrCorrupt, err)
	}
	defer src.Close()
	w := b.newBatchWriter()
	for _, run := range runs {
		lo, hi := kvstate.KeyGroupSpan(run)
		err := engine{src}.Scan(lo, hi, func(k, v []byte) (bool, error) {
			in, err := kvstate.CheckEntry(k, run)
			if err != nil {
				return false, fmt.Errorf("lsm: restore %s from checkpoint %d of %s: %w", b.opts.Task, h.CheckpointID, h.Task, err)
			}
			if !in {
				return false, fmt.Errorf("lsm: restore %s from checkpoint %d of %s: %w: key %x lies outside %s",
					b.opts.Task, h.CheckpointID, h.Task, backend.ErrCorrupt, k, run)
			}
			return true, w.set(k, v)
		})
		if err != nil {
			w.batch.Close()
			return err
		}
	}
	return w.flush()
}

// batchWriter inserts restored entries in batches of restoreBatchBytes.
type batchWriter struct {
	db    *pebble.DB
	batch *pebble.Batch
}

func (b *Backend) newBatchWriter() *batchWriter {
	return &batchWriter{db: b.db, batch: b.db.NewBatch()}
}

func (w *batchWriter) set(k, v []byte) error {
	if err := w.batch.Set(k, v, nil); err != nil {
		return fmt.Errorf("lsm: restore: batch set: %w", err)
	}
	if w.batch.Len() >= restoreBatchBytes {
		return w.commit()
	}
	return nil
}

func (w *batchWriter) commit() error {
	err := w.db.Apply(w.batch, pebble.NoSync)
	w.batch.Close()
	w.batch = w.db.NewBatch()
	if err != nil {
		return fmt.Errorf("lsm: restore: write batch: %w", err)
	}
	return nil
}

// flush commits what is left and releases the batch.
func (w *batchWriter) flush() error {
	var err error
	if !w.batch.Empty() {
		err = w.db.Apply(w.batch, pebble.NoSync)
	}
	w.batch.Close()
	if err != nil {
		return fmt.Errorf("lsm: restore: write batch: %w", err)
	}
	return nil
}

// download copies every file of h into dir, checking each one's size and
// CRC32C against the handle.
func (b *Backend) download(ctx context.Context, h *backend.Handle, dir string) error {
	seen := map[string]bool{}
	for _, f := range h.Files {
		if !localNameRE.MatchString(f.LocalName) {
			return fmt.Errorf("lsm: restore %s from checkpoint %d of %s: %w: file %s has local name %q",
				b.opts.Task, h.CheckpointID, h.Task, backend.ErrCorrupt, f.Path, f.LocalName)
		}
		if seen[f.LocalName] {
			return fmt.Errorf("lsm: restore %s from checkpoint %d of %s: %w: local name %q appears twice",
				b.opts.Task, h.CheckpointID, h.Task, backend.ErrCorrupt, f.LocalName)
		}
		seen[f.LocalName] = true
		if f.Compression != "" {
			return fmt.Errorf("lsm: restore %s from checkpoint %d of %s: %w: file %s is %s-compressed; lsm files never are",
				b.opts.Task, h.CheckpointID, h.Task, backend.ErrCorrupt, f.Path, f.Compression)
		}
	}
	fs := b.lo.FS
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("lsm: restore %s: %w", b.opts.Task, err)
	}
	return parallel(ctx, b.lo.UploadConcurrency, len(h.Files), func(ctx context.Context, i int) error {
		f := h.Files[i]
		return b.downloadFile(ctx, h, f, fs.PathJoin(dir, f.LocalName))
	})
}

func (b *Backend) downloadFile(ctx context.Context, h *backend.Handle, f backend.FileRef, local string) error {
	fail := func(err error) error {
		return fmt.Errorf("lsm: restore %s from checkpoint %d of %s: file %s (local %s): %w",
			b.opts.Task, h.CheckpointID, h.Task, f.Path, f.LocalName, err)
	}
	rc, err := b.opts.RestoreStore.Get(ctx, f.Path)
	if err != nil {
		if errors.Is(err, tiered.ErrNotFound) {
			return fail(fmt.Errorf("%w: %w", backend.ErrNotFound, err))
		}
		return fail(err)
	}
	defer rc.Close()
	out, err := b.lo.FS.Create(local, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fail(err)
	}
	crc := crc32.New(frame.Table())
	// Read one byte past the expected size so a longer object is caught.
	// The CRC sees each buffer first: a vfs.File may scribble over what it
	// was given (Pebble's MemFS does so in invariant builds).
	n, err := io.Copy(io.MultiWriter(crc, out), io.LimitReader(rc, f.Size+1))
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return fail(err)
	case n > f.Size:
		return fail(fmt.Errorf("%w: longer than the %d bytes the handle says", backend.ErrCorrupt, f.Size))
	case n < f.Size:
		return fail(fmt.Errorf("%w: %d bytes, the handle says %d (truncated)", backend.ErrCorrupt, n, f.Size))
	case crc.Sum32() != f.CRC32C:
		return fail(fmt.Errorf("%w: CRC32C %#08x, the handle says %#08x", backend.ErrCorrupt, crc.Sum32(), f.CRC32C))
	}
	return nil
}

// checkManifests reads every MANIFEST of a restored handle to its end. Pebble
// treats a damaged record as the end of the MANIFEST (a torn tail after a
// crash) and would open the store without the version edits after it: with
// files or bounds silently missing. A checkpoint's MANIFEST is complete, so
// here any damaged record is corruption.
func (b *Backend) checkManifests(h *backend.Handle, dir string) error {
	fs := b.lo.FS
	found := false
	for _, f := range h.Files {
		if !strings.HasPrefix(f.LocalName, "MANIFEST-") {
			continue
		}
		found = true
		fail := func(format string, args ...any) error {
			return fmt.Errorf("lsm: restore %s from checkpoint %d of %s: file %s (local %s): %w: "+format,
				append([]any{b.opts.Task, h.CheckpointID, h.Task, f.Path, f.LocalName, backend.ErrCorrupt}, args...)...)
		}
		file, err := fs.Open(fs.PathJoin(dir, f.LocalName))
		if err != nil {
			return fail("%v", err)
		}
		rr := record.NewReader(file, 0)
		n := 0
		for ; ; n++ {
			r, err := rr.Next()
			if err == io.EOF {
				break
			}
			if err == nil {
				_, err = io.Copy(io.Discard, r)
			}
			if err != nil {
				file.Close()
				return fail("record %d: %v", n, err)
			}
		}
		file.Close()
		if n == 0 {
			return fail("no record")
		}
	}
	if !found {
		return fmt.Errorf("lsm: restore %s from checkpoint %d of %s: %w: the handle has no MANIFEST file",
			b.opts.Task, h.CheckpointID, h.Task, backend.ErrCorrupt)
	}
	return nil
}
