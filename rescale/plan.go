package rescale

import (
	"errors"
	"fmt"
	"sort"

	"github.com/statedhq/stated/backend"
)

// ErrMaxParallelismChanged is returned when the new maxParallelism differs
// from the one the state was written with.
var ErrMaxParallelismChanged = errors.New("rescale: maxParallelism cannot change")

// Source is an old handle that holds part of a new subtask's key groups.
type Source struct {
	Handle *backend.Handle
	// Overlap is the part of the new range the handle holds.
	Overlap backend.KeyGroupRange
}

// Subtask is the restore plan of one new subtask.
type Subtask struct {
	Index     int
	KeyGroups backend.KeyGroupRange
	// Sources overlap KeyGroups and together cover it exactly once; the
	// first one has the largest overlap (ties: the lower key groups) and is
	// the restore base.
	Sources []Source
}

// Handles returns the sources' handles in order, ready for
// backend.Options.Restore.
func (s Subtask) Handles() []*backend.Handle {
	out := make([]*backend.Handle, len(s.Sources))
	for i, src := range s.Sources {
		out[i] = src.Handle
	}
	return out
}

// Plan is the restore plan of one operator at a new parallelism.
type Plan struct {
	MaxParallelism int
	OldParallelism int
	NewParallelism int
	Subtasks       []Subtask
}

// PlanOperator plans the restore of one operator whose old handles are
// handles (one per old subtask, in any order) at newParallelism.
// maxParallelism is the job's (unchanged) number of key groups. The handles
// must partition [0, maxParallelism) exactly.
func PlanOperator(handles []*backend.Handle, maxParallelism, newParallelism int) (*Plan, error) {
	if err := backend.ValidateParallelism(maxParallelism, newParallelism); err != nil {
		return nil, fmt.Errorf("rescale: %w", err)
	}
	if len(handles) == 0 {
		return nil, fmt.Errorf("rescale: %w: no handles to plan from", backend.ErrInvalidArgument)
	}
	sorted := append([]*backend.Handle(nil), handles...)
	for i, h := range sorted {
		if h == nil {
			return nil, fmt.Errorf("rescale: %w: handle %d is nil", backend.ErrInvalidArgument, i)
		}
		if h.MaxParallelism != maxParallelism {
			return nil, fmt.Errorf("%w: the state of %s was written with maxParallelism %d, the job now asks for %d; "+
				"key groups are the unit of rescale and cannot be split or merged",
				ErrMaxParallelismChanged, h.Task, h.MaxParallelism, maxParallelism)
		}
		if h.Task.Job != sorted[0].Task.Job || h.Task.Operator != sorted[0].Task.Operator {
			return nil, fmt.Errorf("rescale: %w: handles of %s and %s belong to different operators",
				backend.ErrInvalidArgument, sorted[0].Task, h.Task)
		}
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].KeyGroups.Start < sorted[j].KeyGroups.Start })
	if f := faults(sorted, maxParallelism); len(f) > 0 {
		if i := f[0].overlap; i >= 0 {
			h := sorted[i]
			return nil, fmt.Errorf("rescale: %w: handles overlap at key group %d (%s)", backend.ErrInvalidArgument, h.KeyGroups.Start, h.Task)
		}
		return nil, fmt.Errorf("rescale: %w: no handle holds key groups [%d,%d]", backend.ErrInvalidArgument, f[0].gap.Start, f[0].gap.End)
	}
	plan := &Plan{MaxParallelism: maxParallelism, OldParallelism: len(sorted), NewParallelism: newParallelism}
	for i := 0; i < newParallelism; i++ {
		r := backend.KeyGroupRangeForOperator(maxParallelism, newParallelism, i)
		st := Subtask{Index: i, KeyGroups: r}
		// The old ranges are sorted and disjoint: find the first that ends
		// at or after r.Start, then walk while they start at or before r.End.
		j := sort.Search(len(sorted), func(j int) bool { return sorted[j].KeyGroups.End >= r.Start })
		for ; j < len(sorted) && sorted[j].KeyGroups.Start <= r.End; j++ {
			st.Sources = append(st.Sources, Source{Handle: sorted[j], Overlap: sorted[j].KeyGroups.Intersect(r)})
		}
		sort.SliceStable(st.Sources, func(a, b int) bool {
			return st.Sources[a].Overlap.Len() > st.Sources[b].Overlap.Len()
		})
		plan.Subtasks = append(plan.Subtasks, st)
	}
	return plan, nil
}

// RedistributeOperatorState computes the operator state of every new
// subtask from old, the operator state of every old subtask (index = old
// subtask index). A name's mode must agree across the old subtasks.
func RedistributeOperatorState(old [][]backend.OperatorList, newParallelism int) ([][]backend.OperatorList, error) {
	if newParallelism < 1 {
		return nil, fmt.Errorf("rescale: %w: parallelism %d", backend.ErrInvalidArgument, newParallelism)
	}
	type acc struct {
		mode  backend.OperatorStateMode
		elems [][]byte
	}
	byName := map[string]*acc{}
	var names []string
	for sub, lists := range old {
		if err := backend.ValidateOperatorState(lists); err != nil {
			return nil, fmt.Errorf("rescale: old subtask %d: %w", sub, err)
		}
		for _, l := range lists {
			a, ok := byName[l.Name]
			if !ok {
				a = &acc{mode: l.Mode}
				byName[l.Name] = a
				names = append(names, l.Name)
			} else if a.mode != l.Mode {
				return nil, fmt.Errorf("rescale: %w: operator state %q is %s in one subtask and %s in subtask %d",
					backend.ErrIncompatible, l.Name, a.mode, l.Mode, sub)
			}
			a.elems = append(a.elems, l.Elements...)
		}
	}
	sort.Strings(names)
	out := make([][]backend.OperatorList, newParallelism)
	for _, name := range names {
		a := byName[name]
		for i := range out {
			l := backend.OperatorList{Name: name, Mode: a.mode}
			switch a.mode {
			case backend.OperatorUnion:
				l.Elements = cloneAll(a.elems)
			case backend.OperatorSplit:
				for e := i; e < len(a.elems); e += newParallelism {
					l.Elements = append(l.Elements, append([]byte{}, a.elems[e]...))
				}
			}
			out[i] = append(out[i], l)
		}
	}
	return out, nil
}

func cloneAll(in [][]byte) [][]byte {
	out := make([][]byte, len(in))
	for i, e := range in {
		out[i] = append([]byte{}, e...)
	}
	return out
}
