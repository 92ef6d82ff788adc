package hist

import (
	"math"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// nearestRank is the reference: the value of rank ceil(q*n) in sorted.
func nearestRank(sorted []int64, q float64) int64 {
	r := int(math.Ceil(q * float64(len(sorted))))
	r = max(r, 1)
	return sorted[min(r, len(sorted))-1]
}

func TestQuantileMatchesSortedSlice(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		vals := rapid.SliceOfN(rapid.OneOf(
			rapid.Int64Range(0, 200),
			rapid.Int64Range(0, 1e6),
			rapid.Int64Range(0, math.MaxInt64),
		), 1, 2000).Draw(t, "vals")
		var h Histogram
		for _, v := range vals {
			h.Record(v)
		}
		sorted := slices.Clone(vals)
		slices.Sort(sorted)
		for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 0.999, 1} {
			want := nearestRank(sorted, q)
			got := h.Quantile(q)
			if diff := math.Abs(float64(got - want)); diff > float64(want)/128+0.5 {
				t.Fatalf("q=%v: got %d, want %d (n=%d)", q, got, want, len(vals))
			}
		}
		if h.Min() != sorted[0] || h.Max() != sorted[len(sorted)-1] || h.Count() != uint64(len(vals)) {
			t.Fatalf("min/max/count %d/%d/%d, want %d/%d/%d", h.Min(), h.Max(), h.Count(), sorted[0], sorted[len(sorted)-1], len(vals))
		}
	})
}

func TestBucketsTileTheRange(t *testing.T) {
	// Every bucket starts right after the previous one ends, and index maps
	// both ends of a bucket back to it.
	prevHi := int64(-1)
	for i := 0; i < buckets; i++ {
		lo, hi := bounds(i)
		if lo != prevHi+1 || hi < lo {
			t.Fatalf("bucket %d is [%d,%d] after %d", i, lo, hi, prevHi)
		}
		if index(lo) != i || index(hi) != i {
			t.Fatalf("bucket %d [%d,%d]: index gives %d and %d", i, lo, hi, index(lo), index(hi))
		}
		prevHi = hi
		if hi == math.MaxInt64 {
			if i != buckets-1 {
				t.Fatalf("bucket %d reaches MaxInt64 but %d buckets exist", i, buckets)
			}
			return
		}
	}
	t.Fatalf("buckets end at %d, not MaxInt64", prevHi)
}

func TestMergeEqualsRecordingAll(t *testing.T) {
	var a, b, all Histogram
	for i := int64(0); i < 5000; i++ {
		v := i * i
		all.Record(v)
		if i%3 == 0 {
			a.Record(v)
		} else {
			b.Record(v)
		}
	}
	a.Merge(&b)
	for _, q := range []float64{0.5, 0.99, 0.999} {
		if a.Quantile(q) != all.Quantile(q) {
			t.Fatalf("q=%v: merged %d, all %d", q, a.Quantile(q), all.Quantile(q))
		}
	}
	if a.Count() != all.Count() || a.Min() != all.Min() || a.Max() != all.Max() || a.Mean() != all.Mean() {
		t.Fatal("merged summary differs from recording all")
	}
	var empty Histogram
	if empty.Quantile(0.5) != 0 || empty.Mean() != 0 {
		t.Fatal("empty histogram is not zero")
	}
	a.Record(-5) // negative counts as 0
	if a.Min() != 0 {
		t.Fatalf("min after a negative value: %d", a.Min())
	}
}
