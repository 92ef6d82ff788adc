package rescale

import (
	"fmt"
	"sort"
	"strings"

	"github.com/statedhq/stated/backend"
)

// Instance is what one instance restores from a checkpoint.
type Instance struct {
	// Handles hold the instance's key groups, the restore base (largest
	// overlap) first: backend.Options.Restore.
	Handles []*backend.Handle
	// OperatorState is the instance's operator state.
	OperatorState []backend.OperatorList
	// Rescaled: the state was written at another parallelism.
	Rescaled bool
	// All are the operator's handles in the checkpoint, by key group
	// (channel state of a rescale may come from any of them).
	All []*backend.Handle
}

// OperatorHandles returns the handles of operator among hs (one
// checkpoint's), sorted by key group: what PlanInstance and PlanFrom plan
// from.
func OperatorHandles(hs []*backend.Handle, operator string) []*backend.Handle {
	var out []*backend.Handle
	for _, h := range hs {
		if h != nil && h.Task.Operator == operator {
			out = append(out, h)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].KeyGroups.Start < out[j].KeyGroups.Start })
	return out
}

// PlanInstance picks what instance task, with key groups kg out of
// maxParallelism and the job at parallelism (0: unknown), restores from
// old, its operator's handles in one checkpoint (OperatorHandles,
// non-empty):
//   - the handle with exactly the instance's key-group range, when there
//     is one and the parallelism did not change (or cannot be told: the
//     checkpoint holds only some of the operator's subtasks, the others
//     having run next to another daemon): its keyed state and its split
//     operator lists, plus the union lists of every subtask (as Flink
//     does without a rescale);
//   - otherwise a rescale (PlanFrom at the parallelism): the handles that
//     overlap the range, the one with the largest overlap first (the
//     backend restores it as its base and clips it), and the operator
//     state redistributed by mode (RedistributeOperatorState).
//
// A changed maxParallelism is refused (key groups are the unit of
// rescale), and so are handles whose key groups overlap.
func PlanInstance(old []*backend.Handle, task backend.TaskID, maxParallelism, parallelism int, kg backend.KeyGroupRange) (*Instance, error) {
	if err := sameMaxParallelism(old, maxParallelism); err != nil {
		return nil, err
	}
	if err := disjoint(old); err != nil {
		return nil, err
	}
	in, err := pickHandles(old, task, maxParallelism, parallelism, kg)
	if err != nil {
		return nil, err
	}
	in.All = old
	if err := backend.ValidateOperatorState(in.OperatorState); err != nil {
		return nil, fmt.Errorf("operator state: %w", err)
	}
	return in, nil
}

// PlanFrom plans the rescale of an operator to newParallelism from old,
// its handles in one checkpoint (OperatorHandles, non-empty): as
// PlanOperator, but a checkpoint that lacks some of the operator's key
// groups is refused with ErrIncompatible, naming them (covered).
func PlanFrom(old []*backend.Handle, newParallelism int) (*Plan, error) {
	maxParallelism := old[0].MaxParallelism
	if err := covered(old, maxParallelism, old[0].Task.Operator, newParallelism); err != nil {
		return nil, err
	}
	return PlanOperator(old, maxParallelism, newParallelism)
}

// disjoint refuses handles of one operator whose key groups overlap (old
// sorted by start): every key group has one owner in a checkpoint, so an
// overlap is a manifest that describes impossible state. Taken as it
// reads, a restore would pick one of the claimants and silently lose what
// the other holds.
func disjoint(old []*backend.Handle) error {
	for _, f := range faults(old, 0) {
		if f.overlap < 0 {
			continue
		}
		a, b := old[f.overlap-1], old[f.overlap]
		return fmt.Errorf("%w: the handles of %s (key groups %s) and %s (key groups %s) overlap: a key group has one owner in a checkpoint",
			backend.ErrCorrupt, a.Task, a.KeyGroups, b.Task, b.KeyGroups)
	}
	return nil
}

// sameMaxParallelism refuses state written with another maxParallelism.
func sameMaxParallelism(old []*backend.Handle, maxParallelism int) error {
	for _, h := range old {
		if h.MaxParallelism != maxParallelism {
			return fmt.Errorf("%w: %w: the state of %s was written with maxParallelism %d, the instance asks for %d; "+
				"key groups are the unit of rescale and cannot be split or merged, so open with maxParallelism %d",
				backend.ErrIncompatible, ErrMaxParallelismChanged, h.Task, h.MaxParallelism, maxParallelism, h.MaxParallelism)
		}
	}
	return nil
}

