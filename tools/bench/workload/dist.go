package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Distribution names.
const (
	Uniform = "uniform"
	Zipfian = "zipfian"
	Latest  = "latest"
)

// DefaultSkew is YCSB's zipfian constant.
const DefaultSkew = 0.99

// Chooser picks an index in [0, n) for a key population of n items (n may
// grow between calls: inserts add items).
type Chooser interface {
	Next(r *rand.Rand, n int) int
}

// NewChooser returns the chooser of a distribution over n0 initial items.
// skew is the zipfian constant of zipfian and latest, in (0, 1).
func NewChooser(dist string, skew float64, n0 int) (Chooser, error) {
	switch dist {
	case Uniform:
		return uniform{}, nil
	case Zipfian, Latest:
		z, err := NewZipf(n0, skew)
		if err != nil {
			return nil, err
		}
		if dist == Latest {
			return latest{z}, nil
		}
		return z, nil
	}
	return nil, fmt.Errorf("workload: distribution %q is not %s, %s or %s", dist, Uniform, Zipfian, Latest)
}

type uniform struct{}

func (uniform) Next(r *rand.Rand, n int) int {
	if n <= 1 {
		return 0
	}
	return r.IntN(n)
}

// Zipf draws ranks 0..n-1 with P(rank i) proportional to 1/(i+1)^skew: rank 0
// is the hottest. It is the generator of Gray et al., "Quickly generating
// billion-record synthetic databases" (SIGMOD 1994), which YCSB uses.
type Zipf struct {
	n                   int
	theta, alpha, zetan float64
	eta, half           float64
}

// NewZipf returns a zipfian generator over n >= 1 items with skew in (0, 1).
func NewZipf(n int, skew float64) (*Zipf, error) {
	if n < 1 {
		return nil, fmt.Errorf("workload: zipfian over %d items: need at least 1", n)
	}
	if !(skew > 0 && skew < 1) {
		return nil, fmt.Errorf("workload: zipfian skew %v is outside (0, 1)", skew)
	}
	z := &Zipf{n: n, theta: skew, alpha: 1 / (1 - skew), zetan: zeta(n, skew)}
	z.half = math.Pow(0.5, skew)
	if n > 2 {
		z.eta = (1 - math.Pow(2/float64(n), 1-skew)) / (1 - zeta(2, skew)/z.zetan)
	}
	return z, nil
}

// zetaExact is how many terms zeta sums exactly; beyond, the sum of the
// remaining terms is the integral of x^-theta (error far below 1e-6 of the
// total), so a generator over a billion keys is built at once.
const zetaExact = 100_000

func zeta(n int, theta float64) float64 {
	var s float64
	m := min(n, zetaExact)
	for i := 1; i <= m; i++ {
		s += math.Pow(float64(i), -theta)
	}
	if n > m {
		// Midpoint rule: sum_{i=m+1}^{n} i^-t ~ integral from m+0.5 to n+0.5.
		e := 1 - theta
		s += (math.Pow(float64(n)+0.5, e) - math.Pow(float64(m)+0.5, e)) / e
	}
	return s
}

// Next draws a rank in [0, min(n, N)) where N is the generator's item
// count; n lets a shrinking population still get valid ranks.
func (z *Zipf) Next(r *rand.Rand, n int) int {
	u := r.Float64()
	uz := u * z.zetan
	var v int
	switch {
	case uz < 1:
		v = 0
	case uz < 1+z.half:
		v = 1
	default:
		v = int(float64(z.n) * math.Pow(z.eta*u-z.eta+1, z.alpha))
	}
	lim := min(n, z.n)
	if v >= lim {
		v = lim - 1
	}
	return max(v, 0)
}

// latest favours the newest items: YCSB's "latest", the newest item is the
// hottest and popularity falls off as zipfian by age.
type latest struct{ z *Zipf }

func (l latest) Next(r *rand.Rand, n int) int {
	if n <= 1 {
		return 0
	}
	return n - 1 - l.z.Next(r, n)
}
