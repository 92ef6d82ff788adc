package daemon

import (
	"context"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
)

// CheckpointInfo describes one checkpoint of a job.
type CheckpointInfo struct {
	Job string
	ID  uint64
	// Status is "completed", "in-progress", "aborted", "declined" or
	// "expired".
	Status           string
	Tasks            []backend.TaskID
	CheckpointedSize int64
	FullSize         int64
	Duration         time.Duration
	Reason           string
	Completed        time.Time
}

// RestoreSpec names what to restore an instance from.
type RestoreSpec struct {
	// Exactly one of Latest, CheckpointID and Savepoint is set.
	Latest       bool
	CheckpointID uint64
	// Savepoint is the savepoint's directory relative to the checkpoint root.
	Savepoint string
	// Claim: the restored job takes ownership of the checkpoint's files.
	// Otherwise (no-claim) they are never modified, and the first new
	// checkpoint shares no file with them.
	Claim bool
}

// Restored is a resolved restore source.
type Restored struct {
	// CheckpointID is the restored checkpoint (0 for a savepoint).
	CheckpointID uint64
	Savepoint    string
	// Handles are every task handle of the checkpoint or savepoint; the
	// daemon keeps those that overlap the instance's key groups.
	Handles []*backend.Handle
	// Store is where the handles' paths are read from; nil means the
	// checkpoint store.
	Store tiered.Store
}

// Savepoint describes a written savepoint.
type Savepoint struct {
	// Dir is the savepoint's directory relative to the checkpoint root.
	Dir   string
	Tasks []backend.TaskID
	Size  int64
}

// Catalog is what the daemon needs from the checkpoint catalog: it records
// the task handles of checkpoints, makes completed ones durable (the job's
// _metadata), and finds them again after a restart.
//
// Contract: safe for concurrent use. AddTaskHandle is only called for a
// checkpoint that BeginCheckpoint began; Complete registers the handles for
// reference counting and writes the manifest; Abort discards what only the
// aborted checkpoint referenced. List returns completed checkpoints (and
// any other history the catalog keeps) in ascending id order.
type Catalog interface {
	BeginCheckpoint(job string, id uint64) error
	AddTaskHandle(job string, id uint64, h *backend.Handle) error
	Complete(ctx context.Context, job string, id uint64) (CheckpointInfo, error)
	Abort(ctx context.Context, job string, id uint64, reason string) error
	List(ctx context.Context, job string) ([]CheckpointInfo, error)
	// Restore resolves spec for job. It fails with an error wrapping
	// backend.ErrNotFound when the job has no such checkpoint.
	Restore(ctx context.Context, job string, spec RestoreSpec) (Restored, error)
	// BeginSavepoint reserves a new savepoint directory of job (relative
	// to the checkpoint root) for the daemon to write canonical task
	// snapshots into.
	BeginSavepoint(ctx context.Context, job string) (dir string, err error)
	// CompleteSavepoint writes the savepoint's manifest over handles, whose
	// paths are relative to dir.
	CompleteSavepoint(ctx context.Context, job, dir string, handles []*backend.Handle) (Savepoint, error)
	// AbortSavepoint discards a savepoint that did not complete.
	AbortSavepoint(ctx context.Context, job, dir string) error
	Close() error
}