// deriveParallelism returns the one parallelism at which subtask owns kg
// out of maxParallelism key groups, or 0 if none or several do (at small
// ranges several parallelisms can give a subtask the same range).
func deriveParallelism(maxParallelism, subtask int, kg backend.KeyGroupRange) int {
	found := 0
	for p := subtask + 1; p <= maxParallelism; p++ {
		if backend.KeyGroupRangeForOperator(maxParallelism, p, subtask) == kg {
			if found != 0 {
				return 0
			}
			found = p
		}
	}
	return found
}

// pickHandles decides between a plain restore and a rescale (see
// PlanInstance) and picks the handles and operator state.
func pickHandles(old []*backend.Handle, task backend.TaskID, maxParallelism, par int, kg backend.KeyGroupRange) (*Instance, error) {
	if par == 0 {
		par = deriveParallelism(maxParallelism, task.Subtask, kg)
	}
	var own *backend.Handle
	for _, h := range old {
		if h.KeyGroups == kg {
			own = h
		}
	}
	// The old parallelism is known when the handles partition the key
	// groups (a checkpoint of a job whose other subtasks run next to
	// another daemon holds only some of them: then the range decides).
	if own != nil && (par == 0 || par == len(old) || !partition(old, maxParallelism)) {
		ops, err := unrescaledOperatorState(own, old)
		if err != nil {
			return nil, err
		}
		return &Instance{Handles: []*backend.Handle{own}, OperatorState: ops}, nil
	}
	if par == 0 {
		return nil, fmt.Errorf("%w: the state was written at another parallelism (%d subtasks hold it, none with key groups %s) "+
			"and several parallelisms give subtask %d that range: open with the parallelism set",
			backend.ErrInvalidArgument, len(old), kg, task.Subtask)
	}
	plan, err := PlanFrom(old, par)
	if err != nil {
		return nil, err
	}
	st := plan.Subtasks[task.Subtask]
	if st.KeyGroups != kg {
		// kg was validated (or derived) against KeyGroupRangeForOperator,
		// which the planner uses too.
		return nil, fmt.Errorf("%w: subtask %d of parallelism %d owns key groups %s, not %s",
			backend.ErrInvalidArgument, task.Subtask, par, st.KeyGroups, kg)
	}
	all, err := plan.OperatorState()
	if err != nil {
		return nil, err
	}
	return &Instance{Handles: st.Handles(), OperatorState: all[task.Subtask], Rescaled: true}, nil
}

// covered refuses a rescale of operator to par from handles old (sorted,
// disjoint) that do not hold every key group of [0, maxParallelism),
// naming the key groups none holds. It is not the request's fault: the
// checkpoint holds only some subtasks of the operator (its other tasks
// ran next to another daemon, or a completion named only some), so
// FAILED_PRECONDITION (issue 37: this was INVALID_ARGUMENT).
func covered(old []*backend.Handle, maxParallelism int, operator string, par int) error {
	var missing []string
	for _, f := range faults(old, maxParallelism) {
		if f.overlap < 0 && !f.gap.Empty() {
			missing = append(missing, f.gap.String())
		}
	}
	if len(missing) == 0 {
		return nil
	}
	held := make([]string, len(old))
	for i, h := range old {
		held[i] = fmt.Sprintf("%s %s", h.Task, h.KeyGroups)
	}
	return fmt.Errorf("%w: a rescale to parallelism %d needs every key group of operator %s, but no handle of the checkpoint holds key groups %s "+
		"(it holds %s); restore a checkpoint that every subtask of the operator took part in, or open at the parallelism and key groups it was written with",
		backend.ErrIncompatible, par, operator, strings.Join(missing, ", "), strings.Join(held, ", "))
}

// partition reports whether old (sorted) covers [0, maxParallelism)
// exactly once.
func partition(old []*backend.Handle, maxParallelism int) bool {
	return len(faults(old, maxParallelism)) == 0
}

// fault is one way an operator's handles fail to hold each key group once.
type fault struct {
	// overlap is the index of a handle that starts inside the key groups
	// of an earlier one; -1 for a gap.
	overlap int
	// gap are key groups no handle holds: [next, maxParallelism-1] at the
	// end is inverted (empty) when the handles reach past maxParallelism.
	gap backend.KeyGroupRange
}

