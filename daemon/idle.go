package daemon

import "time"

// reapInterval is how often the reaper looks for idle instances: often
// enough that one is closed within about a quarter of the timeout past it,
// at most once a minute.
func reapInterval(timeout time.Duration) time.Duration {
	return min(max(timeout/4, 10*time.Millisecond), time.Minute)
}

// markIdle marks in as reaped if it has had no batch stream and no
// snapshot running for longer than timeout; once marked, no stream can
// attach, so closing it cannot cut a task that just came back.
func (in *Instance) markIdle(now time.Time, timeout time.Duration) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed || in.reaped || in.streams > 0 || in.pending > 0 || in.detached.IsZero() {
		return false
	}
	if now.Sub(in.detached) <= timeout {
		return false
	}
	in.reaped = true
	return true
}

// reap closes the instances that have been idle past
// Config.IdleInstanceTimeout (see there) and schedules the next pass. It
// runs on the reaper timer's goroutine; Shutdown stops the timer.
func (d *Daemon) reap() {
	now := time.Now()
	d.mu.Lock()
	if d.closing {
		d.mu.Unlock()
		return
	}
	var idle []*Instance
	for _, in := range d.instances {
		if in.markIdle(now, d.cfg.IdleInstanceTimeout) {
			idle = append(idle, in)
			d.removeLocked(in)
		}
	}
	d.reaper.Reset(reapInterval(d.cfg.IdleInstanceTimeout))
	d.mu.Unlock()
	for _, in := range idle {
		d.log.Warn("instance closed: no batch stream", "task", in.Task.String(), "instance", in.IDString(),
			"idle_timeout", d.cfg.IdleInstanceTimeout.String())
		if err := in.close(); err != nil {
			d.log.Warn("close idle instance", "task", in.Task.String(), "err", err)
		}
		// Counted once closed: a reader of the counter sees the instance
		// gone and closed.
		d.m.InstancesReaped.Add(1)
	}
}
