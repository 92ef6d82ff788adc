package daemon

import (
	"sync"
	"time"
)

// CheckpointTiming is how long the parts of a completed checkpoint took
// on this daemon: the slowest task's synchronous part (the task was
// blocked) and asynchronous part (the upload). The catalog does not keep
// them: they describe this process's run, not the checkpoint's content.
type CheckpointTiming struct {
	Sync, Async time.Duration
	// Tasks is how many of the checkpoint's tasks this daemon ran.
	Tasks int
}

// timingLimit bounds the timings kept (the most recent completions).
const timingLimit = 4096

// timings remembers the timing of recent completed checkpoints; its zero
// value is ready.
type timings struct {
	mu    sync.Mutex
	m     map[ckptKey]CheckpointTiming
	order []ckptKey
}

func (t *timings) record(key ckptKey, snaps []*taskSnapshot) {
	var ct CheckpointTiming
	for _, ts := range snaps {
		ct.Sync, ct.Async = max(ct.Sync, ts.sync), max(ct.Async, ts.async)
		ct.Tasks++
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[ckptKey]CheckpointTiming{}
	}
	if _, ok := t.m[key]; !ok {
		t.order = append(t.order, key)
	}
	t.m[key] = ct
	for len(t.order) > timingLimit {
		delete(t.m, t.order[0])
		t.order = t.order[1:]
	}
}

// CheckpointTiming returns the timing of checkpoint id of job if this
// daemon completed it recently (false: another process did, or it failed,
// or it is too old).
func (d *Daemon) CheckpointTiming(job string, id uint64) (CheckpointTiming, bool) {
	d.timing.mu.Lock()
	defer d.timing.mu.Unlock()
	ct, ok := d.timing.m[ckptKey{job, id}]
	return ct, ok
}
