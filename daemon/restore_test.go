package daemon

import (
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
	open := func(sub, par int, kg backend.KeyGroupRange) OpenParams {
		return OpenParams{Task: backend.TaskID{Job: "j", Operator: "op", Subtask: sub}, MaxParallelism: 128, Parallelism: par, KeyGroups: kg}
	}
	// Same parallelism: its own handle and split list.
	p, err := pickHandles(old, open(1, 2, old[1].KeyGroups))
	if err != nil || p.rescaled || len(p.handles) != 1 || p.handles[0] != old[1] || len(p.opState) != 1 || string(p.opState[0].Elements[0]) != "d" {
		t.Fatalf("same parallelism: %+v %v", p, err)
	}
	// Only some subtasks in the checkpoint (others ran next to another
	// daemon): the range decides, no rescale.
	p, err = pickHandles(old[:1], open(0, 2, old[0].KeyGroups))
	if err != nil || p.rescaled || len(p.opState[0].Elements) != 3 {
		t.Fatalf("partial checkpoint: %+v %v", p, err)
	}
	// Rescale to 3: subtask 1 ([43,85]) restores old 1 as its base, then
	// old 0; split elements a b c d dealt out: b.
	r := backend.KeyGroupRangeForOperator(128, 3, 1)
	p, err = pickHandles(old, open(1, 3, r))
	if err != nil || !p.rescaled || len(p.handles) != 2 || p.handles[0] != old[1] || p.handles[1] != old[0] {
		t.Fatalf("rescale to 3: %+v %v", p, err)
	}
	if len(p.opState) != 1 || len(p.opState[0].Elements) != 1 || string(p.opState[0].Elements[0]) != "b" {
		t.Fatalf("split list of subtask 1 of 3: %+v", p.opState)
	}
	// Without a parallelism and an ambiguous range: refused, asking for it.
	tiny := backend.KeyGroupRange{Start: 0, End: 1}
	if _, err := pickHandles(old, open(0, 0, tiny)); err == nil {
		t.Fatal("ambiguous rescale accepted")
	}
	// Without a parallelism but a range only one parallelism gives: derived.
	if p, err := pickHandles(old, open(1, 0, r)); err != nil || !p.rescaled {
		t.Fatalf("derived parallelism: %+v %v", p, err)
	}
}
