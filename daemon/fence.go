package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
)

// ErrFenced is wrapped by the error of a snapshot, handle report or
// completion of an instance whose task was opened again since, here or on
// another node of the cluster: it holds a stale fencing token, and what it
// would write could overwrite the newer holder's.
var ErrFenced = catalog.ErrFenced

// Fencer hands out and checks the fencing tokens of tasks (cluster mode:
// the raft-replicated tokens of package cluster). Each open takes a new
// token; a token passes Check only while it is its task's newest. The
// daemon hands each report's and completion's tokens to its Catalog, which
// must check them (cluster mode's shared catalog does, on the leader, in
// the log write that decides).
type Fencer interface {
	Acquire(ctx context.Context, task backend.TaskID) (uint64, error)
	// Check returns an error wrapping ErrFenced when token is no longer
	// task's newest.
	Check(ctx context.Context, task backend.TaskID, token uint64) error
	// Release gives the task up if token is still its newest.
	Release(ctx context.Context, task backend.TaskID, token uint64) error
}

// fenceTimeout bounds a Release at close, which must not hold a closing
// instance up for long: a token not released is only fenced later.
const fenceTimeout = 5 * time.Second

// acquireFence takes the instance's token, when the daemon fences.
func (d *Daemon) acquireFence(ctx context.Context, task backend.TaskID) (uint64, error) {
	if d.cfg.Fence == nil {
		return 0, nil
	}
	tok, err := d.cfg.Fence.Acquire(ctx, task)
	if err != nil {
		return 0, fmt.Errorf("daemon: open %s: fencing token: %w", task, err)
	}
	return tok, nil
}

// releaseFence gives the task up at close; failures are only logged (the
// next open elsewhere takes a newer token anyway).
func (d *Daemon) releaseFence(inst *Instance) {
	if d.cfg.Fence == nil || inst.fence == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), fenceTimeout)
	defer cancel()
	if err := d.cfg.Fence.Release(ctx, inst.Task, inst.fence); err != nil && !errors.Is(err, ErrFenced) {
		d.log.Warn("fencing token not released", "task", inst.Task.String(), "token", inst.fence, "err", err)
	}
}
