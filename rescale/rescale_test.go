package rescale_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
)

// boundaryKeyGroups returns the first and last key group of every range of
// every parallelism 1..maxPar, plus every seventh key group: the key groups
// where an off-by-one in clipping or copying would show.
func boundaryKeyGroups(maxP, maxPar int, extra ...int) []int {
	set := map[int]bool{}
	for p := 1; p <= maxPar; p++ {
		for i := 0; i < p; i++ {
			r := backend.KeyGroupRangeForOperator(maxP, p, i)
			set[r.Start], set[r.End] = true, true
		}
	}
	for kg := 3; kg < maxP; kg += 7 {
		set[kg] = true
	}
	for _, kg := range extra {
		set[kg] = true
	}
	out := make([]int, 0, len(set))
	for kg := range set {
		out = append(out, kg)
	}
	sort.Ints(out)
	return out
}

// TestRescaleEveryPairUpTo8 restores every (old, new) parallelism pair in
// 1..8 for every backend, from one snapshot per old subtask, and checks
// each new subtask against the model.
func TestRescaleEveryPairUpTo8(t *testing.T) {
	const maxP = 128
	kgs := boundaryKeyGroups(maxP, 8)
	for _, kc := range testKinds(t) {
		t.Run(kc.String(), func(t *testing.T) {
			for oldP := 1; oldP <= 8; oldP++ {
				j := newJob(t, kc, maxP, oldP, append([]int(nil), kgs...))
				for newP := 1; newP <= 8; newP++ {
					t.Run(fmt.Sprintf("%d-%d", oldP, newP), func(t *testing.T) {
						plan, subs := j.rescaleTo(t, newP, j.handles)
						j.checkRescale(t, plan, subs)
						closeAll(t, subs)
					})
				}
			}
		})
	}
}

var seedFlag = flag.Uint64("rescale.seed", 0, "seed of TestRescaleRandomLarger (0: from the clock)")

// TestRescaleRandomLarger samples larger parallelisms with maxParallelism
// 128 and 4096, plus the extremes (to and from 1 and maxParallelism), and
// rescales twice: the second time from checkpoints of the rescaled
// subtasks, so data clipped away by the first restore must not come back.
func TestRescaleRandomLarger(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -rescale.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	for _, kc := range testKinds(t) {
		t.Run(kc.String(), func(t *testing.T) {
			// Parallelisms past 8 (TestRescaleEveryPairUpTo8 has those);
			// lsm restores cost milliseconds each, so its sample is smaller.
			maxPar, draws := 64, 3
			if kc.kind == backend.KindLSM {
				maxPar, draws = 32, 2
			}
			par := func() int { return 9 + rng.IntN(maxPar-8) }
			type tc struct{ maxP, oldP, newP, thenP int }
			cases := []tc{{128, 1, 128, 3}, {128, 128, 1, 5}}
			for _, maxP := range []int{128, 4096} {
				for d := 0; d < draws; d++ {
					cases = append(cases, tc{maxP, par(), par(), par()})
				}
			}
			for _, c := range cases {
				t.Run(fmt.Sprintf("max%d-%d-%d-%d", c.maxP, c.oldP, c.newP, c.thenP), func(t *testing.T) {
					var extra []int
					for _, p := range []int{c.oldP, c.newP, c.thenP} {
						for i := 0; i < p; i++ {
							r := backend.KeyGroupRangeForOperator(c.maxP, p, i)
							extra = append(extra, r.Start, r.End)
						}
					}
					for n := 0; n < 40; n++ {
						extra = append(extra, rng.IntN(c.maxP))
					}
					j := newJob(t, kc, c.maxP, c.oldP, dedupe(extra))
					plan, subs := j.rescaleTo(t, c.newP, j.handles)
					// Checkpoint before the checks read (and poll timers).
					hs := j.checkpointAll(t, plan, subs)
					j.checkRescale(t, plan, subs)
					closeAll(t, subs)
					plan, subs = j.rescaleTo(t, c.thenP, hs)
					j.checkRescale(t, plan, subs)
					closeAll(t, subs)
				})
			}
		})
	}
}

func dedupe(xs []int) []int {
	set := map[int]bool{}
	var out []int
	for _, x := range xs {
		if !set[x] {
			set[x] = true
			out = append(out, x)
		}
	}
	sort.Ints(out)
	return out
}

// TestRescaleThroughSavepoint moves a job from every backend to every
// backend through canonical savepoints (restored in no-claim mode from the
// savepoint's store) while changing its parallelism both ways.
func TestRescaleThroughSavepoint(t *testing.T) {
	const maxP = 128
	var kinds []kindCase
	for _, kc := range testKinds(t) {
		// Restores from canonical (file) handles never graft.
		if !kc.copies {
			kinds = append(kinds, kc)
		}
	}
	for _, from := range kinds {
		for _, c := range []struct{ oldP, newP int }{{3, 5}, {4, 1}} {
			j := newJobSnap(t, from, maxP, c.oldP, boundaryKeyGroups(maxP, 5), true)
			for _, into := range kinds {
				t.Run(fmt.Sprintf("%s-to-%s/%d-%d", from.kind, into.kind, c.oldP, c.newP), func(t *testing.T) {
					j.into = into
					plan, subs := j.rescaleTo(t, c.newP, j.handles)
					j.checkRescale(t, plan, subs)
					closeAll(t, subs)
				})
			}
		}
	}
}
