package inspect

import (
	"context"
	"sort"

	"github.com/statedhq/stated/backend"
)

// Count is a number of entries and the stored bytes they came from.
type Count struct {
	Entries int64
	Bytes   int64
}

func (c *Count) add(e *Entry) {
	c.Entries++
	c.Bytes += int64(e.StoredBytes)
}

// StateSummary is one state of one operator, over every subtask read.
type StateSummary struct {
	Operator string
	State    string
	Kind     backend.StateKind
	Count
}

// KeyGroupSummary is one key group of one operator.
type KeyGroupSummary struct {
	Operator string
	KeyGroup int
	Count
}

// Summary is what a checkpoint or savepoint holds, per state and per key
// group. Memory: one record per state and per non-empty key group.
type Summary struct {
	// States are sorted by operator and state; states registered but
	// empty are listed with a zero Count.
	States []StateSummary
	// KeyGroups are sorted by operator and key group; empty key groups
	// are left out.
	KeyGroups []KeyGroupSummary
	Total     Count
	// MaxParallelism is the job's number of key groups (0: no task).
	MaxParallelism int
}

// Largest returns the n key groups with the most bytes, largest first.
func (s *Summary) Largest(n int) []KeyGroupSummary {
	out := append([]KeyGroupSummary(nil), s.KeyGroups...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Bytes > out[j].Bytes })
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// Summarize reads every entry f selects and counts them.
func (r *Reader) Summarize(ctx context.Context, f Filter) (*Summary, error) {
	type sk struct{ op, state string }
	type kk struct {
		op string
		kg int
	}
	states := map[sk]*StateSummary{}
	kgs := map[kk]*KeyGroupSummary{}
	for _, h := range r.m.Tasks {
		if !f.MatchTask(h) {
			continue
		}
		for _, d := range h.States {
			if f.State != "" && d.Name != f.State {
				continue
			}
			k := sk{h.Task.Operator, d.Name}
			if states[k] == nil {
				states[k] = &StateSummary{Operator: k.op, State: d.Name, Kind: d.Kind}
			}
		}
	}
	var total Count
	err := r.Scan(ctx, f, func(e *Entry) error {
		states[sk{e.Operator, e.State}].add(e)
		k := kk{e.Operator, e.KeyGroup}
		g := kgs[k]
		if g == nil {
			g = &KeyGroupSummary{Operator: e.Operator, KeyGroup: e.KeyGroup}
			kgs[k] = g
		}
		g.add(e)
		total.add(e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	s := &Summary{Total: total}
	if len(r.m.Tasks) > 0 {
		s.MaxParallelism = r.m.Tasks[0].MaxParallelism
	}
	for _, v := range states {
		s.States = append(s.States, *v)
	}
	for _, v := range kgs {
		s.KeyGroups = append(s.KeyGroups, *v)
	}
	sort.Slice(s.States, func(i, j int) bool {
		a, b := s.States[i], s.States[j]
		if a.Operator != b.Operator {
			return a.Operator < b.Operator
		}
		return a.State < b.State
	})
	sort.Slice(s.KeyGroups, func(i, j int) bool {
		a, b := s.KeyGroups[i], s.KeyGroups[j]
		if a.Operator != b.Operator {
			return a.Operator < b.Operator
		}
		return a.KeyGroup < b.KeyGroup
	})
	return s, nil
}
