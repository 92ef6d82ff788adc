package file

import (
	"errors"
	"fmt"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/internal/memsnap"
	"github.com/statedhq/stated/backend/internal/snapfmt"
	"github.com/statedhq/stated/tiered"
)

// Options are the file backend's own options.
type Options struct {
	// Compression of snapshot files: "" (none, the default) or "zstd".
	Compression string
	// TempDir is where snapshots larger than a few MiB are staged before
	// they are uploaded. Default os.TempDir().
	TempDir string
}

// EnsureDefaults fills zero fields with their defaults (all defaults are
// the zero values today; it exists so callers follow one pattern).
func (o *Options) EnsureDefaults() {}

// Validate reports every problem of o at once.
func (o *Options) Validate() error {
	var errs []error
	if o.Compression != snapfmt.CompressionNone && o.Compression != snapfmt.CompressionZstd {
		errs = append(errs, fmt.Errorf("file: %w: compression %q (want \"\" or \"zstd\")", backend.ErrInvalidArgument, o.Compression))
	}
	return errors.Join(errs...)
}

// Backend is a file backend instance. It implements backend.Backend and
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
// empty (files read from opts.RestoreStore).
func Open(opts backend.Options, fo Options) (*Backend, error) {
	opts.EnsureDefaults()
	fo.EnsureDefaults()
	if err := errors.Join(opts.Validate(), fo.Validate()); err != nil {
		return nil, fmt.Errorf("file: open: %w", err)
	}
	b, err := memsnap.Open(memsnap.Config{
		Kind:        backend.KindFile,
		Options:     opts,
		Compression: fo.Compression,
		TempDir:     fo.TempDir,
		Snapshots:   opts.Store,
		RestoreSource: func(*backend.Handle) ([]tiered.Store, string) {
			return []tiered.Store{opts.RestoreStore}, ""
		},
	})
	if err != nil {
		return nil, err
	}
	return &Backend{b}, nil
}
