package catalog

import (
	"context"
	"time"
)

// A replicated catalog's job files are a mirror. The log and every node's
// replica hold the history, pins and adoptions a job file records, and a
// new leader's catalog opens from its replica, not from the files; they
// are there for readers of the store outside the cluster (`stated
// checkpoints --data-dir`, a daemon opened alone over the store, a
// cluster rebuilt without its raft dirs). Their writes were best effort
// already (a failed one is logged, the completion stands), so a
// completion answers once the log has it and its job file follows here,
// in the background: one fsync'd write (a PUT on S3) less on the path of
// every completion. A single catalog's job file is its own record and is
// written before its calls answer, as before.

// mirrorPassTimeout bounds one pass of the writer (the job files marked
// since the last), so that Close, which waits for the pass under way and
// then for one more, never waits on a store that does not answer.
const mirrorPassTimeout = 10 * time.Second

// startMirror runs a replicated catalog's job-file writer until Close.
func (c *Catalog) startMirror() {
	kick, stop, done := make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	c.mu.Lock()
	if c.mu.mirrorStop != nil {
		c.mu.Unlock()
		return
	}
	c.mu.mirrorKick, c.mu.mirrorStop, c.mu.mirrorDone = kick, stop, done
	c.mu.Unlock()
	go func() {
		defer close(done)
		pass := func() {
			ctx, cancel := context.WithTimeout(context.Background(), mirrorPassTimeout)
			defer cancel()
			c.writeMirrored(ctx)
		}
		for {
			select {
			case <-kick:
				pass()
			case <-stop:
				// What is still to write goes before Close returns: a
				// clean shutdown leaves the mirror current.
				pass()
				return
			}
		}
	}()
}

// mirrorJob has job's file written after the caller returns (a catalog
// without the writer writes it now).
func (c *Catalog) mirrorJob(ctx context.Context, job string) {
	c.mu.Lock()
	kick := c.mu.mirrorKick
	if kick == nil || c.mu.mirrorStop == nil {
		c.mu.Unlock()
		c.saveJobLogged(ctx, job)
		return
	}
	if c.mu.mirrorDirty == nil {
		c.mu.mirrorDirty = map[string]bool{}
	}
	c.mu.mirrorDirty[job] = true
	c.mu.Unlock()
	select {
	case kick <- struct{}{}:
	default: // a kick is pending: the writer takes this job with it
	}
}

// writeMirrored writes the job files marked since the last pass. Each
// write takes the job's state at its start (saveJob), so marks made while
// one is written are written again by the next pass.
func (c *Catalog) writeMirrored(ctx context.Context) {
	c.mu.Lock()
	dirty := c.mu.mirrorDirty
	c.mu.mirrorDirty = nil
	c.mu.Unlock()
	for job := range dirty {
		c.saveJobLogged(ctx, job)
	}
}

// stopMirror stops the writer after it wrote what was marked.
func (c *Catalog) stopMirror() {
	c.mu.Lock()
	stop, done := c.mu.mirrorStop, c.mu.mirrorDone
	c.mu.mirrorStop = nil
	c.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}
