package catalog

import (
	"errors"
	"fmt"

	"github.com/statedhq/stated/backend"
)

// Sentinel errors. They wrap the backend sentinels where one fits, so the
// api layer maps both to the same gRPC codes with errors.Is.
var (
	// ErrInvalidArgument: a malformed request (bad job or savepoint name, a
	// handle of another job, a file outside the layout).
	ErrInvalidArgument = fmt.Errorf("catalog: %w", backend.ErrInvalidArgument)
	// ErrNotFound: no such checkpoint, savepoint or file.
	ErrNotFound = fmt.Errorf("catalog: %w", backend.ErrNotFound)
	// ErrCorrupt: a manifest, catalog file or data file failed its checks.
	ErrCorrupt = fmt.Errorf("catalog: %w", backend.ErrCorrupt)
	// ErrExists: a checkpoint or savepoint id is already in use.
	ErrExists = errors.New("catalog: already exists")
	// ErrState: the operation does not fit the checkpoint's state (abort of
	// a completed checkpoint, complete of one that was never begun, two
	// concurrent completions of the same checkpoint).
	ErrState = errors.New("catalog: wrong checkpoint state")
	// ErrClosed: the catalog was closed.
	ErrClosed = errors.New("catalog: closed")
	// ErrFenced: a report or completion of an instance whose task was
	// opened again since (cluster mode): it holds a stale fencing token.
	// daemon.ErrFenced is this error, so a shared catalog that checks
	// tokens itself answers with the daemon's class.
	ErrFenced = errors.New("fenced")
)