// faults walks handles sorted by their first key group over [0,
// maxParallelism) and returns, in order, every gap and overlap (with
// maxParallelism 0, no gap after the last handle). It is the one check of
// how an operator's handles lie that PlanOperator, PlanFrom and
// PlanInstance make, each reporting what it cares for.
func faults(sorted []*backend.Handle, maxParallelism int) []fault {
	var out []fault
	next := 0
	for i, h := range sorted {
		switch {
		case h.KeyGroups.Start > next:
			out = append(out, fault{overlap: -1, gap: backend.KeyGroupRange{Start: next, End: h.KeyGroups.Start - 1}})
		case h.KeyGroups.Start < next:
			out = append(out, fault{overlap: i, gap: backend.EmptyKeyGroupRange})
		}
		next = max(next, h.KeyGroups.End+1)
	}
	if maxParallelism > 0 && next != maxParallelism {
		out = append(out, fault{overlap: -1, gap: backend.KeyGroupRange{Start: next, End: maxParallelism - 1}})
	}
	return out
}

// unrescaledOperatorState is the operator state of a subtask restored at
// the parallelism it was written with: its own split lists, and the union
// lists of every subtask (union state is broadcast on every restore).
func unrescaledOperatorState(own *backend.Handle, old []*backend.Handle) ([]backend.OperatorList, error) {
	lists := make([][]backend.OperatorList, len(old))
	for i, h := range old {
		lists[i] = h.OperatorState
	}
	// Parallelism 1 gives every list's elements in subtask order, and
	// checks that every name has one mode everywhere.
	merged, err := RedistributeOperatorState(lists, 1)
	if err != nil {
		return nil, err
	}
	var out []backend.OperatorList
	for _, l := range merged[0] {
		if l.Mode == backend.OperatorUnion {
			out = append(out, l)
		}
	}
	for _, l := range own.OperatorState {
		if l.Mode == backend.OperatorSplit {
			out = append(out, l)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// PlanAssigned plans the restore of an instance with key groups kg out of
// maxParallelism from handles an engine assigned to it itself (Flink's
// scheduler hands each new subtask the old subtasks' handles that overlap
// its range, possibly from several old subtasks after a rescale), with no
// catalog to ask for the rest of the checkpoint. The handles must not
// overlap each other, must each overlap kg, and must together hold every
// key group of kg; the one with the largest overlap comes first (the
// restore base, which the backend clips), ties to the lower key groups.
// Operator state is left to the engine: the handles of the other subtasks,
// which a redistribution needs, are not here.
func PlanAssigned(handles []*backend.Handle, maxParallelism int, kg backend.KeyGroupRange) (*Instance, error) {
	if len(handles) == 0 {
		return nil, fmt.Errorf("rescale: %w: no handles to restore from", backend.ErrInvalidArgument)
	}
	for i, h := range handles {
		if h == nil {
			return nil, fmt.Errorf("rescale: %w: handle %d is nil", backend.ErrInvalidArgument, i)
		}
	}
	if err := sameMaxParallelism(handles, maxParallelism); err != nil {
		return nil, err
	}
	sorted := append([]*backend.Handle(nil), handles...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].KeyGroups.Start < sorted[j].KeyGroups.Start })
	if err := disjoint(sorted); err != nil {
		return nil, err
	}
	var srcs []Source
	next := kg.Start // the first key group of kg no handle holds yet
	var gaps []string
	for _, h := range sorted {
		ov := h.KeyGroups.Intersect(kg)
		if ov.Empty() {
			return nil, fmt.Errorf("rescale: %w: the handle of %s (checkpoint %d) holds key groups %s, none of which the instance's range %s holds; "+
				"pass only the handles that overlap the instance's key groups",
				backend.ErrInvalidArgument, h.Task, h.CheckpointID, h.KeyGroups, kg)
		}
		if ov.Start > next {
			gaps = append(gaps, backend.KeyGroupRange{Start: next, End: ov.Start - 1}.String())
		}
		next = ov.End + 1
		srcs = append(srcs, Source{Handle: h, Overlap: ov})
	}
	if next <= kg.End {
		gaps = append(gaps, backend.KeyGroupRange{Start: next, End: kg.End}.String())
	}
	if len(gaps) > 0 {
		return nil, fmt.Errorf("rescale: %w: no handle given holds key groups %s of the instance's range %s; "+
			"pass every handle the engine assigned to the task", backend.ErrInvalidArgument, strings.Join(gaps, ", "), kg)
	}
	sort.SliceStable(srcs, func(a, b int) bool { return srcs[a].Overlap.Len() > srcs[b].Overlap.Len() })
	st := Subtask{KeyGroups: kg, Sources: srcs}
	in := &Instance{Handles: st.Handles(), All: sorted}
	in.Rescaled = len(srcs) > 1 || srcs[0].Handle.KeyGroups != kg
	return in, nil
}
