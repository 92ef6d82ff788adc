package rescale

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/statedhq/stated/backend"
)

func TestDeriveParallelism(t *testing.T) {
	for _, tc := range []struct {
		max, sub int
		kg       backend.KeyGroupRange
		want     int
	}{
		{128, 0, backend.KeyGroupRange{Start: 0, End: 63}, 2},
		{128, 1, backend.KeyGroupRange{Start: 43, End: 85}, 3},
		{128, 0, backend.KeyGroupRange{Start: 0, End: 127}, 1},
		{128, 127, backend.KeyGroupRange{Start: 127, End: 127}, 128},
		// Subtask 0 owns [0,1] at every parallelism 64..127: ambiguous.
		{128, 0, backend.KeyGroupRange{Start: 0, End: 1}, 0},
		// No parallelism gives subtask 1 this range.
		{128, 1, backend.KeyGroupRange{Start: 0, End: 63}, 0},
	} {
		if got := deriveParallelism(tc.max, tc.sub, tc.kg); got != tc.want {
			t.Errorf("deriveParallelism(%d, %d, %s) = %d, want %d", tc.max, tc.sub, tc.kg, got, tc.want)
		}
	}
}

func TestPickHandles(t *testing.T) {
	h := func(sub int, kg backend.KeyGroupRange, ops ...backend.OperatorList) *backend.Handle {
		return &backend.Handle{Task: backend.TaskID{Job: "j", Operator: "op", Subtask: sub}, KeyGroups: kg, MaxParallelism: 128,
			OperatorState: ops}
	}
	split := func(e ...string) backend.OperatorList {
		l := backend.OperatorList{Name: "s", Mode: backend.OperatorSplit}
		for _, x := range e {
			l.Elements = append(l.Elements, []byte(x))
		}
		return l
	}
	old := []*backend.Handle{
		h(0, backend.KeyGroupRangeForOperator(128, 2, 0), split("a", "b", "c")),
		h(1, backend.KeyGroupRangeForOperator(128, 2, 1), split("d")),
	}
	pick := func(old []*backend.Handle, sub, par int, kg backend.KeyGroupRange) (*Instance, error) {
		return pickHandles(old, backend.TaskID{Job: "j", Operator: "op", Subtask: sub}, 128, par, kg)
	}
	// Same parallelism: its own handle and split list.
	p, err := pick(old, 1, 2, old[1].KeyGroups)
	if err != nil || p.Rescaled || len(p.Handles) != 1 || p.Handles[0] != old[1] || len(p.OperatorState) != 1 || string(p.OperatorState[0].Elements[0]) != "d" {
		t.Fatalf("same parallelism: %+v %v", p, err)
	}
	// Only some subtasks in the checkpoint (others ran next to another
	// daemon): the range decides, no rescale.
	p, err = pick(old[:1], 0, 2, old[0].KeyGroups)
	if err != nil || p.Rescaled || len(p.OperatorState[0].Elements) != 3 {
		t.Fatalf("partial checkpoint: %+v %v", p, err)
	}
	// Rescale to 3: subtask 1 ([43,85]) restores old 1 as its base, then
	// old 0; split elements a b c d dealt out: b.
	r := backend.KeyGroupRangeForOperator(128, 3, 1)
	p, err = pick(old, 1, 3, r)
	if err != nil || !p.Rescaled || len(p.Handles) != 2 || p.Handles[0] != old[1] || p.Handles[1] != old[0] {
		t.Fatalf("rescale to 3: %+v %v", p, err)
	}
	if len(p.OperatorState) != 1 || len(p.OperatorState[0].Elements) != 1 || string(p.OperatorState[0].Elements[0]) != "b" {
		t.Fatalf("split list of subtask 1 of 3: %+v", p.OperatorState)
	}
	// Without a parallelism and an ambiguous range: refused, asking for it.
	tiny := backend.KeyGroupRange{Start: 0, End: 1}
	if _, err := pick(old, 0, 0, tiny); err == nil {
		t.Fatal("ambiguous rescale accepted")
	}
	// Without a parallelism but a range only one parallelism gives: derived.
	if p, err := pick(old, 1, 0, r); err != nil || !p.Rescaled {
		t.Fatalf("derived parallelism: %+v %v", p, err)
	}
}

