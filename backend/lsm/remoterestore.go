package lsm

// Restores by reference in remote mode (docs/lsm-remote.md): a fresh DB
// ingests the handles' SSTs as external files bounded to the instance's
// key groups, without reading or copying them; cold reads fetch blocks
// (and fill the secondary cache) later.

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/tablecheck"
	"github.com/statedhq/stated/rescale"
	"github.com/statedhq/stated/tiered"
)

// refTable is one handle file to ingest by reference, bounded.
type refTable struct {
	f    backend.FileRef
	ext  pebble.ExternalFile
	hidx int // index of its handle, for the order of L0 files
}

// restore opens b.db from b.opts.Restore by reference. claim: the
// instance may keep referencing the objects (it marks them as its own
// holder); otherwise its first checkpoint copies them (handOffSnapshot).
func (r *remoteMode) restore(ctx context.Context, claim bool) (states []backend.StateDescriptor, err error) {
	b := r.b
	began := time.Now()
	task := b.opts.Task
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("lsm: restore %s: %w: pebble failed on the restored tables: %v", task, backend.ErrCorrupt, r)
		}
	}()
	tables, canonical, err := r.planRemoteRestore()
	if err != nil {
		return nil, err
	}
	for _, h := range b.opts.Restore {
		states = append(states, h.States...)
	}
	// Compactions wait for the restore's background work (compactionGate).
	o := b.pebbleOptions(false)
	gate := newCompactionGate(true)
	o.Experimental.CompactionScheduler = gate
	b.db, err = openFresh(b.dbDir, o)
	if err != nil {
		return nil, fmt.Errorf("lsm: restore %s: pebble in %s: %w", task, b.dbDir, err)
	}
	if err := r.start(); err != nil {
		return nil, err
	}
	objects := map[string]int64{}
	for _, t := range tables {
		objects[t.f.Path] = t.f.Size
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range objects {
			if !yield(n) {
				return
			}
		}
	})
	for n, size := range objects {
		r.setSize(n, size)
	}
	checkStart := time.Now()
	if claim {
		// Our holds first, then the check that the checkpoints restored
		// from are still retained: a discard that began before the holds
		// were written fails the restore here, and one that begins after
		// sees them and leaves the objects alone (catalog/remote.go).
		if err := r.writeHolds(ctx, names); err != nil {
			return nil, fmt.Errorf("lsm: restore %s: hold the restored objects: %w", task, err)
		}
		if b.opts.RestoreHeld != nil {
			if err := b.opts.RestoreHeld(ctx); err != nil {
				return nil, fmt.Errorf("lsm: restore %s: %w", task, err)
			}
		}
	}
	if b.lo.Remote.VerifyRestore {
		if err := r.checkObjects(ctx, names, objects, markConcurrency(b.lo.UploadConcurrency)); err != nil {
			return nil, err
		}
	}
	b.rstats.Check = time.Since(checkStart)
	if claim {
		r.externals = names
	} else {
		r.unclaimed = len(names) > 0
	}
	// Without VerifyRestore the objects are checked in the background, and
	// a claim's instance markers (one per object) are written there too:
	// the holds keep the objects meanwhile, and the first served operation
	// waits for no request per table.
	r.afterRestore(names, objects, claim, !b.lo.Remote.VerifyRestore, gate)
	ingestStart := time.Now()
	if _, err := r.ingestByReference(ctx, tables); err != nil {
		return nil, err
	}
	b.rstats.Ingest = time.Since(ingestStart)
	r.prefetchL0(ctx, tables)
	for i, c := range canonical {
		if err := b.copyFromCanonical(ctx, c.h, c.runs, i); err != nil {
			return nil, err
		}
	}
	st := &b.rstats
	st.Handles = len(b.opts.Restore)
	st.FilesReferenced = len(tables)
	for _, t := range tables {
		st.BytesReferenced += t.f.Size
	}
	st.Total = time.Since(began)
	return states, nil
}

