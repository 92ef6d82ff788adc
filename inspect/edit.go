package inspect

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/kvlayout"
	"github.com/statedhq/stated/catalog"
)

// Edit says how Rewrite changes the state it copies. The zero Edit copies
// everything as it is.
type Edit struct {
	// DropStates are states left out, in every operator that has them.
	DropStates []string
	// RenameStates maps a state's name to its new one, in every operator
	// that has it. The new name must not be taken.
	RenameStates map[string]string
	// KeepKeyGroups, when not empty, keeps only the entries of these key
	// groups; DropKeyGroups drops the entries of these. Tasks keep their
	// key-group ranges (the dropped groups are empty), so the savepoint
	// still covers every key group and restores at any parallelism.
	KeepKeyGroups []backend.KeyGroupRange
	DropKeyGroups []backend.KeyGroupRange
	// CopyOperators maps an operator to a new one that gets a copy of its
	// state (after the edits above): every task under the new name, its
	// operator state included. The new name must not be taken.
	CopyOperators map[string]string
}

func (e *Edit) keepKeyGroup(kg int) bool {
	keep := len(e.KeepKeyGroups) == 0
	for _, r := range e.KeepKeyGroups {
		if r.Contains(kg) {
			keep = true
			break
		}
	}
	for _, r := range e.DropKeyGroups {
		if r.Contains(kg) {
			return false
		}
	}
	return keep
}