// TestFaults: gaps and overlaps of an operator's sorted handles, in order,
// as PlanOperator (the first), covered (the gaps) and disjoint (the first
// overlap) read them.
func TestFaults(t *testing.T) {
	h := func(s, e int) *backend.Handle {
		return &backend.Handle{KeyGroups: backend.KeyGroupRange{Start: s, End: e}}
	}
	for i, c := range []struct {
		handles []*backend.Handle
		max     int
		want    string
	}{
		{[]*backend.Handle{h(0, 63), h(64, 127)}, 128, "[]"},
		{[]*backend.Handle{h(10, 63), h(64, 100)}, 128, "[{-1 [0,9]} {-1 [101,127]}]"},
		{[]*backend.Handle{h(0, 63), h(60, 100), h(110, 127)}, 128, "[{1 []} {-1 [101,109]}]"},
		// A handle inside an earlier one: no gap after it.
		{[]*backend.Handle{h(0, 100), h(10, 20), h(101, 127)}, 128, "[{1 []}]"},
		// Handles past maxParallelism: an inverted gap at the end.
		{[]*backend.Handle{h(0, 200)}, 128, "[{-1 []}]"},
		// Without maxParallelism, none after the last handle.
		{[]*backend.Handle{h(10, 20), h(30, 40)}, 0, "[{-1 [0,9]} {-1 [21,29]}]"},
	} {
		var got []string
		for _, f := range faults(c.handles, c.max) {
			got = append(got, fmt.Sprintf("{%d %s}", f.overlap, f.gap))
		}
		if fmt.Sprint(got) != c.want {
			t.Errorf("case %d: faults = %s, want %s", i, got, c.want)
		}
	}
}

// TestPlanAssigned: the handles an engine assigned to one new subtask,
// without the rest of the checkpoint.
func TestPlanAssigned(t *testing.T) {
	h := func(sub, par int) *backend.Handle {
		return &backend.Handle{Task: backend.TaskID{Job: "old", Operator: "op", Subtask: sub}, CheckpointID: 4,
			KeyGroups: backend.KeyGroupRangeForOperator(128, par, sub), MaxParallelism: 128}
	}
	old := []*backend.Handle{h(0, 2), h(1, 2)}
	kg := func(sub, par int) backend.KeyGroupRange { return backend.KeyGroupRangeForOperator(128, par, sub) }

	// 2 -> 3: subtask 0 holds part of old 0 only (a PlanFrom of the whole
	// checkpoint would need old 1 too); subtask 1 both, the larger
	// overlap first.
	p, err := PlanAssigned(old[:1], 128, kg(0, 3))
	if err != nil || !p.Rescaled || len(p.Handles) != 1 || p.Handles[0] != old[0] {
		t.Fatalf("subtask 0 of 3: %+v %v", p, err)
	}
	p, err = PlanAssigned([]*backend.Handle{old[1], old[0]}, 128, kg(1, 3))
	if err != nil || len(p.Handles) != 2 {
		t.Fatalf("subtask 1 of 3: %+v %v", p, err)
	}
	// [43,85]: 21 key groups of old 0 ([0,63]), 22 of old 1.
	if p.Handles[0] != old[1] {
		t.Errorf("subtask 1 of 3: base %s, want the larger overlap %s", p.Handles[0].Task, old[1].Task)
	}
	// Same parallelism, another job: its own handle, not rescaled.
	p, err = PlanAssigned(old[1:], 128, kg(1, 2))
	if err != nil || p.Rescaled || p.Handles[0] != old[1] {
		t.Fatalf("own handle: %+v %v", p, err)
	}

	for _, c := range []struct {
		name string
		hs   []*backend.Handle
		kg   backend.KeyGroupRange
		says string
	}{
		{"gap", old[:1], kg(1, 3), "no handle given holds key groups [64,85]"},
		{"outside", old, kg(0, 3), "none of which the instance's range"},
		{"overlap", []*backend.Handle{old[0], h(0, 1)}, kg(0, 1), "overlap"},
		{"none", nil, kg(0, 1), "no handles"},
	} {
		if _, err := PlanAssigned(c.hs, 128, c.kg); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.says)
		}
	}
	if _, err := PlanAssigned(old, 256, kg(0, 1)); !errors.Is(err, ErrMaxParallelismChanged) {
		t.Errorf("another max parallelism: %v", err)
	}
}
