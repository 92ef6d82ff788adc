package rescale

import (
	"fmt"
	"testing"

	"github.com/statedhq/stated/backend"
)

// TestAssign: each key group of the range goes to the first handle listed
// that holds it; the base is the eligible handle that owns the most (the
// first listed on a tie).
func TestAssign(t *testing.T) {
	kgr := func(s, e int) backend.KeyGroupRange { return backend.KeyGroupRange{Start: s, End: e} }
	hs := func(rs ...backend.KeyGroupRange) []*backend.Handle {
		out := make([]*backend.Handle, len(rs))
		for i, r := range rs {
			out[i] = &backend.Handle{KeyGroups: r}
		}
		return out
	}
	all := func(int) bool { return true }
	for _, c := range []struct {
		name     string
		handles  []*backend.Handle
		r        backend.KeyGroupRange
		eligible func(int) bool
		runs     string // the runs of each handle
		base     int
	}{
		{"one handle wider than the range", hs(kgr(0, 127)), kgr(32, 63), all, "[[32,63]]", 0},
		{"scale-in: the larger share is the base", hs(kgr(0, 63), kgr(64, 127)), kgr(20, 120), all, "[[20,63]] [[64,120]]", 1},
		{"a tie goes to the first listed", hs(kgr(64, 127), kgr(0, 63)), kgr(32, 95), all, "[[64,95]] [[32,63]]", 0},
		{"the first listed wins an overlap and splits the other's runs", hs(kgr(40, 50), kgr(0, 127), kgr(0, 127)), kgr(0, 127), all,
			"[[40,50]] [[0,39] [51,127]] []", 1},
		{"only eligible handles are the base", hs(kgr(0, 100), kgr(101, 127)), kgr(0, 127), func(j int) bool { return j == 1 },
			"[[0,100]] [[101,127]]", 1},
		{"no eligible handle owns anything", hs(kgr(0, 127), kgr(0, 127)), kgr(0, 127), func(j int) bool { return j == 1 },
			"[[0,127]] []", -1},
		{"a handle outside the range owns nothing", hs(kgr(0, 9), kgr(10, 20)), kgr(10, 15), all, "[] [[10,15]]", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := Assign(c.handles, c.r)
			var runs []string
			for j := range c.handles {
				runs = append(runs, fmt.Sprint(o.Runs(j)))
				for _, run := range o.Runs(j) {
					for kg := run.Start; kg <= run.End; kg++ {
						if o.Of(kg) != j {
							t.Fatalf("Of(%d) = %d, but it is in a run of handle %d", kg, o.Of(kg), j)
						}
					}
				}
			}
			if got := fmt.Sprint(runs); got != "["+c.runs+"]" {
				t.Fatalf("runs %s, want [%s]", got, c.runs)
			}
			if got := o.Base(c.eligible); got != c.base {
				t.Fatalf("base %d, want %d", got, c.base)
			}
			if o.Of(c.r.Start-1) != -1 || o.Of(c.r.End+1) != -1 {
				t.Fatal("a key group outside the range has an owner")
			}
		})
	}
}
