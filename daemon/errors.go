package daemon

import "errors"

// Sentinel errors of the daemon, besides the backend's. The api layer maps
// each to a gRPC code.
var (
	// ErrUnknownInstance: no open instance has the id (NotFound).
	ErrUnknownInstance = errors.New("unknown instance")
	// ErrPermissionDenied: the instance belongs to another job.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrAlreadyOpen: an instance of the task is open already.
	ErrAlreadyOpen = errors.New("task already open")
	// ErrLimit: a configured limit (instances, streams, sizes) is reached.
	ErrLimit = errors.New("limit reached")
	// ErrShuttingDown: the daemon is stopping and accepts no new work.
	ErrShuttingDown = errors.New("daemon shutting down")
	// ErrCheckpointFailed: a checkpoint cannot complete (a task's snapshot
	// failed or is missing, or the checkpoint was aborted).
	ErrCheckpointFailed = errors.New("checkpoint failed")
	// ErrSnapshotGone: the restore source is a heap checkpoint, whose
	// snapshots lived in the memory of an earlier daemon process.
	ErrSnapshotGone = errors.New("heap snapshot not held by this daemon process")
	// ErrUnauthenticated: a TCP request without the right token.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrUnsupported: the request needs a feature this daemon was built or
	// configured without.
	ErrUnsupported = errors.New("unsupported")
)
