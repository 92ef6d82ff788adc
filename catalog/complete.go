package catalog

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/statedhq/stated/backend"
)

// Missing says what a checkpoint whose caller named no tasks lacks to be
// whole, given its handles and the tasks of its job that are open
// anywhere (cluster mode: the tasks holding fencing tokens): every open
// task without a handle, and for every operator it holds handles of, the
// key groups no handle holds, with the subtasks that own them at the
// smallest parallelism the handles agree with. Each item is one sentence;
// none means whole. A completion with one subtask's handle of a
// parallelism-2 operator would otherwise complete, become the job's
// latest, and fail the other subtask's restore.
func Missing(handles []*backend.Handle, open []backend.TaskID) []string {
	have := map[backend.TaskID]bool{}
	byOp := map[string][]*backend.Handle{}
	for _, h := range handles {
		have[h.Task] = true
		byOp[h.Task.Operator] = append(byOp[h.Task.Operator], h)
	}
	var out []string
	seen := map[backend.TaskID]bool{}
	for _, t := range slices.SortedFunc(slices.Values(open), cmpTask) {
		if !have[t] && !seen[t] {
			seen[t] = true
			out = append(out, fmt.Sprintf("task %s is open but has no handle", t))
		}
	}
	for _, op := range slices.Sorted(maps.Keys(byOp)) {
		hs := byOp[op]
		maxPar := hs[0].MaxParallelism
		ranges := make([]backend.KeyGroupRange, 0, len(hs))
		for _, h := range hs {
			if h.MaxParallelism != maxPar {
				out = append(out, fmt.Sprintf("operator %s: its handles disagree on the max parallelism (%d and %d)", op, maxPar, h.MaxParallelism))
				break
			}
			ranges = append(ranges, h.KeyGroups)
		}
		if maxPar <= 0 {
			continue
		}
		slices.SortFunc(ranges, func(a, b backend.KeyGroupRange) int { return cmp.Compare(a.Start, b.Start) })
		var gaps []backend.KeyGroupRange
		next := 0
		for _, r := range ranges {
			if r.Start > next {
				gaps = append(gaps, backend.KeyGroupRange{Start: next, End: r.Start - 1})
			}
			next = max(next, r.End+1)
		}
		if next < maxPar {
			gaps = append(gaps, backend.KeyGroupRange{Start: next, End: maxPar - 1})
		}
		if len(gaps) == 0 {
			continue
		}
		what := fmt.Sprintf("operator %s: no handle holds key groups", op)
		for i, g := range gaps {
			if i > 0 {
				what += ","
			}
			what += fmt.Sprintf(" [%d,%d]", g.Start, g.End)
		}
		if p := parallelismOf(hs); p > 0 {
			var subs []int
			for s := range p {
				if !have[backend.TaskID{Job: hs[0].Task.Job, Operator: op, Subtask: s}] {
					subs = append(subs, s)
				}
			}
			what += fmt.Sprintf(" (subtasks %v of parallelism %d)", subs, p)
		}
		out = append(out, what)
	}
	return out
}

// parallelismOf is the smallest parallelism whose key-group ranges the
// handles' subtasks hold (0: none fits).
func parallelismOf(hs []*backend.Handle) int {
	maxPar, top := hs[0].MaxParallelism, 0
	for _, h := range hs {
		top = max(top, h.Task.Subtask+1)
	}
	for p := top; p <= maxPar; p++ {
		fits := true
		for _, h := range hs {
			if backend.KeyGroupRangeForOperator(maxPar, p, h.Task.Subtask) != h.KeyGroups {
				fits = false
				break
			}
		}
		if fits {
			return p
		}
	}
	return 0
}

func cmpTask(a, b backend.TaskID) int {
	return cmp.Or(cmp.Compare(a.Job, b.Job), cmp.Compare(a.Operator, b.Operator), cmp.Compare(a.Subtask, b.Subtask))
}
