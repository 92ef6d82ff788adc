package lsm

// Checkpoints by hand-off in remote mode (docs/lsm-remote.md): the
// snapshot uploads nothing. It flushes, lists the remote SSTs of the
// current version, and gives each a marker of this checkpoint attempt,
// which holds the object for the catalog from then on: Pebble deletes an
// object only when no marker of anyone is left.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/refcount/markers"
	"github.com/statedhq/stated/tiered"
)

// maxHandOffAttempts bounds the retries of a hand-off whose SSTs keep
// leaving the version (compactions finishing meanwhile). Each retry takes
// the newer version; a handful is the most the spike saw per checkpoint.
const maxHandOffAttempts = 64

// liveTable is one SST of the version and the object behind it.
type liveTable struct {
	// path is the object's name in the checkpoint root (the handle's
	// FileRef.Path), size the object's size.
	path string
	size int64
	// external: the object was ingested by reference (the instance's
	// marker holds it); else Pebble created it (Pebble's marker holds it).
	external bool
	level    int
	table    backend.TableRef
}

// tables lists the SSTs of the current version. It fails when a
// table is local (remote mode creates none) or when a compaction removed a
// table between the two listings (the caller retries).
func (r *remoteMode) tables() ([]liveTable, error) {
	b := r.b
	levels, err := b.db.SSTables()
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	prov := b.db.ObjProvider()
	metas := map[uint64]objstorage.ObjectMetadata{}
	for _, m := range prov.List() {
		metas[uint64(m.DiskFileNum)] = m
	}
	var out []liveTable
	for level, tables := range levels {
		for _, ti := range tables {
			m, ok := metas[uint64(ti.BackingSSTNum)]
			if !ok {
				return nil, fmt.Errorf("L%d table %s: its object is gone (a compaction removed it)", level, ti.FileNum)
			}
			t := liveTable{level: level, table: backend.TableRef{Level: level,
				Smallest: slices.Clone(ti.Smallest.UserKey), Largest: slices.Clone(ti.Largest.UserKey),
				SmallestSeq: uint64(ti.SmallestSeqNum), LargestSeq: uint64(ti.LargestSeqNum)}}
			switch {
			case m.IsExternal():
				t.external = true
				t.path = m.Remote.CustomObjectName
				t.size, ok = r.sizeOf(t.path)
				if !ok {
					return nil, fmt.Errorf("L%d table %s: external object %s was not restored by this instance", level, ti.FileNum, t.path)
				}
			case m.IsShared():
				name, ok := strings.CutPrefix(prov.Path(m), "remote-"+string(remoteLocator)+"://")
				if !ok {
					return nil, fmt.Errorf("L%d table %s: object %s has another locator", level, ti.FileNum, prov.Path(m))
				}
				t.path = r.prefix + name
				if t.size, ok = r.sizeOf(t.path); !ok {
					if ti.Virtual {
						n, err := prov.Size(m)
						if err != nil {
							return nil, fmt.Errorf("L%d table %s: size of %s: %w", level, ti.FileNum, t.path, err)
						}
						t.size = n
					} else {
						t.size = int64(ti.Size)
					}
					r.setSize(t.path, t.size)
				}
			default:
				return nil, fmt.Errorf("L%d table %s is local, not in the store", level, ti.FileNum)
			}
			out = append(out, t)
		}
	}
	return out, nil
}

// snapshot is Snapshot in remote mode. The synchronous part, with
// writes paused, only flushes and pins the version (an open iterator keeps
// every table of its version from being deleted); the markers, two small
// store calls per SST (a put of an empty marker, a listing), are written
// in Run, UploadConcurrency at a time, while writes go on. With the
// markers written under the pause, a 4 GiB state paused writes for many
// seconds against a slow S3 server.
func (r *remoteMode) snapshot(ctx context.Context, id uint64) (backend.PendingSnapshot, error) {
	task := r.b.opts.Task
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lsm: checkpoint %d of %s: %w", id, task, err)
	}
	job := task.Job
	return r.handOffSnapshot(ctx, "checkpoint", id, func(obj, attempt string) string {
		return markers.CheckpointMarker(obj, job, id, attempt)
	}, nil)
}

// baseSnapshot is BaseSnapshot in remote mode: a hand-off whose
// markers are the instance's own base markers, which hold the base's
// objects while the instance lives and until a newer base is confirmed
// (NotifyCheckpointComplete); every checkpoint that references the base
// adds its own markers (HoldBase). Nothing is uploaded and there are no
// private files (dir is unused): the base's handle lists only shared
// tables.
func (r *remoteMode) baseSnapshot(ctx context.Context, n uint64, _ string) (backend.PendingSnapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lsm: base snapshot %d of %s: %w", n, r.b.opts.Task, err)
	}
	return r.handOffSnapshot(ctx, "base snapshot", n, func(obj, _ string) string {
		return markers.BaseMarker(obj, r.creator, n)
	}, func(tables []liveTable) {
		objs := make([]string, 0, len(tables))
		for _, t := range tables {
			objs = append(objs, t.path)
		}
		slices.Sort(objs)
		r.mu.Lock()
		r.bases[n] = slices.Compact(objs)
		r.mu.Unlock()
	})
}

