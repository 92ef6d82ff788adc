package daemon

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
)

// CorruptionSite says where corruption was detected, for the counter and
// the event.
type CorruptionSite uint8

const (
	// CorruptionRestore: a backend refused the files of the checkpoint or
	// savepoint it restores from (a checksum or size mismatch, an SST that
	// fails to open).
	CorruptionRestore CorruptionSite = iota
	// CorruptionCatalog: a manifest or job file failed its checks, or a
	// data file's size differs from its handle when the catalog checked it.
	CorruptionCatalog
	// CorruptionSavepoint: a file copied into a savepoint failed its
	// checksum.
	CorruptionSavepoint
	// CorruptionSnapshot: a task snapshot produced inconsistent output (a
	// handle for another task or checkpoint).
	CorruptionSnapshot
	numCorruptionSites
)

// NumCorruptionSites is the length of Metrics.Corruption.
const NumCorruptionSites = int(numCorruptionSites)

var corruptionNames = [numCorruptionSites]string{"restore", "catalog", "savepoint", "snapshot"}

func (s CorruptionSite) String() string {
	if s < numCorruptionSites {
		return corruptionNames[s]
	}
	return "unknown"
}

// CorruptionEvent describes one detection of corrupt data: an error
// wrapping backend.ErrCorrupt that the daemon is about to return. Its
// message names the object and the mismatch (e.g. "j/chk-3/x has crc32c
// 0badf00d, its handle says 12345678").
type CorruptionEvent struct {
	Site CorruptionSite
	// Job is the job whose data it is; Task is set when one task's restore
	// met it.
	Job  string
	Task backend.TaskID
	// Source names the checkpoint or savepoint read ("" when unknown).
	Source string
	Err    error
}

// corruption counts, logs and reports err when it wraps backend.ErrCorrupt;
// it returns err unchanged so call sites can wrap their return in it.
func (d *Daemon) corruption(ev CorruptionEvent) error {
	if ev.Err == nil || !errors.Is(ev.Err, backend.ErrCorrupt) {
		return ev.Err
	}
	d.m.Corruption[ev.Site].Add(1)
	attrs := []any{"where", ev.Site.String(), "job", ev.Job}
	if ev.Task != (backend.TaskID{}) {
		attrs = append(attrs, "task", ev.Task.String())
	}
	if ev.Source != "" {
		attrs = append(attrs, "source", ev.Source)
	}
	attrs = append(attrs, "err", ev.Err.Error())
	// Level error: corrupt data is never a client's mistake; an operator
	// must look at the store (or the disk under the cache).
	d.log.Log(d.baseCtx, slog.LevelError, "corruption detected", attrs...)
	if d.cfg.OnCorruption != nil {
		d.cfg.OnCorruption(ev)
	}
	return ev.Err
}

// ReportCorruption counts, logs and reports corruption that the daemon's
// owner detected outside the daemon's calls (the node reports what the
// catalog found damaged when it opened). ev.Err must wrap
// backend.ErrCorrupt; anything else is ignored.
func (d *Daemon) ReportCorruption(ev CorruptionEvent) { _ = d.corruption(ev) }

// missingIsCorrupt marks err, the failed restore of an instance from
// source, as corruption when a file was not found: the catalog resolved
// the source, so every file its handles list must exist, and one that
// does not is data lost from the store (the error names it), not a
// request for something that does not exist.
func missingIsCorrupt(err error, source string) error {
	if errors.Is(err, backend.ErrCorrupt) || !(errors.Is(err, backend.ErrNotFound) || errors.Is(err, tiered.ErrNotFound)) {
		return err
	}
	return fmt.Errorf("%w: a file of %s is missing: %w", backend.ErrCorrupt, source, err)
}

// restoreSource names what r restores from, for the corruption event.
func restoreSource(r *restorePlan) string {
	if m := r.src.Manifest; m.SavepointID != "" {
		return "savepoint " + m.SavepointID
	}
	return fmt.Sprintf("checkpoint %d of job %s", r.src.Manifest.CheckpointID, r.src.Manifest.Job)
}
