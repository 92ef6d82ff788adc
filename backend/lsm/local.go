package lsm

// Local mode (no Options.Remote): Pebble keeps every SST on the local
// disk. Checkpoints hard-link the SSTs and upload those the confirmed base
// does not hold (snapshot.go); restores download the files they need
// (restore.go, planned in restoreplan.go); bulk loads write SSTs and
// ingest them (view.go). The checkpoint store holds nothing of the
// instance's but finished checkpoints, so there is nothing to hold or
// release and no background work.

import (
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/statedhq/stated/backend"
)

// localMode is the mode of an instance without Options.Remote.
type localMode struct{ b *Backend }

var _ mode = localMode{}

func (m localMode) restore(ctx context.Context, keepHistory bool) ([]backend.StateDescriptor, error) {
	return m.b.restore(ctx, keepHistory)
}

func (localMode) start() error { return nil }

func (localMode) pebbleOptions(*pebble.Options) {}

func (m localMode) snapshot(ctx context.Context, checkpointID uint64) (backend.PendingSnapshot, error) {
	task := m.b.opts.Task
	if m.b.lo.ObjectPrefix != "" {
		// An engine's directory (Options.ObjectPrefix): the checkpoint's
		// directory holds files only, named after the task, because the
		// engine deletes it without recursion once it deleted the files
		// it knows. Flink does (FsCompletedCheckpointStorageLocation), and
		// a subdirectory there made its discard fail, which also skipped
		// the deletion of the checkpoint's shared files.
		return m.b.snapshot(ctx, checkpointID, fmt.Sprintf("%schk-%d/%s-", m.b.objectPrefix(), checkpointID, task.Dir()))
	}
	return m.b.snapshot(ctx, checkpointID, fmt.Sprintf("%schk-%d/%s/", m.b.objectPrefix(), checkpointID, task.Dir()))
}

func (m localMode) baseSnapshot(ctx context.Context, id uint64, dir string) (backend.PendingSnapshot, error) {
	return m.b.snapshot(ctx, id, dir+"/")
}

func (m localMode) load() (backend.LoadSession, error) { return m.b.sstLoad() }

// The checkpoint history (Backend.inc) is all local mode keeps of a
// checkpoint; a base's files are the registry's alone.
func (localMode) checkpointComplete(uint64)                      {}
func (localMode) checkpointAborted(uint64)                       {}
func (localMode) holdBase(context.Context, uint64, uint64) error { return nil }
func (localMode) handOffRetries() int64                          { return 0 }
func (localMode) refreshLease(context.Context) error             { return nil }
func (localMode) heldBases() []uint64                            { return nil }
func (localMode) restoreMarked() bool                            { return true }
func (localMode) abandon()                                       {}

func (m localMode) close() error {
	if m.b.db == nil {
		return nil
	}
	return m.b.db.Close()
}