// planRemoteRestore assigns each key group of the instance to the first
// handle listed that holds it (rescale.Assign, as planRestore does) and
// bounds the tables of each remote-mode lsm handle to the runs of key
// groups it owns, so the tables of several handles never overlap. Heap
// and file handles become canonical steps, copied in after the ingestion.
func (r *remoteMode) planRemoteRestore() ([]refTable, []restoreStep, error) {
	b := r.b
	task := b.opts.Task
	owners := rescale.Assign(b.opts.Restore, b.opts.KeyGroups)
	var out []refTable
	var canonical []restoreStep
	for hi, h := range b.opts.Restore {
		runs := owners.Runs(hi)
		switch {
		case h.Backend == backend.KindHeap || h.Backend == backend.KindFile:
			if len(runs) > 0 {
				canonical = append(canonical, restoreStep{index: hi, h: h, runs: runs})
			}
			continue
		case h.Backend != backend.KindLSM:
			return nil, nil, fmt.Errorf("lsm: restore %s: %w: handle of %s has backend %q", task, backend.ErrIncompatible, h.Task, h.Backend)
		}
		for _, f := range h.Files {
			if f.Table == nil {
				return nil, nil, fmt.Errorf("lsm: restore %s: %w: checkpoint %d of %s was written in local mode (file %s has no table reference); restore it without remote mode or from a canonical savepoint",
					task, backend.ErrIncompatible, h.CheckpointID, h.Task, f.Path)
			}
			if f.Size <= 0 {
				return nil, nil, fmt.Errorf("lsm: restore %s: %w: checkpoint %d of %s: table %s has size %d",
					task, backend.ErrCorrupt, h.CheckpointID, h.Task, f.Path, f.Size)
			}
		}
		for _, run := range runs {
			span := keyGroupSpan(run)
			first := len(out)
			for _, f := range h.Files {
				tr := f.Table
				e := pebble.ExternalFile{Locator: externalLocator, ObjName: f.Path, Size: uint64(f.Size), HasPointKey: true,
					StartKey: tr.Smallest, EndKey: tr.Largest, EndKeyIsInclusive: true}
				if bytes.Compare(e.StartKey, span.Start) < 0 {
					e.StartKey = span.Start
				}
				if bytes.Compare(e.EndKey, span.End) >= 0 {
					e.EndKey, e.EndKeyIsInclusive = span.End, false
				}
				if c := bytes.Compare(e.StartKey, e.EndKey); c > 0 || (c == 0 && !e.EndKeyIsInclusive) {
					continue // nothing of the run's key groups
				}
				out = append(out, refTable{f: f, ext: e, hidx: hi})
			}
			sameL0Bounds(out[first:])
		}
	}
	return out, canonical, nil
}

// sameL0Bounds gives the level-0 tables among ts (one handle's tables in
// one run of key groups) the union of their bounds. Each level-0 table is
// ingested on top of the others; when an ingested table's bounds lie
// strictly inside one already there, Pebble's ingest reads that table to
// check for data in between (opening it: several ranged reads from the
// store per table, before the restored instance serves). With equal
// bounds the tables overlap at their boundaries, which Pebble takes for
// data overlap without reading anything, and the bounds stay those the
// level-0 tables cover together, so a compaction of them takes in no more
// of the level below than before.
func sameL0Bounds(ts []refTable) {
	var lo, hi *pebble.ExternalFile
	for i := range ts {
		if ts[i].f.Table.Level != 0 {
			continue
		}
		e := &ts[i].ext
		if lo == nil || bytes.Compare(e.StartKey, lo.StartKey) < 0 {
			lo = e
		}
		if hi == nil {
			hi = e
		} else if c := bytes.Compare(e.EndKey, hi.EndKey); c > 0 || c == 0 && e.EndKeyIsInclusive {
			hi = e
		}
	}
	if lo == nil {
		return
	}
	start, end, incl := lo.StartKey, hi.EndKey, hi.EndKeyIsInclusive
	for i := range ts {
		if ts[i].f.Table.Level == 0 {
			ts[i].ext.StartKey, ts[i].ext.EndKey, ts[i].ext.EndKeyIsInclusive = start, end, incl
		}
	}
}

// restoreTailBytes is how much of the end of each restored level-0 table
// prefetchL0 reads: the footer, properties, index and filter blocks of a
// table of a memtable's flush.
const restoreTailBytes = 256 << 10

// prefetchL0 fetches the tails of the restored level-0 tables at once
// (remotestore.Storage.Prefetch), since the first read consults every one
// of them and Pebble reads each table's metadata one request after
// another. A failed prefetch costs only time: the reads go to the store.
func (r *remoteMode) prefetchL0(ctx context.Context, tables []refTable) {
	b := r.b
	l0 := map[string]int64{}
	for _, t := range tables {
		if t.f.Table.Level == 0 {
			l0[t.f.Path] = t.f.Size
		}
	}
	if len(l0) == 0 {
		return
	}
	st := r.factory.Storage(externalLocator)
	if err := st.Prefetch(ctx, l0, restoreTailBytes, b.lo.UploadConcurrency, 30*time.Second); err != nil {
		b.lo.Logger.Infof("lsm: restore %s: prefetch of level-0 tables: %v", b.opts.Task, err)
	}
}

