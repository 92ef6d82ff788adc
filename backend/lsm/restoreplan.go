package lsm

import (
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/internal/kvstate"
	"github.com/statedhq/stated/rescale"
)

// restorePlan is what a restore does, decided from the handles, the
// instance's key-group range and the options alone, before any I/O: which
// handle is the base, which files of each lsm handle are downloaded,
// skipped or only checked, which key spans are excised from each store,
// and whether the other lsm handles are grafted into the base or copied.
// planRestore computes it; restore carries it out (restore.go).
type restorePlan struct {
	// base is the base handle's step: the lsm handle that owns the most
	// key groups (rescale.Owners.Base). Its files become the store as
	// they are. Nil when no lsm handle owns a key group: the store starts
	// empty.
	base *restoreStep
	// extras are the other lsm handles that own key groups, in handle
	// order: each is opened in a directory of its own, clipped to its
	// runs, then grafted into the base or copied.
	extras []restoreStep
	// canonical are the heap and file handles that own key groups, in
	// handle order: their entries are read and inserted.
	canonical []restoreStep
	// graft: the extras are grafted (graft.go); otherwise their key groups
	// are rewritten into SSTs and ingested. Options.NoGraft turns it off;
	// restore also turns it off when the self-check fails (graftUsable),
	// the one decision the plan cannot make without I/O.
	graft bool
}

// restoreStep is one handle's part of a restore.
type restoreStep struct {
	// index is the handle's position in the handles (the extras' working
	// directories are named after it).
	index int
	h     *backend.Handle
	// runs are the maximal runs of the instance's key groups restored from
	// this handle (rescale.Owners: those it is the first listed to hold).
	runs []backend.KeyGroupRange
	// files and clip are for lsm handles only.
	files restoreFiles
	// clip are the key spans excised from the handle's store: every key
	// outside its runs that the store can hold (see clipSpans).
	clip []pebble.KeyRange
}

// restoreFiles sorts the files of an lsm handle.
type restoreFiles struct {
	// fetch are downloaded (and checked).
	fetch []backend.FileRef
	// skip are SSTs whose key-group bounds meet none of the runs: never
	// read; the clip excises the spans they cover.
	skip []backend.FileRef
	// verify are empty WALs: only checked against the handle (see
	// planFiles).
	verify []backend.FileRef
}

// reopen reports whether the base store is opened first without the check
// that its files are all there, and opened again after clipping (and
// grafting): see openBase.
func (p *restorePlan) reopen() bool {
	return p.base != nil && (len(p.base.files.skip) > 0 || p.graft)
}

// planRestore plans the restore of task, whose key groups are r, from
// handles (already checked by backend.ValidateRestore to cover r). graft
// is false to copy the other lsm handles instead of grafting them
// (Options.NoGraft). It fails on a handle of another backend kind and on
// an lsm handle whose file list is unsafe (local names that would leave
// the directory or repeat, compressed files).
func planRestore(task backend.TaskID, handles []*backend.Handle, r backend.KeyGroupRange, graft bool) (*restorePlan, error) {
	for _, h := range handles {
		if h.Backend != backend.KindLSM && h.Backend != backend.KindFile && h.Backend != backend.KindHeap {
			return nil, fmt.Errorf("lsm: restore %s: %w: handle of %s has backend %q", task, backend.ErrIncompatible, h.Task, h.Backend)
		}
	}
	owners := rescale.Assign(handles, r)
	// The base is the lsm handle that owns the most key groups: its files
	// become the store as they are; the other lsm handles' stores are
	// grafted in, canonical handles copied in.
	baseIdx := owners.Base(func(j int) bool { return handles[j].Backend == backend.KindLSM })
	p := &restorePlan{}
	for j, h := range handles {
		runs := owners.Runs(j)
		if len(runs) == 0 {
			continue
		}
		s := restoreStep{index: j, h: h, runs: runs}
		if h.Backend != backend.KindLSM {
			p.canonical = append(p.canonical, s)
			continue
		}
		var err error
		if s.files, err = planFiles(task, h, neededFor(runs)); err != nil {
			return nil, err
		}
		keep := func(kg int) bool { return owners.Of(kg) == j }
		s.clip = clipSpans(h, keep, s.files.skip)
		if j == baseIdx {
			p.base = &s
		} else {
			p.extras = append(p.extras, s)
		}
	}
	p.graft = graft && len(p.extras) > 0
	return p, nil
}

