package daemon

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/rescale"
	"github.com/statedhq/stated/tiered"
)

// restorePlan is what an instance restores from.
type restorePlan struct {
	src *catalog.Restore
	// handles are the old handles that hold the instance's key groups,
	// the restore base (largest overlap) first.
	handles []*backend.Handle
	// opState is the instance's operator state.
	opState []backend.OperatorList
	// rescaled: the state was written at another parallelism.
	rescaled bool
	// all are the operator's old handles (channel state of a rescale may
	// come from any of them).
	all []*backend.Handle
}

// resolveRestore resolves p.Restore in the catalog and picks what the
// instance restores:
//   - the operator's handle with exactly the instance's key-group range,
//     when there is one and the parallelism did not change (or cannot be
//     told: the source holds only some of the operator's subtasks, the
//     others having run next to another daemon): its keyed state and its
//     split operator lists, plus the union lists of every subtask in the
//     source (as Flink does without a rescale);
//   - otherwise a rescale (rescale.PlanOperator over the operator's old
//     handles at the new parallelism): the handles that overlap the new
//     range, the one with the largest overlap first (the backend restores
//     it as its base and clips it), and the operator state redistributed
//     by mode (rescale.RedistributeOperatorState).
//
// A changed maxParallelism is refused: key groups are the unit of rescale.
func (d *Daemon) resolveRestore(ctx context.Context, p OpenParams) (*restorePlan, error) {
	task := p.Task
	spec := p.Restore
	req := catalog.RestoreRequest{Job: task.Job, CheckpointID: spec.CheckpointID, Mode: catalog.ModeNoClaim,
		AllowFallback: spec.AllowFallback && spec.Latest}
	if spec.claim() {
		req.Mode = catalog.ModeClaim
	}
	if spec.Savepoint != "" {
		req.SavepointID = strings.TrimPrefix(strings.TrimSuffix(spec.Savepoint, "/"), catalog.SavepointsDir+"/")
	}
	r, err := d.cfg.Catalog.RestoreSource(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("daemon: restore %s: %w", task, err)
	}
	src := fmt.Sprintf("checkpoint %d of job %s", r.Manifest.CheckpointID, r.Manifest.Job)
	if len(r.Skipped) > 0 {
		// The caller allowed it, but it goes back further than the engine
		// believes its state is: say so loudly.
		d.m.RestoreFallbacks.Add(1)
		skipped := make([]string, len(r.Skipped))
		for i, s := range r.Skipped {
			skipped[i] = s.String()
		}
		d.log.Error("restore of the latest checkpoint fell back past damaged checkpoints", "task", task.String(),
			"restored", src, "skipped", strings.Join(skipped, "; "))
	}
	if req.SavepointID != "" {
		src = "savepoint " + req.SavepointID
	}
	fail := func(err error) error { return fmt.Errorf("daemon: restore %s from %s: %w", task, src, err) }
	old := operatorHandles(r.Handles, task.Operator)
	if len(old) == 0 {
		return nil, fmt.Errorf("daemon: restore %s: %w: %s holds no state of operator %s",
			task, backend.ErrNotFound, src, task.Operator)
	}
	if err := sameMaxParallelism(old, p.MaxParallelism); err != nil {
		return nil, fail(err)
	}
	if err := disjoint(old); err != nil {
		return nil, fail(err)
	}
	plan, err := pickHandles(old, p)
	if err != nil {
		return nil, fail(err)
	}
	plan.src = r
	plan.all = old
	if err := backend.ValidateOperatorState(plan.opState); err != nil {
		return nil, fail(fmt.Errorf("operator state: %w", err))
	}
	if req.SavepointID == "" {
		for _, h := range plan.handles {
			if h.Backend == backend.KindHeap {
				if err := d.heapHeld(ctx, h); err != nil {
					return nil, fail(err)
				}
			}
		}
	}
	return plan, nil
}

// stillRetained is backend.Options.RestoreHeld of a claimed restore of
// checkpoint src: the catalog deletes a checkpoint's manifest before any
// of its files, so a manifest still there after the backend announced its
// hold means that the discard, if one comes, sees the hold.
func stillRetained(src *catalog.Restore) func(context.Context) error {
	m := src.Manifest
	name := catalog.CheckpointManifest(m.Job, m.CheckpointID)
	return func(ctx context.Context) error {
		_, err := src.Store.Stat(ctx, name)
		if tiered.IsNotFound(err) {
			return fmt.Errorf("%w: checkpoint %d of job %s was discarded while this instance restored from it; restore again",
				backend.ErrNotFound, m.CheckpointID, m.Job)
		}
		if err != nil {
			return fmt.Errorf("check that checkpoint %d of job %s is still retained: %w", m.CheckpointID, m.Job, err)
		}
		return nil
	}
}

