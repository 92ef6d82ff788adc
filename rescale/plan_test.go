package rescale

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"testing"

	"pgregory.net/rapid"

	"github.com/statedhq/stated/backend"
)

func oldHandles(maxP, p int) []*backend.Handle {
	hs := make([]*backend.Handle, p)
	for i := range hs {
		hs[i] = &backend.Handle{Version: 1, Backend: backend.KindFile,
			Task:      backend.TaskID{Job: "j", Operator: "op", Subtask: i},
			KeyGroups: backend.KeyGroupRangeForOperator(maxP, p, i), MaxParallelism: maxP}
	}
	return hs
}

// checkPlan verifies the plan's invariants independently of how it was
// computed: every new subtask's range is Flink's; its sources' overlaps
// lie in both ranges, are disjoint and cover the new range; the base has
// the largest overlap; every key group's source is the old subtask that
// OperatorForKeyGroup names.
func checkPlan(t interface{ Fatalf(string, ...any) }, plan *Plan, maxP, oldP, newP int) {
	if len(plan.Subtasks) != newP || plan.OldParallelism != oldP {
		t.Fatalf("plan has %d subtasks (old %d), want %d (old %d)", len(plan.Subtasks), plan.OldParallelism, newP, oldP)
	}
	for i, st := range plan.Subtasks {
		if want := backend.KeyGroupRangeForOperator(maxP, newP, i); st.KeyGroups != want {
			t.Fatalf("subtask %d range %s, want %s", i, st.KeyGroups, want)
		}
		seen := make([]int, st.KeyGroups.Len())
		for k, src := range st.Sources {
			if src.Overlap.Empty() || !st.KeyGroups.Covers(src.Overlap) || !src.Handle.KeyGroups.Covers(src.Overlap) {
				t.Fatalf("subtask %d source %s overlap %s outside the ranges", i, src.Handle.Task, src.Overlap)
			}
			if k > 0 && src.Overlap.Len() > st.Sources[0].Overlap.Len() {
				t.Fatalf("subtask %d base overlap %d smaller than source %d's %d", i, st.Sources[0].Overlap.Len(), k, src.Overlap.Len())
			}
			for kg := src.Overlap.Start; kg <= src.Overlap.End; kg++ {
				seen[kg-st.KeyGroups.Start]++
				if owner := backend.OperatorForKeyGroup(maxP, oldP, kg); owner != src.Handle.Task.Subtask {
					t.Fatalf("key group %d taken from old subtask %d, but it lived in %d", kg, src.Handle.Task.Subtask, owner)
				}
			}
		}
		for j, n := range seen {
			if n != 1 {
				t.Fatalf("subtask %d: key group %d covered %d times", i, st.KeyGroups.Start+j, n)
			}
		}
	}
}

func TestPlanEveryPairUpTo8(t *testing.T) {
	for _, maxP := range []int{8, 128, 4096} {
		for oldP := 1; oldP <= 8; oldP++ {
			for newP := 1; newP <= 8; newP++ {
				hs := oldHandles(maxP, oldP)
				// Reverse to show input order does not matter.
				for i, j := 0, len(hs)-1; i < j; i, j = i+1, j-1 {
					hs[i], hs[j] = hs[j], hs[i]
				}
				plan, err := PlanOperator(hs, maxP, newP)
				if err != nil {
					t.Fatalf("max %d %d->%d: %v", maxP, oldP, newP, err)
				}
				checkPlan(t, plan, maxP, oldP, newP)
			}
		}
	}
}

func TestPlanRandomLarger(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		maxP := rapid.SampledFrom([]int{128, 4096, backend.MaxMaxParallelism}).Draw(t, "max")
		oldP := rapid.IntRange(1, min(maxP, 600)).Draw(t, "old")
		newP := rapid.IntRange(1, min(maxP, 600)).Draw(t, "new")
		plan, err := PlanOperator(oldHandles(maxP, oldP), maxP, newP)
		if err != nil {
			t.Fatal(err)
		}
		checkPlan(t, plan, maxP, oldP, newP)
	})
}

