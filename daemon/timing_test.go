package daemon

import (
	"testing"
	"time"
)

// TestTimingsKeepTheSlowestTaskAndTheRecent: a checkpoint's timing is its
// slowest task's parts, and only the most recent timingLimit are kept.
func TestTimingsKeepTheSlowestTaskAndTheRecent(t *testing.T) {
	var tm timings
	d := &Daemon{}
	tm.record(ckptKey{"j", 1}, []*taskSnapshot{{sync: 2 * time.Millisecond, async: 10 * time.Millisecond}, {sync: 5 * time.Millisecond, async: time.Millisecond}})
	d.timing.m, d.timing.order = tm.m, tm.order
	got, ok := d.CheckpointTiming("j", 1)
	if want := (CheckpointTiming{Sync: 5 * time.Millisecond, Async: 10 * time.Millisecond, Tasks: 2}); !ok || got != want {
		t.Fatalf("timing %+v %v, want %+v", got, ok, want)
	}
	if _, ok := d.CheckpointTiming("j", 2); ok {
		t.Fatal("a timing for a checkpoint never recorded")
	}
	for id := uint64(2); id <= timingLimit+1; id++ {
		tm.record(ckptKey{"j", id}, nil)
	}
	if _, ok := tm.m[ckptKey{"j", 1}]; ok || len(tm.m) != timingLimit || len(tm.order) != timingLimit {
		t.Fatalf("kept %d timings (%d in order), the oldest present: %v", len(tm.m), len(tm.order), ok)
	}
}
