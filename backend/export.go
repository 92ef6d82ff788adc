package backend

import (
	"context"

	"github.com/statedhq/stated/tiered"
)

// CanonicalSnapshotter makes canonical snapshots. A canonical snapshot is
// backend-neutral: every entry in stated's shared key/value layout, in the
// key-group-partitioned file format of the file backend. Any backend kind
// restores from it, so a user can move from one backend to another
// through a canonical savepoint.
//
// It is not part of Backend, so a Backend value may lack it (a wrapper or a
// test double), but every backend kind must have it: lsm, heap and file
// declare so at compile time, and backendtest fails a kind without it.
// Those that assert it, and what they do without it:
//   - catalog's savepoints (catalog/savepoint.go) refuse a canonical
//     savepoint with ErrInvalidArgument;
//   - the daemon's instance wrapper that adds operator state
//     (daemon/opstate.go) returns ErrUnsupported;
//   - backendtest (guard.go) fails the suite's canonical tests.
type CanonicalSnapshotter interface {
	// CanonicalSnapshot freezes a view (as Snapshot's synchronous part does)
	// and returns the part that writes it into store under dir ("" for the
	// store's root). The returned handle has Backend KindFile and paths
	// relative to store's root. It never changes what later incremental
	// checkpoints reuse.
	CanonicalSnapshot(ctx context.Context, checkpointID uint64, store tiered.Store, dir string) (PendingSnapshot, error)
}

// BaseSnapshotter is a backend whose own incremental snapshots can serve
// as the bases of changelog mode (dstl/changelog), so that a
// materialization uploads only what changed since the last confirmed one
// and a restore reads native files. Implemented by lsm; heap and file
// snapshots are full anyway, and their bases are canonical.
//
// BaseSnapshot is Snapshot, except that the snapshot's private files go
// under dir instead of the checkpoint's directory (every file of a base
// is shared by the checkpoints that use it). id numbers the bases of the
// instance, ascending, in a sequence of their own: the wrapper confirms
// one with NotifyCheckpointComplete(id) and never passes checkpoint ids.
type BaseSnapshotter interface {
	BaseSnapshot(ctx context.Context, id uint64, dir string) (PendingSnapshot, error)
}

// BaseHolder is a BaseSnapshotter whose bases' files must be held for each
// checkpoint that references them, because they live outside the
// registry's sole control (lsm remote mode: SSTs the instance's Pebble
// deletes once no marker holds them; docs/lsm-remote.md).
//
// HoldBase makes the files of base id (a BaseSnapshot the instance took
// and has not let go of) held for checkpoint checkpointID of the task, as
// a checkpoint's own snapshot would hold them, until the catalog releases
// that checkpoint. The changelog wrapper calls it in the synchronous part
// of every snapshot that references the base, with its writes paused: the
// base is held by the instance until then, and a base stops being held by
// the instance only once a newer one is confirmed
// (NotifyCheckpointComplete), after which no new snapshot references it,
// or the wrapper reports, with NotifyCheckpointAborted(id), a base that no
// snapshot uses or will take. An unknown or released base is an error
// wrapping ErrDeclined.
type BaseHolder interface {
	BaseSnapshotter
	HoldBase(ctx context.Context, id, checkpointID uint64) error
}
