package latency

import (
	"math"
	"sync/atomic"
	"time"
)

// Histogram is a fixed-bucket latency histogram updated with atomics, so
// that recording costs no lock. Bounds are upper bounds in seconds, as
// Prometheus expects.
type Histogram struct {
	bounds []float64
	counts []atomic.Uint64 // len(bounds)+1; the last is +Inf
	sumNs  atomic.Int64
	count  atomic.Uint64
}

// New returns a histogram with n exponential buckets starting at
// first (seconds) and growing by factor.
func New(first, factor float64, n int) *Histogram {
	b := make([]float64, n)
	for i := range b {
		b[i] = first * math.Pow(factor, float64(i))
	}
	return &Histogram{bounds: b, counts: make([]atomic.Uint64, n+1)}
}

// Observe records one duration.
func (h *Histogram) Observe(d time.Duration) {
	h.counts[h.bucket(d)].Add(1)
	h.sumNs.Add(int64(d))
	h.count.Add(1)
}

// Bucket is the index of the bucket d falls into (len(bounds): +Inf), for
// callers that count locally and Merge later.
func (h *Histogram) Bucket(d time.Duration) int { return h.bucket(d) }

// Merge adds counts per bucket (as Bucket numbers them; a shorter slice
// leaves the rest alone) and their summed durations in nanoseconds: one
// atomic add per non-empty bucket for a whole batch of observations.
func (h *Histogram) Merge(counts []uint32, sumNs int64) {
	var n uint64
	for i, c := range counts {
		if c > 0 && i < len(h.counts) {
			h.counts[i].Add(uint64(c))
			n += uint64(c)
		}
	}
	h.sumNs.Add(sumNs)
	h.count.Add(n)
}

func (h *Histogram) bucket(d time.Duration) int {
	s := d.Seconds()
	// Few buckets: a linear scan beats a binary search here.
	i := 0
	for i < len(h.bounds) && s > h.bounds[i] {
		i++
	}
	return i
}

// Snapshot is a consistent-enough copy for export: cumulative
// bucket counts keyed by upper bound.
type Snapshot struct {
	Count   uint64
	Sum     float64 // seconds
	Buckets map[float64]uint64
}

// Snapshot copies the histogram.
func (h *Histogram) Snapshot() Snapshot {
	s := Snapshot{Buckets: make(map[float64]uint64, len(h.bounds))}
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i].Load()
		s.Buckets[b] = cum
	}
	cum += h.counts[len(h.bounds)].Load()
	// Count is the sum of the buckets, so that a concurrent Observe never
	// makes +Inf smaller than the last finite bucket.
	s.Count = cum
	s.Sum = float64(h.sumNs.Load()) / 1e9
	return s
}
