package hist

import (
	"math"
	"math/bits"
)

const (
	// subBits: values below 1<<subBits are exact; above, each power of two
	// has 1<<(subBits-1) buckets.
	subBits = 7
	half    = 1 << (subBits - 1)
	exact   = 1 << subBits
	// The largest int64 has 63 bits: its shift is 63-subBits.
	buckets = (63-subBits)*half + exact
)

// Histogram counts values in log-linear buckets. The zero value is empty
// and ready to use.
type Histogram struct {
	counts   [buckets]uint64
	n        uint64
	sum      float64
	min, max int64
}

func index(v int64) int {
	if v < exact {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - subBits
	return shift*half + int(uint64(v)>>shift)
}

// bounds returns the smallest and largest value of bucket i.
func bounds(i int) (lo, hi int64) {
	if i < exact {
		return int64(i), int64(i)
	}
	shift := i/half - 1
	m := int64(i%half + half)
	lo = m << shift
	return lo, lo + (int64(1) << shift) - 1
}

// Record adds v; a negative v counts as 0.
func (h *Histogram) Record(v int64) {
	if v < 0 {
		v = 0
	}
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.counts[index(v)]++
	h.n++
	h.sum += float64(v)
}

// Merge adds every value of o.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
}

// Count is the number of values recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Min and Max are the exact extremes (0 when empty).
func (h *Histogram) Min() int64 { return h.min }

// Max is the largest value recorded (0 when empty).
func (h *Histogram) Max() int64 { return h.max }

// Mean is the exact mean (0 when empty).
func (h *Histogram) Mean() float64 {
	if h.n == 0 {
		return 0
	}
	return h.sum / float64(h.n)
}

// Quantile returns the nearest-rank q-quantile (q in [0,1]): the value of
// rank ceil(q*n) in sorted order, to within 1/128 of it, clamped to the
// exact min and max. An empty histogram returns 0.
func (h *Histogram) Quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	if q <= 0 || math.IsNaN(q) {
		return h.min
	}
	if q >= 1 {
		return h.max
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := bounds(i)
			v := lo + (hi-lo)/2
			return min(max(v, h.min), h.max)
		}
	}
	return h.max
}
