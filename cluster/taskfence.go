// The daemon's fencing tokens in cluster mode.

package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
)

// TaskFence adapts the cluster's tokens to the daemon: a task is named
// "<job>/<operator>/<subtask>" and held by this node's id.
//
// Before the first token it registers the node's changelog run (before),
// so that no segment of an unregistered run is ever live.
type TaskFence struct {
	c      *Member
	before func(context.Context) error
}

// NewTaskFence fences the tasks this node opens with the cluster's
// tokens; before (nil: nothing) runs before each Acquire.
func NewTaskFence(c *Member, before func(context.Context) error) TaskFence {
	if before == nil {
		before = func(context.Context) error { return nil }
	}
	return TaskFence{c: c, before: before}
}

func fenceKey(t backend.TaskID) string { return fmt.Sprintf("%s/%s/%d", t.Job, t.Operator, t.Subtask) }

// Every call is watched: refused at once, or ended, when the node cannot
// serve it (not joined, removed, no quorum).
func (f TaskFence) Acquire(ctx context.Context, t backend.TaskID) (tok uint64, err error) {
	err = watched(ctx, f.c, func(ctx context.Context) error {
		if err := f.before(ctx); err != nil {
			return err
		}
		tok, err = f.c.Acquire(ctx, fenceKey(t), f.c.ID())
		return err
	})
	return tok, err
}

func (f TaskFence) Check(ctx context.Context, t backend.TaskID, token uint64) error {
	return watched(ctx, f.c, func(ctx context.Context) error { return fencedErr(f.c.Check(ctx, fenceKey(t), token)) })
}

func (f TaskFence) Release(ctx context.Context, t backend.TaskID, token uint64) error {
	return watched(ctx, f.c, func(ctx context.Context) error { return fencedErr(f.c.Release(ctx, fenceKey(t), token)) })
}

// fencedErr makes a refusal of the cluster's tokens one of the catalog's
// (and so the daemon's) ErrFenced.
func fencedErr(err error) error {
	if errors.Is(err, ErrFenced) {
		return fmt.Errorf("%w: %w", catalog.ErrFenced, err)
	}
	return err
}
