package latency

import (
	"testing"
	"time"
)

func TestHistogram(t *testing.T) {
	h := New(1e-6, 2, 20)
	for _, d := range []time.Duration{500 * time.Nanosecond, 3 * time.Microsecond, time.Second} {
		h.Observe(d)
	}
	s := h.Snapshot()
	if s.Count != 3 || s.Buckets[1e-6] != 1 || s.Buckets[4e-6] != 2 || s.Buckets[0.524288] != 2 {
		t.Fatalf("histogram %+v", s)
	}
	if s.Sum < 1 || s.Sum > 1.0001 {
		t.Fatalf("sum %v", s.Sum)
	}
}
