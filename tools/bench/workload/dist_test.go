package workload

import (
	"math"
	"math/rand/v2"
	"testing"

	"pgregory.net/rapid"
)

func TestChoosersStayInRange(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		dist := rapid.SampledFrom([]string{Uniform, Zipfian, Latest}).Draw(t, "dist")
		n0 := rapid.IntRange(1, 5_000_000).Draw(t, "n0")
		skew := rapid.Float64Range(0.01, 0.999).Draw(t, "skew")
		c, err := NewChooser(dist, skew, n0)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 1))
		// The population may have grown (inserts) or be smaller.
		n := rapid.IntRange(1, 2*n0).Draw(t, "n")
		for i := 0; i < 200; i++ {
			if v := c.Next(r, n); v < 0 || v >= n {
				t.Fatalf("%s(n0=%d, skew=%v) over %d items drew %d", dist, n0, skew, n, v)
			}
		}
	})
}

func TestZipfianSkewShows(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		skew := rapid.Float64Range(0.5, 0.99).Draw(t, "skew")
		const n, draws = 1000, 20000
		z, err := NewZipf(n, skew)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 2))
		counts := make([]int, n)
		for i := 0; i < draws; i++ {
			counts[z.Next(r, n)]++
		}
		// Rank 0 comes up with probability 1/zeta(n, skew).
		want := draws / zeta(n, skew)
		if got := float64(counts[0]); math.Abs(got-want) > 5*math.Sqrt(want)+1 {
			t.Fatalf("skew %v: rank 0 drawn %v times, want about %.0f", skew, got, want)
		}
		// The hottest 10% of items take far more than 10% of the draws.
		hot := 0
		for _, c := range counts[:n/10] {
			hot += c
		}
		if hot < draws/5 {
			t.Fatalf("skew %v: the top 10%% of items drew %d of %d", skew, hot, draws)
		}
	})
}

func TestLatestFavoursNewest(t *testing.T) {
	c, err := NewChooser(Latest, DefaultSkew, 1000)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 3))
	newest, oldestHalf := 0, 0
	for i := 0; i < 10000; i++ {
		v := c.Next(r, 1200) // 200 inserted since the load
		if v == 1199 {
			newest++
		}
		if v < 600 {
			oldestHalf++
		}
	}
	if newest < 1000 || oldestHalf > 2000 {
		t.Fatalf("latest: newest drawn %d times, oldest half %d times of 10000", newest, oldestHalf)
	}
}

func TestUniformIsFlat(t *testing.T) {
	c, _ := NewChooser(Uniform, 0, 10)
	r := rand.New(rand.NewPCG(4, 4))
	counts := make([]int, 10)
	for i := 0; i < 100000; i++ {
		counts[c.Next(r, 10)]++
	}
	for i, n := range counts {
		if n < 9000 || n > 11000 {
			t.Fatalf("uniform: index %d drawn %d times of 100000", i, n)
		}
	}
}

func TestBadDistributionParams(t *testing.T) {
	for _, tc := range []struct {
		dist string
		skew float64
		n    int
	}{{"pareto", 0.5, 10}, {Zipfian, 0, 10}, {Zipfian, 1, 10}, {Latest, math.NaN(), 10}, {Zipfian, 0.5, 0}} {
		if _, err := NewChooser(tc.dist, tc.skew, tc.n); err == nil {
			t.Errorf("NewChooser(%q, %v, %d) accepted", tc.dist, tc.skew, tc.n)
		}
	}
}

func TestZetaApproximation(t *testing.T) {
	// Beyond zetaExact terms the sum is an integral; it must stay close to
	// the exact sum.
	n := zetaExact * 3
	var exact float64
	for i := 1; i <= n; i++ {
		exact += math.Pow(float64(i), -0.99)
	}
	if got := zeta(n, 0.99); math.Abs(got-exact)/exact > 1e-6 {
		t.Fatalf("zeta(%d) = %v, exact %v", n, got, exact)
	}
}
