package backend

import (
	"context"

	"github.com/statedhq/stated/tiered"
)

// CanonicalSnapshotter is implemented by every backend. A canonical snapshot
// is backend-neutral: every entry in stated's shared key/value layout, in
// the key-group-partitioned file format of the file backend. Any backend
// kind restores from it, so a user can move from one backend to another
// through a canonical savepoint.
type CanonicalSnapshotter interface {
	// CanonicalSnapshot freezes a view (as Snapshot's synchronous part does)
	// and returns the part that writes it into store under dir ("" for the
	// store's root). The returned handle has Backend KindFile and paths
	// relative to store's root. It never changes what later incremental
	// checkpoints reuse.
	CanonicalSnapshot(ctx context.Context, checkpointID uint64, store tiered.Store, dir string) (PendingSnapshot, error)
}
