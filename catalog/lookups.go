package catalog

import (
	"context"
	"fmt"
)

// The lookups with a context and an error. A catalog of this process
// answers them from memory and never fails; they exist so that the
// daemon asks one interface (daemon.Catalog) whichever catalog it has: in
// cluster mode a client of the leader's catalog, whose lookups cross the
// network and fail as an error (UNAVAILABLE with the reason), never as an
// empty list or "not retained".

// CheckpointContext is Checkpoint.
func (c *Catalog) CheckpointContext(_ context.Context, job string, id uint64) (*Manifest, bool, error) {
	m, ok := c.Checkpoint(job, id)
	return m, ok, nil
}

// LatestContext is Latest.
func (c *Catalog) LatestContext(_ context.Context, job string) (*Manifest, bool, error) {
	m, ok := c.Latest(job)
	return m, ok, nil
}

// RetainedContext is Retained.
func (c *Catalog) RetainedContext(_ context.Context, job string) ([]uint64, error) {
	return c.Retained(job), nil
}

// ListContext is List.
func (c *Catalog) ListContext(_ context.Context, job string) ([]Record, error) {
	return c.List(job), nil
}

// SavepointOfCheckpoint copies retained checkpoint id of job (0: the
// job's latest) into a new native savepoint (SavepointFromCheckpoint with
// a new savepoint id).
func (c *Catalog) SavepointOfCheckpoint(ctx context.Context, job string, id uint64) (*Manifest, error) {
	if id == 0 {
		m, ok := c.Latest(job)
		if !ok {
			return nil, fmt.Errorf("%w: savepoint of job %s: the job has no completed checkpoint", ErrNotFound, job)
		}
		id = m.CheckpointID
	}
	return c.SavepointFromCheckpoint(ctx, "", job, id)
}