// check refuses an edit that names a state or operator the source does
// not have, or a new name it already has: a typo must not make a
// savepoint that silently differs from what was asked.
func (e *Edit) check(m *catalog.Manifest) error {
	states := map[string]bool{}
	ops := map[string]bool{}
	for _, h := range m.Tasks {
		ops[h.Task.Operator] = true
		for _, d := range h.States {
			states[d.Name] = true
		}
	}
	var bad []string
	for _, s := range e.DropStates {
		if !states[s] {
			bad = append(bad, fmt.Sprintf("state %q to drop is in no task", s))
		}
		if _, ok := e.RenameStates[s]; ok {
			bad = append(bad, fmt.Sprintf("state %q is both dropped and renamed", s))
		}
	}
	renamedTo := map[string]bool{}
	for from, to := range e.RenameStates {
		if !states[from] {
			bad = append(bad, fmt.Sprintf("state %q to rename is in no task", from))
		}
		if to == "" {
			bad = append(bad, fmt.Sprintf("new name of state %q is empty", from))
		}
		if states[to] && !slices.Contains(e.DropStates, to) {
			if _, moved := e.RenameStates[to]; !moved {
				bad = append(bad, fmt.Sprintf("state %q cannot be renamed to %q: that state exists (drop or rename it too)", from, to))
			}
		}
		if renamedTo[to] {
			bad = append(bad, fmt.Sprintf("two states are renamed to %q", to))
		}
		renamedTo[to] = true
	}
	for from, to := range e.CopyOperators {
		if !ops[from] {
			bad = append(bad, fmt.Sprintf("operator %q to copy has no task", from))
		}
		if ops[to] {
			bad = append(bad, fmt.Sprintf("operator %q cannot be the copy of %q: it exists", to, from))
		}
		if err := (backend.TaskID{Job: m.Job, Operator: to}).Validate(); err != nil {
			bad = append(bad, err.Error())
		}
	}
	for _, r := range append(slices.Clone(e.KeepKeyGroups), e.DropKeyGroups...) {
		if r.Empty() {
			bad = append(bad, fmt.Sprintf("key-group range %s is empty", r))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	return fmt.Errorf("inspect: %w: %s", backend.ErrInvalidArgument, strings.Join(bad, "; "))
}

// states returns d's states after the edit.
func (e *Edit) states(in []backend.StateDescriptor) []backend.StateDescriptor {
	var out []backend.StateDescriptor
	for _, d := range in {
		if slices.Contains(e.DropStates, d.Name) {
			continue
		}
		if to, ok := e.RenameStates[d.Name]; ok {
			d.Name = to
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Rewrite writes a new canonical savepoint into t with the state this
// reader reads (a checkpoint or a savepoint, never changed), edited as e
// says. Entries are copied as stored (TTL expiries kept); entries whose
// TTL has passed are left out, as any savepoint leaves them out. Each
// task is restored and staged in a temporary directory, one at a time.
// On failure nothing of the new savepoint is left.
func (r *Reader) Rewrite(ctx context.Context, e Edit, t Target) (m *catalog.Manifest, err error) {
	if err := e.check(r.m); err != nil {
		return nil, err
	}
	for _, h := range r.m.Tasks {
		if len(h.Channels) > 0 {
			return nil, fmt.Errorf("inspect: %w: %s of %s holds channel state (in-flight data); a savepoint holds none: rewrite a savepoint, or a checkpoint taken aligned",
				backend.ErrInvalidArgument, h.Task, r.What())
		}
		if err := r.Readable(ctx, h); err != nil {
			return nil, err
		}
	}
	w, err := newSPWriter(ctx, t)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			w.abort(ctx)
		}
	}()
	for _, h := range r.m.Tasks {
		tasks := []backend.TaskID{h.Task}
		if to, ok := e.CopyOperators[h.Task.Operator]; ok {
			c := h.Task
			c.Operator = to
			tasks = append(tasks, c)
		}
		if err := r.rewriteTask(ctx, &e, h, tasks, w); err != nil {
			return nil, err
		}
	}
	return w.complete(ctx, r.m.Job, r.m.CheckpointID)
}

// rewriteTask restores h once and writes it as each of tasks.
func (r *Reader) rewriteTask(ctx context.Context, e *Edit, h *backend.Handle, tasks []backend.TaskID, w *spWriter) (err error) {
	dir, err := os.MkdirTemp(r.opts.TempDir, "stated-inspect-")
	if err != nil {
		return fmt.Errorf("inspect: temporary directory for %s: %w", h.Task, err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	db, closeDB, err := r.restore(ctx, h, h.KeyGroups, dir)
	if err != nil {
		return fmt.Errorf("inspect: read %s of %s: %w", h.Task, r.What(), err)
	}
	defer closeDB()
	states := e.states(h.States)
	known := map[string]bool{}
	for _, d := range h.States {
		known[d.Name] = true
	}
	for _, task := range tasks {
		out, err := w.openTask(ctx, task, h.KeyGroups, h.MaxParallelism, states)
		if err != nil {
			return err
		}
		out.ops = h.OperatorState
		if err := r.copyEdited(ctx, e, h, db, known, out); err != nil {
			out.close()
			return err
		}
		if err := out.finish(ctx, r.m.CheckpointID); err != nil {
			return err
		}
	}
	return nil
}

// copyEdited copies every stored entry of db that e keeps into out.
func (r *Reader) copyEdited(ctx context.Context, e *Edit, h *backend.Handle, db *pebble.DB, known map[string]bool, out *taskOut) error {
	lo, hi := kvlayout.KeyGroupSpan(h.KeyGroups)
	it, err := db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("inspect: read %s of %s: %w", h.Task, r.What(), err)
	}
	defer it.Close()
	var key []byte
	for it.First(); it.Valid(); it.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		k := it.Key()
		dk, err := kvlayout.SplitKey(k)
		if err != nil {
			return fmt.Errorf("inspect: %s of %s: %w", h.Task, r.What(), err)
		}
		if !known[dk.State] {
			return fmt.Errorf("inspect: %s of %s: %w: stored key %x: state %q is not among the handle's states",
				h.Task, r.What(), backend.ErrCorrupt, k, dk.State)
		}
		if !e.keepKeyGroup(dk.KeyGroup) || slices.Contains(e.DropStates, dk.State) {
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("inspect: read %s of %s: %w", h.Task, r.What(), err)
		}
		if to, ok := e.RenameStates[dk.State]; ok {
			key = kvlayout.AppendStatePrefix(key[:0], to, dk.KeyGroup)
			key = append(key, dk.Rest...)
			k = key
		}
		if err := out.set(k, v); err != nil {
			return fmt.Errorf("inspect: stage %s of the new savepoint: %w", out.b.Info().Task, err)
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("inspect: read %s of %s: %w", h.Task, r.What(), err)
	}
	return nil
}