// planFiles sorts the files of h by what the restore does with them: need
// says which ones it must read. Every file's local name is checked,
// skipped or not.
func planFiles(task backend.TaskID, h *backend.Handle, need func(backend.FileRef) bool) (restoreFiles, error) {
	var out restoreFiles
	seen := map[string]bool{}
	for _, f := range h.Files {
		if !localNameRE.MatchString(f.LocalName) {
			return restoreFiles{}, fmt.Errorf("lsm: restore %s from checkpoint %d of %s: %w: file %s has local name %q",
				task, h.CheckpointID, h.Task, backend.ErrCorrupt, f.Path, f.LocalName)
		}
		if seen[f.LocalName] {
			return restoreFiles{}, fmt.Errorf("lsm: restore %s from checkpoint %d of %s: %w: local name %q appears twice",
				task, h.CheckpointID, h.Task, backend.ErrCorrupt, f.LocalName)
		}
		seen[f.LocalName] = true
		if f.Compression != "" {
			return restoreFiles{}, fmt.Errorf("lsm: restore %s from checkpoint %d of %s: %w: file %s is %s-compressed; lsm files never are",
				task, h.CheckpointID, h.Task, backend.ErrCorrupt, f.Path, f.Compression)
		}
		switch {
		case f.Size == 0 && strings.HasSuffix(f.LocalName, ".log"):
			// An empty WAL (the WAL is off: every checkpoint's is empty)
			// has nothing to replay, and restoring it would cost: Pebble's
			// Open flushes the (empty) memtable it replays into, the flush
			// schedules the compaction the restored LSM is due, and Open
			// waits for that compaction to finish (hundreds of ms for a
			// checkpoint taken with a full L0). Without it the compaction
			// runs in the background after Open returns. It is still
			// checked: the handle lists it.
			out.verify = append(out.verify, f)
		case need(f):
			out.fetch = append(out.fetch, f)
		default:
			out.skip = append(out.skip, f)
		}
	}
	return out, nil
}

// neededFor returns whether a restore of runs needs file f: every file
// but an SST whose key-group bounds meet none of the runs. Bounds that
// reach past the valid key groups are not trusted to skip anything.
func neededFor(runs []backend.KeyGroupRange) func(f backend.FileRef) bool {
	return func(f backend.FileRef) bool {
		kb := f.KeyGroupBounds
		if kb == nil || !isSST(f.LocalName) || kb.End >= backend.MaxMaxParallelism {
			return true
		}
		for _, run := range runs {
			if !run.Intersect(*kb).Empty() {
				return true
			}
		}
		return false
	}
}

// clipSpans returns the key spans of handle h to excise: the maximal runs
// of key groups it must not keep, as key spans that together cover every
// possible key outside the kept ones (from the empty key up to the first
// byte 0xff; valid keys start with a key group below 0x8000). Only runs
// that can hold something are returned: those that meet the handle's key
// groups (the only ones with visible keys) and those that hold a skipped
// file. So a restore into a sub-range makes at most two Excise calls, one
// below and one above the kept key groups.
func clipSpans(h *backend.Handle, keep func(kg int) bool, skipped []backend.FileRef) []pebble.KeyRange {
	const limit = backend.MaxMaxParallelism
	var spans []pebble.KeyRange
	add := func(first, last int) {
		run := backend.KeyGroupRange{Start: first, End: last}
		need := !run.Intersect(h.KeyGroups).Empty()
		for _, f := range skipped {
			need = need || run.Covers(*f.KeyGroupBounds)
		}
		if !need {
			return
		}
		s, e := kvstate.KeyGroupPrefix(first), kvstate.KeyGroupPrefix(last+1)
		if first == 0 {
			s = []byte{}
		}
		if last == limit-1 {
			e = []byte{0xff}
		}
		spans = append(spans, pebble.KeyRange{Start: s, End: e})
	}
	start := -1
	for kg := 0; kg < limit; kg++ {
		if keep(kg) {
			if start >= 0 {
				add(start, kg-1)
				start = -1
			}
		} else if start < 0 {
			start = kg
		}
	}
	if start >= 0 {
		add(start, limit-1)
	}
	return spans
}
