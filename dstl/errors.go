package dstl

import (
	"errors"
	"fmt"

	"github.com/statedhq/stated/backend"
)

// Sentinel errors of the package. Every error dstl returns wraps one of
// them (or the caller's ctx error) with the segment, block or writer it is
// about.
var (
	// ErrCorrupt: a segment or a handle range failed a checksum or a format
	// check. It wraps backend.ErrCorrupt so that restore paths treat a
	// damaged log like any other damaged checkpoint file: never retried,
	// never silently skipped.
	ErrCorrupt = fmt.Errorf("dstl: %w", backend.ErrCorrupt)
	// ErrIncompatible: an intact segment of a newer format version.
	ErrIncompatible = fmt.Errorf("dstl: %w", backend.ErrIncompatible)
	// ErrInvalidArgument: a malformed call (empty writer id, key group out of
	// bounds, change too large, bad options).
	ErrInvalidArgument = fmt.Errorf("dstl: %w", backend.ErrInvalidArgument)
	// ErrNotFound: a handle names a segment that does not exist.
	ErrNotFound = fmt.Errorf("dstl: %w", backend.ErrNotFound)
	// ErrClosed: the Writer was closed.
	ErrClosed = errors.New("dstl: writer closed")
	// ErrUploadFailed: a segment could not be made durable after every
	// attempt. Persist of a writer whose records were in it fails with it
	// until Truncate moves past those records (a new materialization).
	ErrUploadFailed = errors.New("dstl: segment upload failed")
)

// corruptf builds an ErrCorrupt error naming the segment (when known) and
// what was wrong.
func corruptf(segment string, format string, args ...any) error {
	where := "segment"
	if segment != "" {
		where = "segment " + segment
	}
	return fmt.Errorf("%w: %s: %s", ErrCorrupt, where, fmt.Sprintf(format, args...))
}