// handOffSnapshot is a hand-off snapshot numbered id (what says of what:
// "checkpoint" or "base snapshot") whose markers mark names; done, if
// set, hears the tables handed off in the synchronous part (a checkpoint
// that uses a base holds its tables at once, HoldBase, while the base's
// own markers are still being written: the version stays pinned until
// they are, and a base whose Run fails fails the checkpoints that used
// it).
func (r *remoteMode) handOffSnapshot(ctx context.Context, what string, id uint64, mark func(obj, attempt string) string,
	done func([]liveTable)) (backend.PendingSnapshot, error) {
	b := r.b
	task := b.opts.Task
	fail := func(format string, args ...any) error {
		return fmt.Errorf("lsm: %s %d of %s: "+format, append([]any{what, id, task}, args...)...)
	}
	// A table the restore found missing or damaged must not reach a new
	// checkpoint (nor a base).
	if err := r.restoreDamage(ctx); err != nil {
		return nil, fail("%w", err)
	}
	var p *handedOff
	err := b.Exclusive(func(states []backend.StateDescriptor) error {
		if err := b.db.Flush(); err != nil {
			return fail("flush: %w", err)
		}
		if r.unclaimed {
			// No-claim (or a restore from another store): the first
			// checkpoint shares no object with the restored one.
			if err := b.rewriteSpan(ctx, r.instanceSpan(), "unclaimed"); err != nil {
				return fail("copy the restored tables: %w", err)
			}
			r.unclaimed = false
		}
		// Compactions go on while writes are paused: list the tables,
		// open an iterator (it pins the current version), list again, and
		// keep the iterator only if both lists agree, so that the pinned
		// version is the one listed (versions only move forward).
		var last error
		for attempt := 0; attempt < maxHandOffAttempts; attempt++ {
			if err := ctx.Err(); err != nil {
				return fail("%w", err)
			}
			tables, err := r.tables()
			if err != nil {
				last = err
				continue
			}
			it, err := b.db.NewIter(nil)
			if err != nil {
				return fail("pin the version: %w", err)
			}
			again, err := r.tables()
			if err != nil || !sameTables(tables, again) {
				_ = it.Close()
				last = errors.New("a compaction changed the version while it was pinned")
				if err != nil {
					last = err
				}
				r.retries.Add(1)
				continue
			}
			h := r.handle(id, states, tables)
			if err := h.Validate(); err != nil {
				_ = it.Close()
				return fail("built an invalid handle: %w", err)
			}
			b.ref() // Pebble stays open while the iterator pins the version
			p = &handedOff{r: r, h: h, what: what, tables: tables, mark: mark, pin: it}
			if done != nil {
				done(tables)
			}
			return nil
		}
		return fail("%w: no stable version in %d attempts (last: %v)", backend.ErrDeclined, maxHandOffAttempts, last)
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// sameTables reports whether a and b list the same tables at the same
// levels (a move compaction changes a table's level only).
func sameTables(a, b []liveTable) bool {
	return slices.EqualFunc(a, b, func(x, y liveTable) bool {
		return x.level == y.level && x.path == y.path && x.table.SmallestSeq == y.table.SmallestSeq &&
			x.table.LargestSeq == y.table.LargestSeq && string(x.table.Smallest) == string(y.table.Smallest) &&
			string(x.table.Largest) == string(y.table.Largest)
	})
}

// handOff writes one marker of a new attempt (mark's name) on every
// table's object and checks that the live holder still holds it: Pebble's
// marker for the SSTs it created (sharedUnref deletes its marker before
// it lists the others, so a marker written while Pebble's exists is always
// seen), this instance's own marker for ingested ones (removed only at
// Close). It reports false, after taking back this attempt's markers,
// when an SST is leaving the version.
func (r *remoteMode) handOff(ctx context.Context, tables []liveTable, mark func(obj, attempt string) string) (bool, error) {
	b := r.b
	attempt, err := randomID()
	if err != nil {
		return false, err
	}
	attempt = attempt[:16]
	store := b.lo.Remote.Store
	objects := map[string]liveTable{}
	for _, t := range tables {
		objects[t.path] = t
	}
	names := make([]string, 0, len(objects))
	for n := range objects {
		names = append(names, n)
	}
	slices.Sort(names)
	err = parallel(ctx, markConcurrency(b.lo.UploadConcurrency), len(names), func(ctx context.Context, i int) error {
		if err := tiered.PutBytes(ctx, store, mark(names[i], attempt), nil); err != nil {
			return fmt.Errorf("mark %s: %w", names[i], err)
		}
		return nil
	})
	left := false
	if err == nil {
		// One listing after every marker is written (each object's after
		// its own marker): Pebble's marker of each SST we created must
		// still be there.
		mine := fmt.Sprintf("%s%d.", markers.MarkerInfix, r.creator)
		held := map[string]bool{}
		err = listAround(ctx, store, names, markConcurrency(b.lo.UploadConcurrency), func(o tiered.ObjectInfo) {
			if obj, _, ok := strings.Cut(o.Name, mine); ok {
				held[obj] = true
			}
		})
		for _, obj := range names {
			if !objects[obj].external && !held[obj] {
				left = true
			}
		}
	}
	if err == nil && !left {
		return true, nil
	}
	// Take this attempt's markers back with the unref rule: an object
	// whose Pebble marker is gone is deleted once ours goes too.
	for _, obj := range names {
		if _, uerr := markers.UnrefNamed(ctx, store, obj, mark(obj, attempt)); uerr != nil && err == nil {
			err = uerr
		}
	}
	return false, err
}

// handle is the handle of a hand-off: one shared, size-only file per
// table, in the order a restore ingests them.
func (r *remoteMode) handle(id uint64, states []backend.StateDescriptor, tables []liveTable) *backend.Handle {
	b := r.b
	h := &backend.Handle{
		Version:        backend.HandleVersionRemote,
		Backend:        backend.KindLSM,
		Task:           b.opts.Task,
		CheckpointID:   id,
		KeyGroups:      b.opts.KeyGroups,
		MaxParallelism: b.opts.MaxParallelism,
		States:         states,
	}
	for _, t := range tables {
		tr := t.table
		kb := backend.KeyGroupRange{Start: keyGroupOf(tr.Smallest), End: keyGroupOf(tr.Largest)}
		h.Files = append(h.Files, backend.FileRef{Path: t.path, Size: t.size, Shared: true, SizeOnly: true,
			KeyGroupBounds: &kb, Table: &tr})
		h.FullSize += t.size
	}
	return h
}

// keyGroupOf is the key group of a stored key (its two-byte prefix).
func keyGroupOf(k []byte) int {
	if len(k) < 2 {
		return 0
	}
	return int(binary.BigEndian.Uint16(k))
}

// instanceSpan is the key span of the instance's key groups.
func (r *remoteMode) instanceSpan() pebble.KeyRange {
	b := r.b
	return keyGroupSpan(b.opts.KeyGroups)
}

// keyGroupSpan is the key span of the key groups r: [r.Start, r.End+1).
func keyGroupSpan(r backend.KeyGroupRange) pebble.KeyRange {
	return pebble.KeyRange{Start: binary.BigEndian.AppendUint16(nil, uint16(r.Start)),
		End: binary.BigEndian.AppendUint16(nil, uint16(r.End+1))}
}

// handedOff is the pending snapshot of a hand-off: the tables of a pinned
// version, whose markers Run writes.
type handedOff struct {
	r      *remoteMode
	h      *backend.Handle
	what   string
	tables []liveTable
	mark   func(obj, attempt string) string
	// pin keeps the version's tables from being deleted until the
	// markers are written; closed (and the backend's reference dropped)
	// by the first of Run and Release.
	pin  *pebble.Iterator
	used atomic.Bool
}

// unpin closes the iterator and drops the backend's reference.
func (p *handedOff) unpin() {
	_ = p.pin.Close()
	_ = p.r.b.unref(false)
}

// Run implements backend.PendingSnapshot: it writes the markers while the
// version is pinned, so no table can leave it before its marker holds it;
// the holder check stays as a guard, and a failed one declines the
// checkpoint.
func (p *handedOff) Run(ctx context.Context) (*backend.Handle, error) {
	if !p.used.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("lsm: %s %d of %s: %w: snapshot already run or released",
			p.what, p.h.CheckpointID, p.h.Task, backend.ErrInvalidArgument)
	}
	defer p.unpin()
	fail := func(err error) (*backend.Handle, error) {
		return nil, fmt.Errorf("lsm: %s %d of %s: %w", p.what, p.h.CheckpointID, p.h.Task, err)
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	ok, err := p.r.handOff(ctx, p.tables, p.mark)
	if err != nil {
		return fail(err)
	}
	if !ok {
		p.r.retries.Add(1)
		return fail(fmt.Errorf("%w: an SST of the pinned version lost its holder during the hand-off", backend.ErrDeclined))
	}
	return p.h, nil
}

// Release implements backend.PendingSnapshot. Markers of a run snapshot
// stay: the catalog's abort or its sweep removes those of a checkpoint
// that never completes.
func (p *handedOff) Release() {
	if p.used.CompareAndSwap(false, true) {
		p.unpin()
	}
}