func TestPlanToMaxParallelism(t *testing.T) {
	plan, err := PlanOperator(oldHandles(128, 3), 128, 128)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, plan, 128, 3, 128)
	for _, st := range plan.Subtasks {
		if st.KeyGroups.Len() != 1 || len(st.Sources) != 1 {
			t.Fatalf("subtask %d: %s from %d sources", st.Index, st.KeyGroups, len(st.Sources))
		}
	}
}

func TestPlanRefusesBadInput(t *testing.T) {
	if _, err := PlanOperator(oldHandles(128, 4), 256, 2); !errors.Is(err, ErrMaxParallelismChanged) {
		t.Fatalf("max parallelism change: %v", err)
	}
	gap := oldHandles(128, 4)
	gap = append(gap[:1], gap[2:]...)
	if _, err := PlanOperator(gap, 128, 2); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("gap: %v", err)
	}
	dup := append(oldHandles(128, 4), oldHandles(128, 4)[2])
	if _, err := PlanOperator(dup, 128, 2); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("overlap: %v", err)
	}
	if _, err := PlanOperator(oldHandles(128, 4), 128, 129); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("parallelism above max: %v", err)
	}
	other := oldHandles(128, 2)
	other[1].Task.Operator = "other"
	if _, err := PlanOperator(other, 128, 2); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("mixed operators: %v", err)
	}
}

func TestRedistributeOperatorState(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		oldP := rapid.IntRange(1, 8).Draw(t, "old")
		newP := rapid.IntRange(1, 8).Draw(t, "new")
		old := make([][]backend.OperatorList, oldP)
		var all []string
		for i := range old {
			n := rapid.IntRange(0, 10).Draw(t, fmt.Sprint("n", i))
			split := backend.OperatorList{Name: "offsets", Mode: backend.OperatorSplit}
			for e := 0; e < n; e++ {
				v := fmt.Sprintf("%d-%d", i, e)
				split.Elements = append(split.Elements, []byte(v))
				all = append(all, v)
			}
			union := backend.OperatorList{Name: "config", Mode: backend.OperatorUnion, Elements: [][]byte{[]byte(fmt.Sprint("c", i))}}
			old[i] = []backend.OperatorList{split, union}
		}
		out, err := RedistributeOperatorState(old, newP)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, lists := range out {
			if len(lists) != 2 || lists[0].Name != "config" || lists[1].Name != "offsets" {
				t.Fatalf("lists = %+v", lists)
			}
			if len(lists[0].Elements) != oldP {
				t.Fatalf("union gave %d elements, want %d", len(lists[0].Elements), oldP)
			}
			n := len(lists[1].Elements)
			if n < len(all)/newP || n > len(all)/newP+1 {
				t.Fatalf("split gave %d of %d elements to one of %d subtasks", n, len(all), newP)
			}
			for _, e := range lists[1].Elements {
				got = append(got, string(e))
			}
		}
		sort.Strings(got)
		sort.Strings(all)
		if fmt.Sprint(got) != fmt.Sprint(all) {
			t.Fatalf("split lost or duplicated elements: %v vs %v", got, all)
		}
	})
}

func TestRedistributeModeConflict(t *testing.T) {
	old := [][]backend.OperatorList{
		{{Name: "x", Mode: backend.OperatorSplit}},
		{{Name: "x", Mode: backend.OperatorUnion}},
	}
	if _, err := RedistributeOperatorState(old, 2); !errors.Is(err, backend.ErrIncompatible) {
		t.Fatalf("mode conflict: %v", err)
	}
	out, _ := RedistributeOperatorState([][]backend.OperatorList{{{Name: "x", Mode: backend.OperatorUnion, Elements: [][]byte{[]byte("a")}}}}, 2)
	out[0][0].Elements[0][0] = 'z'
	if !bytes.Equal(out[1][0].Elements[0], []byte("a")) {
		t.Fatal("union subtasks share element buffers")
	}
}
