package daemon

import (
	"context"
	"time"
)

// One changelog segment per checkpoint (issue 39). The daemon's one log
// writer (dstl.Writer) gathers the changes of every instance into a
// shared buffer, and a checkpoint's Persist cuts that buffer at once. The
// tasks of a job reach a barrier a few milliseconds apart and keep
// writing until they do, so if each task's asynchronous part persisted
// as soon as it ran, the first cut would hold only what the early tasks
// had written by then and every later task would cut again: on S3 about
// one PUT per late task and checkpoint. Instead a task's asynchronous
// part waits (awaitBarrier, through changelog.Options.BeforePersist)
// until every task of the job here has taken its synchronous part; then
// all their changes up to the barrier are buffered, the first Persist
// cuts them into one segment, and the others find theirs in it. The
// wait is bounded by Config.ChannelStateLinger, as the pack's (pack.go),
// so that a task that never snapshots does not hold the others back, and
// it starts only once the task's own base is uploaded, so it overlaps
// with the slower tasks' synchronous parts rather than adding to them.

// syncedLocked records that ts took its synchronous part of c (or failed
// it) and opens c's barrier when that was the last task of the job here.
// d.mu is held.
func (d *Daemon) syncedLocked(c *checkpoint, ts *taskSnapshot) {
	ts.synced = true
	if !c.barrierClosed && d.allSyncedLocked(c) {
		c.barrierClosed = true
		close(c.barrier)
	}
}

// allSyncedLocked reports whether every instance of c's job open in this
// daemon has taken its synchronous part of c. d.mu is held.
func (d *Daemon) allSyncedLocked(c *checkpoint) bool {
	for t := range d.byTask {
		if t.Job != c.key.job {
			continue
		}
		if ts := c.tasks[t]; ts == nil || !ts.synced {
			return false
		}
	}
	return true
}

// awaitBarrier returns once every task of job open here has taken its
// synchronous part of checkpoint id, the linger has passed, the
// checkpoint ended, or ctx ends.
func (d *Daemon) awaitBarrier(ctx context.Context, job string, id uint64) {
	d.mu.Lock()
	c := d.ckpts[ckptKey{job, id}]
	if c == nil || c.barrierClosed {
		d.mu.Unlock()
		return
	}
	if d.allSyncedLocked(c) {
		// A task that had not snapshotted closed meanwhile.
		c.barrierClosed = true
		close(c.barrier)
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	t := time.NewTimer(d.cfg.ChannelStateLinger)
	defer t.Stop()
	select {
	case <-c.barrier:
	case <-t.C:
	case <-c.ctx.Done():
	case <-ctx.Done():
	}
}
