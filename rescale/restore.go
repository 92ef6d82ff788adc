package rescale

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/statedhq/stated/backend"
)

// Opener opens the backend of one new subtask. opts are the caller's base
// options completed by Plan.Options for st.
type Opener func(ctx context.Context, st Subtask, opts backend.Options) (backend.Backend, error)

// Options returns base completed for new subtask st: Task.Subtask,
// KeyGroups, MaxParallelism and Restore (st's sources, base first) come
// from the plan; everything else (job and operator names, states, stores,
// NoClaim, clock) is base's.
func (p *Plan) Options(st Subtask, base backend.Options) backend.Options {
	o := base
	o.Task.Subtask = st.Index
	o.KeyGroups = st.KeyGroups
	o.MaxParallelism = p.MaxParallelism
	o.Restore = st.Handles()
	return o
}

// RestoreAll opens every new subtask of p from its sources with open, at
// most parallel at once (below 1: one at a time), and returns the backends
// indexed by new subtask. If any open fails, it closes the backends it
// opened and returns the errors, each naming its subtask.
func (p *Plan) RestoreAll(ctx context.Context, base backend.Options, parallel int, open Opener) ([]backend.Backend, error) {
	if open == nil {
		return nil, fmt.Errorf("rescale: %w: no opener", backend.ErrInvalidArgument)
	}
	parallel = max(1, min(parallel, len(p.Subtasks)))
	out := make([]backend.Backend, len(p.Subtasks))
	errs := make([]error, len(p.Subtasks))
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < parallel; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				st := p.Subtasks[i]
				if err := ctx.Err(); err != nil {
					errs[i] = fmt.Errorf("rescale: restore subtask %d of %d (key groups %s): %w", i, p.NewParallelism, st.KeyGroups, err)
					continue
				}
				b, err := open(ctx, st, p.Options(st, base))
				if err == nil && b == nil {
					err = fmt.Errorf("%w: the opener returned no backend", backend.ErrInvalidArgument)
				}
				if err != nil {
					errs[i] = fmt.Errorf("rescale: restore subtask %d of %d (key groups %s) from %d handle(s): %w",
						i, p.NewParallelism, st.KeyGroups, len(st.Sources), err)
					continue
				}
				out[i] = b
			}
		}()
	}
	for i := range p.Subtasks {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, b := range out {
			if b != nil {
				_ = b.Close()
			}
		}
		return nil, err
	}
	return out, nil
}

// OldHandles returns the handles the plan was made from, in key-group
// order (which is old-subtask order).
func (p *Plan) OldHandles() []*backend.Handle {
	seen := map[*backend.Handle]bool{}
	var out []*backend.Handle
	for _, st := range p.Subtasks {
		for _, src := range st.Sources {
			if !seen[src.Handle] {
				seen[src.Handle] = true
				out = append(out, src.Handle)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].KeyGroups.Start < out[j].KeyGroups.Start })
	return out
}

// OperatorState redistributes the operator state the old handles carry to
// the new subtasks (RedistributeOperatorState; index = new subtask).
func (p *Plan) OperatorState() ([][]backend.OperatorList, error) {
	old := p.OldHandles()
	lists := make([][]backend.OperatorList, len(old))
	for i, h := range old {
		lists[i] = h.OperatorState
	}
	return RedistributeOperatorState(lists, p.NewParallelism)
}