// heapHeld checks that the files of heap handle h are in the heap snapshot
// store: they are unless the daemon restarted since the checkpoint (the
// catalog deletes them only once the checkpoint is no longer retained).
// Without a configured store the backend's restore reports a missing file.
func (d *Daemon) heapHeld(ctx context.Context, h *backend.Handle) error {
	if d.cfg.HeapSnapshots == nil || h.IsChangelog() {
		// A heap instance in changelog mode writes its bases and log to
		// the checkpoint store: they outlive the daemon process.
		return nil
	}
	for _, f := range h.Files {
		_, err := d.cfg.HeapSnapshots.Stat(ctx, f.Path)
		if tiered.IsNotFound(err) {
			return fmt.Errorf("%w: the heap backend keeps its snapshots in daemon memory, and this daemon process does not "+
				"hold %s of task %s (the daemon restarted since); restore from a file or lsm checkpoint or from a savepoint instead",
				ErrSnapshotGone, f.Path, h.Task)
		}
		if err != nil {
			return fmt.Errorf("heap snapshot %s of task %s: %w", f.Path, h.Task, err)
		}
	}
	return nil
}

// operatorHandles returns the handles of operator, sorted by key group.
func operatorHandles(hs []*backend.Handle, operator string) []*backend.Handle {
	var out []*backend.Handle
	for _, h := range hs {
		if h != nil && h.Task.Operator == operator {
			out = append(out, h)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].KeyGroups.Start < out[j].KeyGroups.Start })
	return out
}

// disjoint refuses handles of one operator whose key groups overlap (old
// sorted by start): every key group has one owner in a checkpoint, so an
// overlap is a manifest that describes impossible state. Taken as it
// reads, a restore would pick one of the claimants and silently lose what
// the other holds.
func disjoint(old []*backend.Handle) error {
	for i := 1; i < len(old); i++ {
		if a, b := old[i-1], old[i]; b.KeyGroups.Start <= a.KeyGroups.End {
			return fmt.Errorf("%w: the handles of %s (key groups %s) and %s (key groups %s) overlap: a key group has one owner in a checkpoint",
				backend.ErrCorrupt, a.Task, a.KeyGroups, b.Task, b.KeyGroups)
		}
	}
	return nil
}

