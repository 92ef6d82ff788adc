package rescale

import "github.com/statedhq/stated/backend"

// Owners says which handle each key group of a range is restored from:
// the first one listed that holds it (the rule of
// backend.ValidateRestore, which lets restore handles overlap). Every
// backend that restores from several handles asks it, so that overlapping
// and rescaled handles give every key group exactly once, from the same
// handle whichever backend restores.
type Owners struct {
	r backend.KeyGroupRange
	// owner[kg-r.Start] is the index of kg's handle, -1 if none holds it.
	owner []int
	// handles is how many handles were assigned.
	handles int
}

// Assign assigns each key group of r to the first of handles that holds
// it.
func Assign(handles []*backend.Handle, r backend.KeyGroupRange) Owners {
	o := Owners{r: r, owner: make([]int, r.Len()), handles: len(handles)}
	for i := range o.owner {
		o.owner[i] = -1
	}
	for j, h := range handles {
		in := h.KeyGroups.Intersect(r)
		for kg := in.Start; kg <= in.End; kg++ {
			if o.owner[kg-r.Start] < 0 {
				o.owner[kg-r.Start] = j
			}
		}
	}
	return o
}

// Of returns the index of the handle key group kg is restored from, or -1
// when kg lies outside the range or no handle holds it.
func (o Owners) Of(kg int) int {
	if !o.r.Contains(kg) {
		return -1
	}
	return o.owner[kg-o.r.Start]
}

// Runs returns the maximal runs of key groups restored from handle j, in
// ascending order.
func (o Owners) Runs(j int) []backend.KeyGroupRange {
	var runs []backend.KeyGroupRange
	for i, owner := range o.owner {
		if owner != j {
			continue
		}
		kg := o.r.Start + i
		if n := len(runs); n > 0 && runs[n-1].End == kg-1 {
			runs[n-1].End = kg
		} else {
			runs = append(runs, backend.KeyGroupRange{Start: kg, End: kg})
		}
	}
	return runs
}

// Base returns the restore base among the handles eligible selects: the
// one that owns the most key groups, the first listed on a tie (as the
// first source of a Subtask is the one with the largest overlap). It is -1
// when no eligible handle owns a key group.
func (o Owners) Base(eligible func(j int) bool) int {
	count := make([]int, o.handles)
	for _, owner := range o.owner {
		if owner >= 0 {
			count[owner]++
		}
	}
	base, best := -1, 0
	for j, c := range count {
		if c > best && eligible(j) {
			base, best = j, c
		}
	}
	return base
}
