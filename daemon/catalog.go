package daemon

import (
	"time"

	"github.com/statedhq/stated/catalog"
)

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
}

func infoFromManifest(m *catalog.Manifest) CheckpointInfo {
	return CheckpointInfo{
		Job: m.Job, ID: m.CheckpointID, Status: string(catalog.StatusCompleted), Tasks: len(m.Tasks),
		CheckpointedSize: m.CheckpointedSize, FullSize: m.FullSize, Duration: m.Duration(),
		Completed: m.Completed, Retained: true,
	}
}

func infoFromRecord(job string, r catalog.Record, now time.Time) CheckpointInfo {
	in := CheckpointInfo{
		Job: job, ID: r.ID, Status: string(r.Status), Tasks: r.Tasks,
		CheckpointedSize: r.CheckpointedSize, FullSize: r.FullSize, Duration: r.Duration(now),
		Reason: r.Reason, Retained: r.Retained,
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
	// Claim: the restored job takes ownership of the checkpoint's files.
	// Otherwise (no-claim) they are never modified, and the first new
	// checkpoint shares no file with them.
	Claim bool
}

// Savepoint describes a written savepoint.
type Savepoint struct {
	// Dir is the savepoint's directory relative to the checkpoint root.
	Dir   string
	Tasks int
	Size  int64
}
