package cost

import (
	"sync"
	"time"
)

// Sample is what a Window holds of one moment.
type Sample struct {
	At time.Time
	// Requests are the counts at At (since the store was opened).
	Requests Counts
	// Checkpoints is the number of checkpoints completed by At.
	Checkpoints uint64
}

// Window keeps samples over a span of time (the last hour), at most one
// per step, in a ring of fixed size: its memory does not grow.
type Window struct {
	mu   sync.Mutex
	step time.Duration
	ring []Sample
	next int // where the next sample goes
	n    int // samples held
}

// NewWindow keeps span's worth of samples, one per step (both > 0).
func NewWindow(span, step time.Duration) *Window {
	if step <= 0 {
		step = time.Minute
	}
	if span < step {
		span = step
	}
	return &Window{step: step, ring: make([]Sample, int(span/step)+1)}
}

// Observe records s unless the last sample is less than a step older
// (callers may call it as often as they like).
func (w *Window) Observe(s Sample) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n > 0 {
		last := w.ring[(w.next+len(w.ring)-1)%len(w.ring)]
		if s.At.Sub(last.At) < w.step {
			return
		}
	}
	w.ring[w.next] = s
	w.next = (w.next + 1) % len(w.ring)
	w.n = min(w.n+1, len(w.ring))
}

// Delta is the difference between two samples: what happened in between.
type Delta struct {
	// Elapsed is the time between the samples.
	Elapsed time.Duration
	// Requests are the requests counted in between.
	Requests Counts
	// Checkpoints completed in between.
	Checkpoints uint64
}

// PerSecond is the rate of requests of kind k.
func (d Delta) PerSecond(k Kind) float64 {
	if d.Elapsed <= 0 {
		return 0
	}
	return float64(d.Requests.Requests[k]) / d.Elapsed.Seconds()
}

// PerCheckpoint is the number of requests of kind k per checkpoint
// completed (0 when none completed).
func (d Delta) PerCheckpoint(k Kind) float64 {
	if d.Checkpoints == 0 {
		return 0
	}
	return float64(d.Requests.Requests[k]) / float64(d.Checkpoints)
}

// Since is what happened from the oldest sample the window holds to now
// (a sample taken by the caller, not recorded). With no sample yet, or
// one newer than now, it is zero.
func (w *Window) Since(now Sample) Delta {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n == 0 {
		return Delta{}
	}
	oldest := w.ring[(w.next+len(w.ring)-w.n)%len(w.ring)]
	if !now.At.After(oldest.At) {
		return Delta{}
	}
	return Delta{
		Elapsed:     now.At.Sub(oldest.At),
		Requests:    now.Requests.Sub(oldest.Requests),
		Checkpoints: now.Checkpoints - oldest.Checkpoints,
	}
}