// ingestByReference ingests the tables: one IngestExternalFiles per level
// from L6 to L1 (files of one level never overlap, and the handles'
// bounded spans are disjoint), then one per L0 file, oldest first. Each
// ingestion gets a newer sequence number than the one before, so newer
// levels shadow older ones as in the source. It returns the number of
// ingestions.
func (r *remoteMode) ingestByReference(ctx context.Context, tables []refTable) (int, error) {
	b := r.b
	var batches [][]pebble.ExternalFile
	for level := backend.MaxTableLevel; level >= 1; level-- {
		var batch []pebble.ExternalFile
		for _, t := range tables {
			if t.f.Table.Level == level {
				batch = append(batch, t.ext)
			}
		}
		if len(batch) > 0 {
			slices.SortFunc(batch, func(x, y pebble.ExternalFile) int { return bytes.Compare(x.StartKey, y.StartKey) })
			batches = append(batches, batch)
		}
	}
	var l0 []refTable
	for _, t := range tables {
		if t.f.Table.Level == 0 {
			l0 = append(l0, t)
		}
	}
	slices.SortStableFunc(l0, func(x, y refTable) int {
		if x.hidx != y.hidx {
			return x.hidx - y.hidx
		}
		switch {
		case x.f.Table.LargestSeq < y.f.Table.LargestSeq:
			return -1
		case x.f.Table.LargestSeq > y.f.Table.LargestSeq:
			return 1
		}
		return 0
	})
	for _, t := range l0 {
		batches = append(batches, []pebble.ExternalFile{t.ext})
	}
	for _, batch := range batches {
		if _, err := b.db.IngestExternalFiles(ctx, batch); err != nil {
			return 0, fmt.Errorf("lsm: restore %s: %w: ingest %d tables by reference (first %s): %v",
				b.opts.Task, backend.ErrCorrupt, len(batch), batch[0].ObjName, err)
		}
	}
	return len(batches), nil
}

// checkObjects checks that every object exists with the size its handle
// says and, with RemoteOptions.VerifyRestore, reads each whole and checks
// its block checksums. It lists the objects' prefixes rather than asking
// for each (listAround), workers listings at a time.
func (r *remoteMode) checkObjects(ctx context.Context, names []string, sizes map[string]int64, workers int) error {
	b := r.b
	task := b.opts.Task
	listed := map[string]int64{}
	err := listAround(ctx, b.opts.RestoreStore, names, workers, func(o tiered.ObjectInfo) {
		if _, ok := sizes[o.Name]; ok {
			listed[o.Name] = o.Size
		}
	})
	if err != nil {
		return fmt.Errorf("lsm: restore %s: list the restored tables: %w", task, err)
	}
	for _, name := range names {
		size, ok := listed[name]
		if !ok {
			return fmt.Errorf("lsm: restore %s: %w: table %s is not in the store", task, backend.ErrNotFound, name)
		}
		if size != sizes[name] {
			return fmt.Errorf("lsm: restore %s: %w: table %s has %d bytes, its handle says %d",
				task, backend.ErrCorrupt, name, size, sizes[name])
		}
	}
	if !b.lo.Remote.VerifyRestore {
		return nil
	}
	return parallel(ctx, b.lo.UploadConcurrency, len(names), func(ctx context.Context, i int) error {
		if err := tablecheck.Validate(ctx, b.opts.RestoreStore, names[i], sizes[names[i]]); err != nil {
			return fmt.Errorf("lsm: restore %s: %w", task, err)
		}
		return nil
	})
}

// listAround lists everything in store whose name starts as one of names
// does up to the first letter after its last "/" (the object and its
// markers, and the neighbours that share the letter), and calls seen for
// each, one call at a time. A state of 4 GiB has about 600 tables: one
// listing per prefix and letter (at most 16 for Pebble's hex names,
// workers at a time) instead of a request per table.
func listAround(ctx context.Context, store tiered.Store, names []string, workers int, seen func(tiered.ObjectInfo)) error {
	var prefixes []string
	for _, n := range names {
		cut := strings.LastIndex(n, "/") + 2
		prefixes = append(prefixes, n[:min(cut, len(n))])
	}
	slices.Sort(prefixes)
	prefixes = slices.Compact(prefixes)
	var mu sync.Mutex
	return parallel(ctx, workers, len(prefixes), func(ctx context.Context, i int) error {
		return tiered.Walk(ctx, store, prefixes[i], func(o tiered.ObjectInfo) error {
			mu.Lock()
			defer mu.Unlock()
			seen(o)
			return nil
		})
	})
}
