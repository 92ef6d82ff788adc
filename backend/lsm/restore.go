package lsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/record"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/internal/kvstate"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
)

// localNameRE is what a Pebble file name looks like. A handle is input from
// disk: a local name like "../x" must not write outside the directory.
var localNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$`)

// RestoreStats describes how an instance was restored: what it downloaded
// and where the time went. Steps of the base and of the extra handles run
// concurrently, so their durations may add up to more than Total.
type RestoreStats struct {
	// Handles is the number of handles restored from (0: started empty).
	Handles int
	// FilesDownloaded and BytesDownloaded count the files the restore
	// needed and fetched; FilesSkipped and BytesSkipped those not read: SSTs
	// whose key-group bounds showed they hold nothing of the key groups
	// restored, and empty WAL files (those are still checked).
	FilesDownloaded, FilesSkipped int
	BytesDownloaded, BytesSkipped int64
	// FilesFromCache and BytesFromCache count the downloaded files that
	// came from the download cache (Options.DownloadCache: another restore
	// on the host fetched them) instead of the restore store.
	FilesFromCache int
	BytesFromCache int64
	// FilesReferenced and BytesReferenced count the tables a remote-mode
	// restore ingested by reference (Options.Remote): never downloaded.
	FilesReferenced int
	BytesReferenced int64
	// Download is the time spent downloading the base handle, DownloadExtra
	// the extra lsm handles' (concurrent with the base's).
	Download, DownloadExtra time.Duration
	// Open is the time Pebble took to open the base (both opens when it
	// was opened twice: files skipped or other stores grafted).
	Open time.Duration
	// Clip is the time of the Excise calls that clipped the restored
	// stores: the base's key groups outside the instance's range, and the
	// extra lsm handles' temporary stores to the key groups they give
	// (concurrent with the base's download). ClipSpans is their number
	// and BytesClipped Pebble's estimate of the bytes they removed from
	// downloaded tables (files skipped by their key-group bounds, never
	// downloaded, are not counted).
	Clip         time.Duration
	ClipSpans    int
	BytesClipped int64
	// Copy is the time spent preparing the key groups of the other
	// handles after their download: opening the other lsm stores
	// (concurrent with the base's download; their excises count in Clip
	// only), rewriting their key
	// groups into SSTs and ingesting them when they cannot be grafted, and
	// inserting the key groups of canonical (heap, file) handles.
	// BytesCopied is the size of the SSTs rewritten.
	Copy        time.Duration
	BytesCopied int64
	// Graft is the time spent linking the other lsm handles' files into
	// the base and recording them in its MANIFEST (see graft.go).
	Graft time.Duration
	// Rewrite is the time spent rewriting virtual SSTs whose backing files
	// hold keys outside the range (restores that do not keep the history
	// only: such a restore uploads every file again).
	Rewrite time.Duration
	// Check is the time a remote-mode restore spent holding the tables it
	// references and checking that they exist; Ingest the time of their
	// ingestion by reference.
	Check, Ingest time.Duration
	// Total is the time of the whole restore.
	Total time.Duration
}

// RestoreStats returns how the instance was restored (zero for an instance
// that started empty).
func (b *Backend) RestoreStats() RestoreStats { return b.rstats }

// RestoreReport implements backend.RestoreReporter: RestoreStats' counts,
// and the time of each phase that ran (a zero time is left out).
func (b *Backend) RestoreReport() slog.Value {
	s := b.rstats
	a := []slog.Attr{
		slog.Int("handles", s.Handles),
		slog.Duration("total", s.Total),
		slog.Int("filesDownloaded", s.FilesDownloaded),
		slog.Int64("bytesDownloaded", s.BytesDownloaded),
		slog.Int("filesFromCache", s.FilesFromCache),
		slog.Int("filesSkipped", s.FilesSkipped),
		slog.Int("filesReferenced", s.FilesReferenced),
	}
	for _, p := range []struct {
		name string
		d    time.Duration
	}{{"download", s.Download}, {"downloadExtra", s.DownloadExtra}, {"open", s.Open}, {"clip", s.Clip},
		{"copy", s.Copy}, {"graft", s.Graft}, {"rewrite", s.Rewrite}, {"check", s.Check}, {"ingest", s.Ingest}} {
		if p.d > 0 {
			a = append(a, slog.Duration(p.name, p.d))
		}
	}
	return slog.GroupValue(a...)
}

// restore opens b.db from b.opts.Restore and returns the states the handles
// recorded. keepHistory keeps the base handle's SSTs as the confirmed base.
// It plans first (planRestore: what to download, clip, graft or copy,
// without I/O), then carries the plan out.
func (b *Backend) restore(ctx context.Context, keepHistory bool) (states []backend.StateDescriptor, err error) {
	began := time.Now()
	st := &b.rstats
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
	st.Handles = len(handles)
	for _, h := range handles {
		for _, f := range h.Files {
			if f.Table != nil {
				return nil, fmt.Errorf("lsm: restore %s: %w: checkpoint %d of %s references SSTs in the store (remote mode); open with Options.Remote",
					b.opts.Task, backend.ErrIncompatible, h.CheckpointID, h.Task)
			}
		}
	}
	for _, h := range handles {
		states = append(states, h.States...)
	}
	p, err := planRestore(b.opts.Task, handles, b.opts.KeyGroups, !b.lo.NoGraft)
	if err != nil {
		return nil, err
	}
	if p.graft {
		p.graft = b.graftUsable()
	}

	// The extra lsm handles are downloaded and prepared while the base
	// downloads and opens.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		prepared = make([]*extraStore, len(p.extras))
		extraErr error
		es       RestoreStats
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if r := recover(); r != nil {
				extraErr = fmt.Errorf("lsm: restore %s: %w: pebble failed on the restored files: %v", b.opts.Task, backend.ErrCorrupt, r)
				cancel()
			}
		}()
		for i, e := range p.extras {
			x, err := b.prepareExtra(ctx, e, p.graft, &es)
			prepared[i] = x
			if err != nil {
				extraErr = err
				cancel()
				return
			}
		}
	}()
	// Wait for the goroutine on every path out, panics included.
	defer func() { cancel(); <-done }()

	var base *baseStore
	if p.base != nil {
		base, err = b.openBase(ctx, p.base, p.reopen())
	} else {
		b.db, err = openFresh(b.dbDir, b.pebbleOptions(false))
		if err != nil {
			err = fmt.Errorf("lsm: restore %s: pebble in %s: %w", b.opts.Task, b.dbDir, err)
		}
	}
	if err != nil {
		cancel()
	}
	<-done
	// The first failure cancels the other side: report the cause, not
	// the cancellation it caused.
	if err == nil || (errors.Is(err, context.Canceled) && extraErr != nil && !errors.Is(extraErr, context.Canceled)) {
		err = extraErr
	}
	st.FilesDownloaded += es.FilesDownloaded
	st.BytesDownloaded += es.BytesDownloaded
	st.FilesSkipped += es.FilesSkipped
	st.BytesSkipped += es.BytesSkipped
	st.FilesFromCache += es.FilesFromCache
	st.BytesFromCache += es.BytesFromCache
	st.Clip += es.Clip
	st.ClipSpans += es.ClipSpans
	st.BytesClipped += es.BytesClipped
	st.DownloadExtra, st.Copy, st.BytesCopied = es.Download, es.Copy, es.BytesCopied
	if err != nil {
		return nil, err
	}
	var history fileSet
	if base != nil {
		if history, err = b.finishBase(base, prepared); err != nil {
			return nil, err
		}
	}
	var ingest []string
	for _, x := range prepared {
		ingest = append(ingest, x.ingest...)
	}
	if len(ingest) > 0 {
		start := time.Now()
		if err := b.db.Ingest(ctx, ingest); err != nil {
			return nil, fmt.Errorf("lsm: restore %s: ingest the key groups of the other handles: %w", b.opts.Task, err)
		}
		st.Copy += time.Since(start)
	}
	for i, c := range p.canonical {
		start := time.Now()
		if err := b.copyFromCanonical(ctx, c.h, c.runs, i); err != nil {
			return nil, err
		}
		st.Copy += time.Since(start)
	}
	if keepHistory {
		b.inc.base = history
	} else {
		start := time.Now()
		if err := b.rewriteVirtual(ctx); err != nil {
			return nil, err
		}
		st.Rewrite = time.Since(start)
	}
	if err := b.lo.FS.RemoveAll(b.lo.FS.PathJoin(b.lo.Dir, "restore")); err != nil {
		return nil, fmt.Errorf("lsm: restore %s: %w", b.opts.Task, err)
	}
	st.Total = time.Since(began)
	return states, nil
}

// baseStore is the base handle's store between its two opens.
type baseStore struct {
	h       *backend.Handle
	fetched []backend.FileRef
	// reopen: b.db was opened without checking that its files are all
	// there (and without compactions), and must be closed and opened
	// again normally.
	reopen bool
}

// openBase downloads the files of the base handle that hold key groups it
// keeps, opens them as b.db and clips the store to those key groups: step
// s of the plan.
//
// Pebble opens a store only if every file its MANIFEST lists is there,
// unless told to skip that check. When files were skipped (or other
// stores will be grafted in, which needs the store closed), the store is
// opened without the check (reopen), with compactions and table statistics
// off (nothing reads a table then), and the spans that hold the skipped
// files are excised (Excise drops a table wholly inside the span from the
// MANIFEST without reading it); finishBase closes it and opens it again
// normally: that second open checks that every table left is present with
// the size the MANIFEST says, so bounds that lied cannot go unnoticed.
func (b *Backend) openBase(ctx context.Context, s *restoreStep, reopen bool) (*baseStore, error) {
	st := &b.rstats
	h := s.h
	start := time.Now()
	err := b.download(ctx, h, b.dbDir, s.files, st)
	st.Download = time.Since(start)
	if err != nil {
		return nil, err
	}
	if err := b.checkManifests(h, b.dbDir); err != nil {
		return nil, err
	}
	base := &baseStore{h: h, fetched: s.files.fetch, reopen: reopen}
	start = time.Now()
	o := b.pebbleOptions(false)
	o.ErrorIfNotExists = true
	if base.reopen {
		o.DisableConsistencyCheck = true
		o.DisableTableStats = true
		o.DisableAutomaticCompactions = true
	}
	b.db, err = pebble.Open(b.dbDir, o)
	st.Open = time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("lsm: restore %s from checkpoint %d of %s: %w: open pebble on %s: %v",
			b.opts.Task, h.CheckpointID, h.Task, backend.ErrCorrupt, describeFiles(h), err)
	}
	if err := b.clip(ctx, h, s.clip, s.files.skip); err != nil {
		return nil, err
	}
	return base, nil
}

// finishBase grafts the prepared extra stores into the base, opens it
// again if needed, and returns the shared files the store now holds that
// restored objects back (for the incremental history).
func (b *Backend) finishBase(base *baseStore, extras []*extraStore) (fileSet, error) {
	st := &b.rstats
	h := base.h
	history := fileSet{}
	for _, f := range base.fetched {
		if f.Shared {
			history[f.LocalName] = f
		}
	}
	if !base.reopen {
		return history, nil
	}
	start := time.Now()
	var srcs []*graftSource
	for _, x := range extras {
		if x.graft != nil {
			srcs = append(srcs, x.graft)
		}
	}
	// The first free file number, and the newest sequence number: from the
	// base's tables (the clip may have made virtual ones, numbered) and
	// the files on disk (Pebble numbers a new OPTIONS file and MANIFEST at
	// every open, from its next file number).
	var next, lastSeq uint64
	if len(srcs) > 0 {
		// Listing looks every table's file up: one missing means bounds
		// lied.
		levels, err := b.db.SSTables()
		if err != nil {
			return nil, fmt.Errorf("lsm: restore %s from checkpoint %d of %s: %w: the files skipped by their key-group bounds are still needed: %v",
				b.opts.Task, h.CheckpointID, h.Task, backend.ErrCorrupt, err)
		}
		for _, level := range levels {
			for _, t := range level {
				next = max(next, uint64(t.FileNum), uint64(t.BackingSSTNum))
				lastSeq = max(lastSeq, uint64(t.LargestSeqNum))
			}
		}
		// Grafting is sound only for stores with disjoint keys (graft.go).
		// The excises make them so; a handle whose keys lie outside its
		// key groups could break it, so check before writing anything.
		var baseTables []pebble.SSTableInfo
		for _, level := range levels {
			baseTables = append(baseTables, level...)
		}
		groups := [][]pebble.SSTableInfo{baseTables}
		for _, src := range srcs {
			groups = append(groups, src.infos())
		}
		if x, y, ok := overlapping(groups); ok {
			return nil, fmt.Errorf("lsm: restore %s from checkpoint %d of %s: %w: tables %s [%x, %x] and %s [%x, %x] of different handles share keys",
				b.opts.Task, h.CheckpointID, h.Task, backend.ErrCorrupt, x.FileNum, x.Smallest.UserKey, x.Largest.UserKey,
				y.FileNum, y.Smallest.UserKey, y.Largest.UserKey)
		}
	}
	err := b.db.Close()
	b.db = nil
	if err != nil {
		return nil, fmt.Errorf("lsm: restore %s from checkpoint %d of %s: close after clipping: %w", b.opts.Task, h.CheckpointID, h.Task, err)
	}
	if len(srcs) > 0 {
		onDisk, err := maxFileNum(b.lo.FS, b.dbDir)
		if err != nil {
			return nil, fmt.Errorf("lsm: restore %s: %w", b.opts.Task, err)
		}
		grafted, err := b.graft(srcs, max(next, onDisk)+1, lastSeq)
		if err != nil {
			return nil, fmt.Errorf("lsm: restore %s: %w", b.opts.Task, err)
		}
		for name, ref := range grafted {
			history[name] = ref
		}
		st.Graft = time.Since(start)
	}
	// The first open made a WAL (without records: the WAL is off, and
	// nothing was written). Drop it, or the second open would replay it
	// and wait for a compaction (see download).
	if err := removeNewWALs(b.lo.FS, b.dbDir, base.fetched); err != nil {
		return nil, fmt.Errorf("lsm: restore %s: %w", b.opts.Task, err)
	}
	start = time.Now()
	o := b.pebbleOptions(false)
	o.ErrorIfNotExists = true
	b.db, err = pebble.Open(b.dbDir, o)
	st.Open += time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("lsm: restore %s from checkpoint %d of %s: %w: the restored files do not make a store "+
			"(files skipped by their key-group bounds are still needed, or a grafted store does not fit): %v",
			b.opts.Task, h.CheckpointID, h.Task, backend.ErrCorrupt, err)
	}
	return history, nil
}

// removeNewWALs removes the WAL files in dir that are not among the
// restored files.
func removeNewWALs(fs vfs.FS, dir string, restored []backend.FileRef) error {
	keep := map[string]bool{}
	for _, f := range restored {
		keep[f.LocalName] = true
	}
	names, err := fs.List(dir)
	if err != nil {
		return err
	}
	for _, name := range names {
		if strings.HasSuffix(name, ".log") && !keep[name] {
			if err := fs.Remove(fs.PathJoin(dir, name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// clip excises spans from the base store. Excise drops whole tables at once
// and turns the at most two tables per level that straddle a boundary into
// virtual ones, so the cost does not depend on the amount of data removed
// (FLINK-21321) and clipped keys are gone for good: later checkpoints
// record the virtual bounds.
func (b *Backend) clip(ctx context.Context, h *backend.Handle, spans []pebble.KeyRange, skipped []backend.FileRef) error {
	for _, s := range spans {
		if err := exciseTimed(ctx, b.db, s, skipped, &b.rstats); err != nil {
			return fmt.Errorf("lsm: restore %s: clip checkpoint %d of %s to %s: excise [%x, %x): %w",
				b.opts.Task, h.CheckpointID, h.Task, b.opts.KeyGroups, s.Start, s.End, err)
		}
	}
	return nil
}

// exciseTimed excises span from db and adds the call to st's Clip,
// ClipSpans and BytesClipped. The bytes are Pebble's estimate from the
// MANIFEST (and the index blocks of the straddling tables; not part of
// the clip's cost) less the sizes of the skipped files inside the span:
// those are in the MANIFEST but were never downloaded. (A skipped file
// under virtual tables counts its whole size: the estimate errs low.)
func exciseTimed(ctx context.Context, db *pebble.DB, span pebble.KeyRange, skipped []backend.FileRef, st *RestoreStats) error {
	if n, err := db.EstimateDiskUsage(span.Start, span.End); err == nil {
		est := int64(n)
		for _, f := range skipped {
			lo, hi := kvstate.KeyGroupPrefix(f.KeyGroupBounds.Start), kvstate.KeyGroupPrefix(f.KeyGroupBounds.End+1)
			if bytes.Compare(lo, span.Start) >= 0 && bytes.Compare(hi, span.End) <= 0 {
				est -= f.Size
			}
		}
		st.BytesClipped += max(est, 0)
	}
	start := time.Now()
	err := db.Excise(ctx, span)
	st.Clip += time.Since(start)
	st.ClipSpans++
	return err
}

// rewriteVirtual rewrites every virtual SST whose backing file holds keys
// outside the instance's range (clipped ones, whether this restore or an
// earlier one clipped them): a restore that does not keep the history
// uploads every file whole at the next checkpoint, and native savepoints
// copy them. Each such table's span is read through the store (all levels
// merged), written into new SSTs and put back with IngestAndExcise, which
// drops everything the span held before: the cost is about the size of
// the data in the span, a table per level and boundary. (A manual
// compaction would do too, but Pebble's never takes a table of the last
// level as input.) Tables the excise cuts at the span's ends become
// virtual over backing files of in-range keys only, which are kept.
func (b *Backend) rewriteVirtual(ctx context.Context) error {
	fs := b.lo.FS
	r := b.opts.KeyGroups
	ro := b.pebbleOptions(true).MakeReaderOptions()
	inRange := map[uint64]bool{} // backing file number -> its keys lie in r
	for round := 0; ; round++ {
		levels, err := b.db.SSTables()
		if err != nil {
			return fmt.Errorf("lsm: restore %s: list tables: %w", b.opts.Task, err)
		}
		var spans []pebble.KeyRange
		gone := false
		for _, level := range levels {
			for _, t := range level {
				if !t.Virtual {
					continue
				}
				n := uint64(t.BackingSSTNum)
				in, ok := inRange[n]
				if !ok {
					name := fmt.Sprintf("%06d.sst", n)
					kb, has, err := sstKeyGroupBounds(ctx, fs, fs.PathJoin(b.dbDir, name), ro)
					if errors.Is(err, os.ErrNotExist) {
						// Compactions run meanwhile: the table is gone
						// (the next round lists the tables again).
						gone = true
						continue
					}
					if err != nil {
						return fmt.Errorf("lsm: restore %s: read the key bounds of %s: %w", b.opts.Task, name, err)
					}
					in = !has || r.Covers(kb)
					inRange[n] = in
				}
				if !in {
					end := append(append([]byte(nil), t.Largest.UserKey...), 0)
					spans = append(spans, pebble.KeyRange{Start: append([]byte(nil), t.Smallest.UserKey...), End: end})
				}
			}
		}
		if len(spans) == 0 && !gone {
			return nil
		}
		// One round rewrites every table it lists; new virtual tables
		// have in-range backing files. The bound only guards a bug.
		if round >= 8 {
			return fmt.Errorf("lsm: restore %s: %d virtual tables over clipped keys left after %d rounds", b.opts.Task, len(spans), round)
		}
		for i, span := range spans {
			if err := b.rewriteSpan(ctx, span, fmt.Sprintf("rewrite-%d-%d", round, i)); err != nil {
				return err
			}
		}
	}
}

// rewriteSpan replaces what span holds with a copy in new SSTs.
func (b *Backend) rewriteSpan(ctx context.Context, span pebble.KeyRange, name string) error {
	fs := b.lo.FS
	fail := func(err error) error {
		return fmt.Errorf("lsm: restore %s: rewrite [%x, %x): %w", b.opts.Task, span.Start, span.End, err)
	}
	dir := fs.PathJoin(b.lo.Dir, "restore", name)
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	defer func() { _ = fs.RemoveAll(dir) }()
	o := b.pebbleOptions(false)
	w := &sstWriter{fs: fs, dir: dir, opts: o.MakeWriterOptions(6, b.db.TableFormat()), target: uint64(b.lo.TargetFileSize)}
	it, err := b.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: span.Start, UpperBound: span.End})
	if err != nil {
		return fail(wrapErr(err, "scan"))
	}
	if err := scanIter(it, func(k, v []byte) (bool, error) { return true, w.set(k, v) }); err != nil {
		w.abort()
		return fail(err)
	}
	if err := w.finish(); err != nil {
		return fail(err)
	}
	if _, err := b.db.IngestAndExcise(ctx, w.paths, nil, nil, span); err != nil {
		return fail(err)
	}
	return nil
}

// extraStore is an extra lsm handle prepared for the base: either a
// store to graft, or SSTs to ingest.
type extraStore struct {
	graft  *graftSource
	ingest []string
}

// prepareExtra downloads the files of an extra lsm handle that hold key
// groups of runs, opens them and excises everything else. The result is
// grafted into the base (see graft.go) unless graft is false (see
// graftUsable) or a table holds range keys or blob references: then those
// key groups are rewritten into new SSTs
// (sequence number zero, one value per key: what Pebble ingests) to
// ingest. The handle's files themselves are never ingested: they carry the
// sequence numbers of another store and may hold several versions of a
// key.
func (b *Backend) prepareExtra(ctx context.Context, s restoreStep, graft bool, st *RestoreStats) (_ *extraStore, err error) {
	fs := b.lo.FS
	h, runs := s.h, s.runs
	dir := fs.PathJoin(b.lo.Dir, "restore", fmt.Sprint(s.index))
	start := time.Now()
	err = b.download(ctx, h, dir, s.files, st)
	st.Download += time.Since(start)
	if err != nil {
		return nil, err
	}
	if err := b.checkManifests(h, dir); err != nil {
		return nil, err
	}
	start = time.Now()
	clipped := st.Clip
	defer func() { st.Copy += time.Since(start) - (st.Clip - clipped) }()
	fail := func(err error) error {
		return fmt.Errorf("lsm: restore %s from checkpoint %d of %s: %w", b.opts.Task, h.CheckpointID, h.Task, err)
	}
	o := b.pebbleOptions(false)
	o.ErrorIfNotExists = true
	o.DisableConsistencyCheck = true
	o.DisableTableStats = true
	o.DisableAutomaticCompactions = true
	// A cache of its own: a copy reads each block once and must not evict
	// the blocks of the daemon's live instances.
	o.Cache = pebble.NewCache(8 << 20)
	defer o.Cache.Unref()
	src, err := pebble.Open(dir, o)
	if err != nil {
		return nil, fail(fmt.Errorf("%w: open pebble on %s: %v", backend.ErrCorrupt, describeFiles(h), err))
	}
	closed := false
	defer func() {
		if !closed {
			err = errors.Join(err, src.Close())
		}
	}()
	for _, span := range s.clip {
		if err := exciseTimed(ctx, src, span, s.files.skip, st); err != nil {
			return nil, fail(fmt.Errorf("excise [%x, %x): %w", span.Start, span.End, err))
		}
	}
	levels, err := src.SSTables(pebble.WithProperties())
	if err != nil {
		return nil, fail(fmt.Errorf("%w: the files skipped by their key-group bounds are still needed: %v", backend.ErrCorrupt, err))
	}
	var g *graftSource // nil: copy instead
	if graft {
		g = &graftSource{h: h, dir: dir, fetched: map[string]backend.FileRef{}}
		for _, f := range s.files.fetch {
			g.fetched[f.LocalName] = f
			if strings.HasSuffix(f.LocalName, ".blob") {
				g = nil // blob files are not grafted
				break
			}
		}
	}
	lo, hi := kvstate.KeyGroupSpan(backend.KeyGroupRange{Start: runs[0].Start, End: runs[len(runs)-1].End})
	for level, tables := range levels {
		for _, t := range tables {
			if bytes.Compare(t.Smallest.UserKey, lo) < 0 || bytes.Compare(t.Largest.UserKey, hi) > 0 {
				return nil, fail(fmt.Errorf("%w: table %s holds keys [%x, %x] outside %s after clipping",
					backend.ErrCorrupt, t.FileNum, t.Smallest.UserKey, t.Largest.UserKey, runs))
			}
			if g != nil && (t.Properties == nil || t.Properties.NumRangeKeys() > 0 || len(t.GetBlobReferenceFiles()) > 0) {
				g = nil
			}
			if g != nil {
				g.tables = append(g.tables, graftTable{level: level, info: t})
			}
		}
	}
	if g != nil {
		closed = true
		if err := src.Close(); err != nil {
			return nil, fail(err)
		}
		return &extraStore{graft: g}, nil
	}

	// Rewrite what the clipped store holds into SSTs.
	out := fs.PathJoin(b.lo.Dir, "restore", fmt.Sprintf("ingest-%d", s.index))
	if err := fs.MkdirAll(out, 0o755); err != nil {
		return nil, fail(err)
	}
	w := &sstWriter{fs: fs, dir: out, opts: o.MakeWriterOptions(6, pebble.FormatNewest.MaxTableFormat()), target: uint64(b.lo.TargetFileSize)}
	for _, run := range runs {
		lo, hi := kvstate.KeyGroupSpan(run)
		it, err := src.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			w.abort()
			return nil, fail(wrapErr(err, "scan key groups %s", run))
		}
		err = scanIter(it, func(k, v []byte) (bool, error) {
			in, err := kvstate.CheckEntry(k, run)
			if err != nil {
				return false, err
			}
			if !in {
				return false, fmt.Errorf("%w: key %x lies outside %s", backend.ErrCorrupt, k, run)
			}
			return true, w.set(k, v)
		})
		if err != nil {
			w.abort()
			return nil, fail(err)
		}
	}
	if err := w.finish(); err != nil {
		return nil, fail(err)
	}
	st.BytesCopied += w.bytes
	return &extraStore{ingest: w.paths}, nil
}

// sstWriter writes sorted entries into SSTs of about target bytes each.
type sstWriter struct {
	fs     vfs.FS
	dir    string
	opts   sstable.WriterOptions
	target uint64
	w      *sstable.Writer
	paths  []string
	bytes  int64
}

func (w *sstWriter) set(k, v []byte) error {
	if w.w == nil {
		path := w.fs.PathJoin(w.dir, fmt.Sprintf("%06d.sst", len(w.paths)))
		f, err := w.fs.Create(path, vfs.WriteCategoryUnspecified)
		if err != nil {
			return fmt.Errorf("create %s: %w", path, err)
		}
		w.w = sstable.NewWriter(objstorageprovider.NewFileWritable(f), w.opts)
		w.paths = append(w.paths, path)
	}
	if err := w.w.Set(k, v); err != nil {
		return fmt.Errorf("write %s: %w", w.paths[len(w.paths)-1], err)
	}
	if w.w.Raw().EstimatedSize() >= w.target {
		return w.close()
	}
	return nil
}

// close finishes the current SST (Finish syncs it, as Ingest requires).
func (w *sstWriter) close() error {
	if w.w == nil {
		return nil
	}
	err := w.w.Close()
	if err == nil {
		var m *sstable.WriterMetadata
		if m, err = w.w.Metadata(); err == nil {
			w.bytes += int64(m.Size)
		}
	}
	w.w = nil
	if err != nil {
		return fmt.Errorf("finish %s: %w", w.paths[len(w.paths)-1], err)
	}
	return nil
}

func (w *sstWriter) finish() error { return w.close() }

// abort drops the SST being written; the caller removes the directory.
func (w *sstWriter) abort() {
	if w.w != nil {
		_ = w.w.Close()
		w.w = nil
	}
}

// download copies the files fp fetches of h into dir, and checks those it
// verifies, each one's size and CRC32C against the handle.
func (b *Backend) download(ctx context.Context, h *backend.Handle, dir string, fp restoreFiles, st *RestoreStats) error {
	fetched, verify := fp.fetch, fp.verify
	st.FilesSkipped += len(verify) + len(fp.skip)
	for _, f := range fp.skip {
		st.BytesSkipped += f.Size
	}
	st.FilesDownloaded += len(fetched)
	for _, f := range fetched {
		st.BytesDownloaded += f.Size
	}
	fs := b.lo.FS
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("lsm: restore %s: %w", b.opts.Task, err)
	}
	cached := make([]bool, len(fetched))
	err := parallel(ctx, b.lo.UploadConcurrency, len(fetched)+len(verify), func(ctx context.Context, i int) error {
		if i >= len(fetched) {
			_, err := b.downloadFile(ctx, h, verify[i-len(fetched)], "")
			return err
		}
		f := fetched[i]
		var err error
		cached[i], err = b.downloadFile(ctx, h, f, fs.PathJoin(dir, f.LocalName))
		return err
	})
	for i, c := range cached {
		if c {
			st.FilesFromCache++
			st.BytesFromCache += fetched[i].Size
		}
	}
	return err
}

// downloadFile copies f into the local file local, or only checks it when
// local is "", and reports whether it came from the download cache.
func (b *Backend) downloadFile(ctx context.Context, h *backend.Handle, f backend.FileRef, local string) (fromCache bool, err error) {
	fail := func(err error) error {
		return fmt.Errorf("lsm: restore %s from checkpoint %d of %s: file %s (local %s): %w",
			b.opts.Task, h.CheckpointID, h.Task, f.Path, f.LocalName, err)
	}
	get := func(path string) error { return b.getFile(ctx, f, path) }
	if c := b.lo.DownloadCache; c != nil {
		fromCache, err = c.fetchFrom(ctx, b.opts.RestoreStore, cacheKey{path: f.Path, crc: f.CRC32C, size: f.Size}, local, linkable(f.LocalName), get)
	} else {
		err = get(local)
	}
	if err != nil {
		return false, fail(err)
	}
	return fromCache, nil
}

// getFile reads f from the restore store into the local file local (only
// checks it when local is ""), checking its size and CRC32C.
//
// The file is not synced: a restored store never has to survive a crash.
// The WAL is off and Open clears the instance's directory, so after a
// crash the task is restored again from its checkpoint; the download
// cache is emptied when opened. Pebble reads what it opens through the
// page cache; it syncs what it writes itself (MANIFEST, new tables).
func (b *Backend) getFile(ctx context.Context, f backend.FileRef, local string) error {
	rc, err := b.opts.RestoreStore.Get(ctx, f.Path)
	if err != nil {
		if errors.Is(err, tiered.ErrNotFound) {
			return fmt.Errorf("%w: %w", backend.ErrNotFound, err)
		}
		return err
	}
	defer rc.Close()
	crc := crc32.New(frame.Table())
	var n int64
	if local == "" {
		n, err = io.Copy(crc, io.LimitReader(rc, f.Size+1))
	} else {
		var out vfs.File
		out, err = b.lo.FS.Create(local, vfs.WriteCategoryUnspecified)
		if err != nil {
			return err
		}
		// Read one byte past the expected size so a longer object is
		// caught. The CRC sees each buffer first: a vfs.File may scribble
		// over what it was given (Pebble's MemFS does so in invariant
		// builds).
		n, err = io.Copy(io.MultiWriter(crc, out), io.LimitReader(rc, f.Size+1))
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}
	switch {
	case err != nil:
		return err
	case n > f.Size:
		return fmt.Errorf("%w: longer than the %d bytes the handle says", backend.ErrCorrupt, f.Size)
	case n < f.Size:
		return fmt.Errorf("%w: %d bytes, the handle says %d (truncated)", backend.ErrCorrupt, n, f.Size)
	case crc.Sum32() != f.CRC32C:
		return fmt.Errorf("%w: CRC32C %#08x, the handle says %#08x", backend.ErrCorrupt, crc.Sum32(), f.CRC32C)
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

// describeFiles names the files of h that Pebble opens first, for an error
// of a restore whose files pass their checksums yet do not open (a handle
// whose local names or file list do not fit the files): the MANIFEST.
func describeFiles(h *backend.Handle) string {
	for _, f := range h.Files {
		if strings.HasPrefix(f.LocalName, "MANIFEST-") {
			return fmt.Sprintf("the files of the handle (MANIFEST %s, local name %s)", f.Path, f.LocalName)
		}
	}
	return fmt.Sprintf("the %d files of the handle (no MANIFEST among them)", len(h.Files))
}