// sameMaxParallelism refuses state written with another maxParallelism.
func sameMaxParallelism(old []*backend.Handle, maxParallelism int) error {
	for _, h := range old {
		if h.MaxParallelism != maxParallelism {
			return fmt.Errorf("%w: %w: the state of %s was written with maxParallelism %d, the instance asks for %d; "+
				"key groups are the unit of rescale and cannot be split or merged, so open with maxParallelism %d",
				backend.ErrIncompatible, rescale.ErrMaxParallelismChanged, h.Task, h.MaxParallelism, maxParallelism, h.MaxParallelism)
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
// resolveRestore) and picks the handles and operator state.
func pickHandles(old []*backend.Handle, p OpenParams) (*restorePlan, error) {
	par := p.Parallelism
	if par == 0 {
		par = deriveParallelism(p.MaxParallelism, p.Task.Subtask, p.KeyGroups)
	}
	var own *backend.Handle
	for _, h := range old {
		if h.KeyGroups == p.KeyGroups {
			own = h
		}
	}
	// The old parallelism is known when the handles partition the key
	// groups (a checkpoint of a job whose other subtasks run next to
	// another daemon holds only some of them: then the range decides).
	if own != nil && (par == 0 || par == len(old) || !partition(old, p.MaxParallelism)) {
		ops, err := unrescaledOperatorState(own, old)
		if err != nil {
			return nil, err
		}
		return &restorePlan{handles: []*backend.Handle{own}, opState: ops}, nil
	}
	if par == 0 {
		return nil, fmt.Errorf("%w: the state was written at another parallelism (%d subtasks hold it, none with key groups %s) "+
			"and several parallelisms give subtask %d that range: open with the parallelism set",
			backend.ErrInvalidArgument, len(old), p.KeyGroups, p.Task.Subtask)
	}
	if err := covered(old, p.MaxParallelism, p.Task.Operator, par); err != nil {
		return nil, err
	}
	plan, err := rescale.PlanOperator(old, p.MaxParallelism, par)
	if err != nil {
		return nil, err
	}
	st := plan.Subtasks[p.Task.Subtask]
	if st.KeyGroups != p.KeyGroups {
		// p was validated (or derived) against KeyGroupRangeForOperator,
		// which the planner uses too.
		return nil, fmt.Errorf("%w: subtask %d of parallelism %d owns key groups %s, not %s",
			backend.ErrInvalidArgument, p.Task.Subtask, par, st.KeyGroups, p.KeyGroups)
	}
	all, err := plan.OperatorState()
	if err != nil {
		return nil, err
	}
	return &restorePlan{handles: st.Handles(), opState: all[p.Task.Subtask], rescaled: true}, nil
}

// covered refuses a rescale of operator to par from handles old (sorted,
// disjoint) that do not hold every key group of [0, maxParallelism),
// naming the key groups none holds. It is not the request's fault: the
// checkpoint holds only some subtasks of the operator (its other tasks
// ran next to another daemon, or a completion named only some), so
// FAILED_PRECONDITION (issue 37: this was INVALID_ARGUMENT).
func covered(old []*backend.Handle, maxParallelism int, operator string, par int) error {
	var missing []string
	next := 0
	for _, h := range old {
		if h.KeyGroups.Start > next {
			missing = append(missing, backend.KeyGroupRange{Start: next, End: h.KeyGroups.Start - 1}.String())
		}
		next = max(next, h.KeyGroups.End+1)
	}
	if next < maxParallelism {
		missing = append(missing, backend.KeyGroupRange{Start: next, End: maxParallelism - 1}.String())
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
	next := 0
	for _, h := range old {
		if h.KeyGroups.Start != next {
			return false
		}
		next = h.KeyGroups.End + 1
	}
	return next == maxParallelism
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
	merged, err := rescale.RedistributeOperatorState(lists, 1)
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

// PlanRescale plans the restore of operator of job at newParallelism from
// retained checkpoint checkpointID of the job (0: the latest), or from
// savepoint (an id or "savepoints/<id>") when that is set: each new
// subtask's key-group range and the old handles that overlap it, the
// restore base first. It only reads the catalog (no ownership changes);
// Open with the new parallelism restores exactly what it says. The
// manifest planned from is returned too.
func (d *Daemon) PlanRescale(ctx context.Context, job, operator string, checkpointID uint64, savepoint string, newParallelism int) (*rescale.Plan, *catalog.Manifest, error) {
	if err := catalog.ValidateJob(job); err != nil {
		return nil, nil, fmt.Errorf("daemon: plan rescale: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	var m *catalog.Manifest
	var ok bool
	var err error
	var src string
	look := d.lookups()
	switch {
	case savepoint != "":
		id := strings.TrimPrefix(strings.TrimSuffix(savepoint, "/"), catalog.SavepointsDir+"/")
		m, ok, err = look.SavepointContext(ctx, id)
		src = "savepoint " + id
	case checkpointID == 0:
		m, ok, err = look.LatestContext(ctx, job)
		src = "the latest checkpoint of job " + job
	default:
		m, ok, err = look.CheckpointContext(ctx, job, checkpointID)
		src = fmt.Sprintf("checkpoint %d of job %s", checkpointID, job)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("daemon: plan rescale of %s/%s: looking up %s: %w", job, operator, src, err)
	}
	if !ok {
		return nil, nil, fmt.Errorf("daemon: plan rescale of %s/%s: %w: %s is not retained", job, operator, backend.ErrNotFound, src)
	}
	old := operatorHandles(m.Tasks, operator)
	if len(old) == 0 {
		return nil, nil, fmt.Errorf("daemon: plan rescale of %s/%s: %w: %s holds no state of operator %s",
			job, operator, backend.ErrNotFound, src, operator)
	}
	if err := covered(old, old[0].MaxParallelism, operator, newParallelism); err != nil {
		return nil, nil, fmt.Errorf("daemon: plan rescale of %s/%s from %s: %w", job, operator, src, err)
	}
	plan, err := rescale.PlanOperator(old, old[0].MaxParallelism, newParallelism)
	if err != nil {
		return nil, nil, fmt.Errorf("daemon: plan rescale of %s/%s from %s: %w", job, operator, src, err)
	}
	return plan, m, nil
}
