package daemon

import (
	"context"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/tiered"
)

// Catalog is what the daemon asks of the checkpoint catalog: a
// *catalog.Catalog when the daemon runs alone, or in cluster mode a client
// of the one catalog the cluster's leader hosts (see SharedCatalog). The
// methods mean what they mean on *catalog.Catalog.
type Catalog interface {
	Store() tiered.Store
	GCGrace() time.Duration
	HeapStore() tiered.Store
	BeginCheckpoint(job string, id uint64) error
	// AddFencedTaskHandle reports a task's handle, taken by an instance
	// holding fencing token (0: the daemon does not fence). A catalog
	// that is handed a token checks it as it keeps the report (cluster
	// mode: in the same log write) and refuses a stale one with an error
	// wrapping ErrFenced; one that cannot check tokens refuses them.
	AddFencedTaskHandle(job string, id uint64, h *backend.Handle, token uint64) error
	// CompleteWithReports completes a checkpoint that must hold a handle
	// of every task in tasks (none: of every task of the job), whose
	// caller holds instances of its tasks under tokens, and hands over
	// reports of its own tasks not reported yet (cluster mode: taken in
	// the completion's own log write, each under its token). A stale
	// token is an error wrapping ErrFenced; reports of a completion that
	// failed are not in the catalog.
	CompleteWithReports(ctx context.Context, job string, id uint64, tasks []backend.TaskID, tokens map[backend.TaskID]uint64,
		reports []catalog.FencedHandle) (*catalog.Manifest, error)
	Abort(ctx context.Context, job string, id uint64, why catalog.Status, reason string) error
	Release(ctx context.Context, job string, id uint64) error
	Checkpoint(job string, id uint64) (*catalog.Manifest, bool)
	Latest(job string) (*catalog.Manifest, bool)
	Savepoint(id string) (*catalog.Manifest, bool)
	Retained(job string) []uint64
	List(job string) []catalog.Record
	// The lookups with their errors: in cluster mode the catalog is
	// reached across nodes, and one it could not reach is an error
	// (UNAVAILABLE with the reason), never an empty list or "not
	// retained". SavepointContext also finds savepoints written into the
	// store by another process ("stated savepoint edit", "bootstrap")
	// since the catalog opened.
	CheckpointContext(ctx context.Context, job string, id uint64) (*catalog.Manifest, bool, error)
	LatestContext(ctx context.Context, job string) (*catalog.Manifest, bool, error)
	SavepointContext(ctx context.Context, id string) (*catalog.Manifest, bool, error)
	RetainedContext(ctx context.Context, job string) ([]uint64, error)
	ListContext(ctx context.Context, job string) ([]catalog.Record, error)
	RestoreSource(ctx context.Context, req catalog.RestoreRequest) (*catalog.Restore, error)
	TriggerSavepoint(ctx context.Context, req catalog.SavepointRequest) (*catalog.Manifest, error)
	// SavepointOfCheckpoint copies retained checkpoint id of job (0: the
	// latest) into a new native savepoint: a cluster's savepoints, since
	// a job's tasks live on several daemons there.
	SavepointOfCheckpoint(ctx context.Context, job string, id uint64) (*catalog.Manifest, error)
	NoteWithoutChannelState(ctx context.Context, job string, id uint64)
	ReleaseLog(ctx context.Context, names []string) error
}

var _ Catalog = (*catalog.Catalog)(nil)

// CheckpointInfo describes one checkpoint of a job.
type CheckpointInfo struct {
	Job string
	ID  uint64
	// Status is one of the catalog's statuses ("completed", "in_progress",
	// "aborted", "declined", "expired").
	Status           string
	Tasks            int
	CheckpointedSize int64
	FullSize         int64
	Duration         time.Duration
	Reason           string
	// Completed is when it completed (zero if it did not).
	Completed time.Time
	// Retained says it can still be restored from.
	Retained bool
	// Pinned: a no-claim restore of its own job pinned it, so the job's
	// retention never deletes it.
	Pinned bool
	// ChangelogSize is the log bytes its changelog-mode tasks read after
	// their bases (FullSize is the materialized rest); known for retained
	// checkpoints only.
	ChangelogSize int64
	// Stats sums up the tasks' statistics (completed checkpoints whose
	// tasks reported them); WithoutChannelState says a restore skipped its
	// channel state.
	Stats               catalog.CheckpointStats
	WithoutChannelState bool
}

func infoFromManifest(m *catalog.Manifest) CheckpointInfo {
	return CheckpointInfo{
		Job: m.Job, ID: m.CheckpointID, Status: string(catalog.StatusCompleted), Tasks: len(m.Tasks),
		CheckpointedSize: m.CheckpointedSize, FullSize: m.FullSize, Duration: m.Duration(),
		Completed: m.Completed, Retained: true, ChangelogSize: m.ChangelogSize(), Stats: m.Stats(),
	}
}

func infoFromRecord(job string, r catalog.Record, now time.Time) CheckpointInfo {
	in := CheckpointInfo{
		Job: job, ID: r.ID, Status: string(r.Status), Tasks: r.Tasks,
		CheckpointedSize: r.CheckpointedSize, FullSize: r.FullSize, Duration: r.Duration(now),
		Reason: r.Reason, Retained: r.Retained, Pinned: r.Pinned,
		Stats: r.Stats, WithoutChannelState: r.WithoutChannelState,
	}
	if r.Status == catalog.StatusCompleted {
		in.Completed = r.Ended
	}
	return in
}

// RestoreSpec names what to restore an instance from.
type RestoreSpec struct {
	// Exactly one of Latest, CheckpointID and Savepoint is set.
	Latest       bool
	CheckpointID uint64
	// Savepoint is the savepoint's id or its directory ("savepoints/<id>").
	Savepoint string
	// Claim: the restored job takes ownership of the checkpoint's files;
	// its retention deletes them once newer checkpoints subsume it.
	// NoClaim: they are never modified (the checkpoint is pinned if the
	// job owns it), and the first new checkpoint shares no file with them.
	// At most one of the two is set. Neither: claim for Latest (a failover
	// of the same job, as Flink restores its own checkpoints, so restarts
	// do not pile up pinned checkpoints) and no-claim for an explicit
	// CheckpointID. Savepoints are never owned by a job.
	Claim, NoClaim bool
	// WithoutChannelState, when set, must be the id of the checkpoint the
	// restore resolves to: its keyed and operator state are restored and
	// its channel state is skipped (knowingly lost: it was damaged). The
	// catalog's history records it.
	WithoutChannelState uint64
	// AllowFallback, with Latest: when the newest checkpoints are damaged,
	// restore the newest intact one (logged at level error and counted in
	// Metrics.RestoreFallbacks). Without it such a restore fails with an
	// error wrapping backend.ErrCorrupt that names the damaged checkpoint
	// and the newest intact one.
	AllowFallback bool
}

// claim resolves the mode (see Claim).
func (s *RestoreSpec) claim() bool {
	if s.Claim || s.NoClaim {
		return s.Claim
	}
	return s.Latest
}

// Savepoint describes a written savepoint.
type Savepoint struct {
	// Dir is the savepoint's directory relative to the checkpoint root.
	Dir   string
	Tasks int
	Size  int64
}
