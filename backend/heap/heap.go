package heap

import (
	"errors"
	"fmt"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/internal/memsnap"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// DefaultMaxSnapshotSize is the size cap of one snapshot (5 MiB) when
// Options.MaxSnapshotSize is zero.
const DefaultMaxSnapshotSize = 5 << 20

// Options are the heap backend's own options.
type Options struct {
	// Snapshots is the in-memory store snapshots are kept in. Required: one
	// store for the whole daemon, so that a restore after a task failover
	// (a new instance in the same daemon) finds the snapshots.
	Snapshots *memstore.Store
	// MaxSnapshotSize is the largest snapshot file, in bytes, that is kept;
	// a larger one is declined. Default DefaultMaxSnapshotSize.
	MaxSnapshotSize int64
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.MaxSnapshotSize == 0 {
		o.MaxSnapshotSize = DefaultMaxSnapshotSize
	}
}

// Validate reports every problem of o at once. Call EnsureDefaults first.
func (o *Options) Validate() error {
	var errs []error
	if o.Snapshots == nil {
		errs = append(errs, fmt.Errorf("heap: %w: no snapshot store (Options.Snapshots)", backend.ErrInvalidArgument))
	}
	if o.MaxSnapshotSize < 0 {
		errs = append(errs, fmt.Errorf("heap: %w: max snapshot size %d is negative", backend.ErrInvalidArgument, o.MaxSnapshotSize))
	}
	return errors.Join(errs...)
}

// missingHint explains a heap snapshot that is not in daemon memory.
const missingHint = "heap snapshots live in the daemon's memory and do not survive a daemon restart; " +
	"restore from a checkpoint of the file or lsm backend, or from a savepoint"

// Backend is a heap backend instance. It implements backend.Backend and
// backend.CanonicalSnapshotter.
type Backend struct {
	*memsnap.Backend
}

var (
	_ backend.Backend              = (*Backend)(nil)
	_ backend.CanonicalSnapshotter = (*Backend)(nil)
	_ backend.Grouper              = (*Backend)(nil)
	_ backend.ReadGrouper          = (*Backend)(nil)
	_ backend.Viewer               = (*Backend)(nil)
	_ backend.KeyScanner           = (*Backend)(nil)
	_ backend.Loader               = (*Backend)(nil)
)

// Open opens an instance, restoring it from opts.Restore when that is not
// empty: heap handles are read from ho.Snapshots (or, when missing there,
// from opts.RestoreStore, where a native savepoint puts them), file and
// canonical handles from opts.RestoreStore. opts.Store is required by
// backend.Options but heap snapshots never go there.
func Open(opts backend.Options, ho Options) (*Backend, error) {
	opts.EnsureDefaults()
	ho.EnsureDefaults()
	if err := errors.Join(opts.Validate(), ho.Validate()); err != nil {
		return nil, fmt.Errorf("heap: open: %w", err)
	}
	b, err := memsnap.Open(memsnap.Config{
		Kind:            backend.KindHeap,
		Options:         opts,
		Snapshots:       ho.Snapshots,
		MaxSnapshotSize: ho.MaxSnapshotSize,
		RestoreSource: func(h *backend.Handle) ([]tiered.Store, string) {
			if h.Backend == backend.KindHeap {
				// A native savepoint may have copied the heap
				// snapshot into opts.RestoreStore; file names are
				// random, so the two stores never hold different
				// files under one name.
				return []tiered.Store{ho.Snapshots, opts.RestoreStore}, missingHint
			}
			return []tiered.Store{opts.RestoreStore}, ""
		},
	})
	if err != nil {
		return nil, err
	}
	return &Backend{b}, nil
}
