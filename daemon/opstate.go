package daemon

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
)

// Operator (non-keyed) state. The daemon, not the backend, keeps it: it is
// a few named lists per instance (offsets, small bookkeeping), the same for
// every backend kind, and it travels inline in the task's handle
// (backend.Handle.OperatorState), so it lands in the checkpoint's
// _metadata without a file of its own. Every snapshot the daemon takes
// (checkpoints, native and canonical savepoints) carries the lists as they
// were at its synchronous part; Open restores them (see restore.go).

// operatorState is the operator state of one instance. Stored elements are
// never modified (a set replaces the slice, an append may only grow it past
// the length others hold), so readers may keep what they were given.
type operatorState struct {
	mu    sync.Mutex
	lists map[string]*backend.OperatorList
	bytes int
}

func newOperatorState(lists []backend.OperatorList) *operatorState {
	s := &operatorState{lists: map[string]*backend.OperatorList{}}
	for _, l := range lists {
		if len(l.Elements) == 0 {
			continue
		}
		l := l
		s.lists[l.Name] = &l
		for _, e := range l.Elements {
			s.bytes += len(e)
		}
	}
	return s
}

func checkOperatorList(name string, mode backend.OperatorStateMode) error {
	if len(name) == 0 || len(name) > backend.MaxStateNameLen {
		return fmt.Errorf("%w: operator state name %q must have 1..%d bytes", backend.ErrInvalidArgument, name, backend.MaxStateNameLen)
	}
	if mode != "" && mode != backend.OperatorSplit && mode != backend.OperatorUnion {
		return fmt.Errorf("%w: operator state %q: mode %q (want split or union)", backend.ErrInvalidArgument, name, mode)
	}
	return nil
}

func copyElements(values [][]byte) [][]byte {
	n := 0
	for _, v := range values {
		n += len(v)
	}
	// One allocation for all the bytes: values are views into a request
	// buffer that goes back to its pool.
	buf := make([]byte, 0, n)
	out := make([][]byte, len(values))
	for i, v := range values {
		buf = append(buf, v...)
		out[i] = buf[len(buf)-len(v) : len(buf) : len(buf)]
	}
	return out
}

func (s *operatorState) limitErr(name string, total int) error {
	return fmt.Errorf("%w: operator state of the instance would hold %d bytes with list %q, more than the %d-byte bound "+
		"(operator state travels inline in every checkpoint's metadata; keep data in keyed state)",
		ErrLimit, total, name, backend.MaxOperatorStateBytes)
}

// OperatorSet replaces operator list name with values (none: removes it).
// mode "" keeps the list's mode (split for a new list). The values are
// copied.
func (in *Instance) OperatorSet(name string, mode backend.OperatorStateMode, values [][]byte) error {
	if err := checkOperatorList(name, mode); err != nil {
		return err
	}
	s := in.ops
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.lists[name]
	oldBytes := 0
	if old != nil {
		for _, e := range old.Elements {
			oldBytes += len(e)
		}
		if mode == "" {
			mode = old.Mode
		}
	}
	if len(values) == 0 {
		delete(s.lists, name)
		s.bytes -= oldBytes
		return nil
	}
	n := 0
	for _, v := range values {
		n += len(v)
	}
	if total := s.bytes - oldBytes + n; total > backend.MaxOperatorStateBytes {
		return s.limitErr(name, total)
	}
	if mode == "" {
		mode = backend.OperatorSplit
	}
	elems := copyElements(values)
	s.lists[name] = &backend.OperatorList{Name: name, Mode: mode, Elements: elems}
	s.bytes += n - oldBytes
	return nil
}

// OperatorAppend appends values to operator list name, creating it (with
// mode, split if ""). A mode other than the list's is refused.
func (in *Instance) OperatorAppend(name string, mode backend.OperatorStateMode, values [][]byte) error {
	if err := checkOperatorList(name, mode); err != nil {
		return err
	}
	if len(values) == 0 {
		return fmt.Errorf("%w: operator state %q: append without values", backend.ErrInvalidArgument, name)
	}
	s := in.ops
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lists[name]
	if l != nil && mode != "" && mode != l.Mode {
		return fmt.Errorf("%w: operator state %q is a %s list; an append cannot make it %s (set it to change the mode)",
			backend.ErrInvalidArgument, name, l.Mode, mode)
	}
	n := 0
	for _, v := range values {
		n += len(v)
	}
	if total := s.bytes + n; total > backend.MaxOperatorStateBytes {
		return s.limitErr(name, total)
	}
	elems := copyElements(values)
	if l == nil {
		if mode == "" {
			mode = backend.OperatorSplit
		}
		s.lists[name] = &backend.OperatorList{Name: name, Mode: mode, Elements: elems}
	} else {
		l.Elements = append(l.Elements, elems...)
	}
	s.bytes += n
	return nil
}

// OperatorGet returns operator list name; found is false if the instance
// has no such list (or it is empty). The elements must not be modified.
func (in *Instance) OperatorGet(name string) (list backend.OperatorList, found bool, err error) {
	if err := checkOperatorList(name, ""); err != nil {
		return backend.OperatorList{}, false, err
	}
	s := in.ops
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lists[name]
	if l == nil {
		return backend.OperatorList{Name: name}, false, nil
	}
	return backend.OperatorList{Name: l.Name, Mode: l.Mode, Elements: slices.Clip(l.Elements)}, true, nil
}

// OperatorState returns every operator list of the instance, sorted by
// name: what a snapshot taken now carries.
func (in *Instance) OperatorState() []backend.OperatorList {
	s := in.ops
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.lists) == 0 {
		return nil
	}
	out := make([]backend.OperatorList, 0, len(s.lists))
	for _, l := range s.lists {
		out = append(out, backend.OperatorList{Name: l.Name, Mode: l.Mode, Elements: slices.Clip(l.Elements)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// withOperatorState returns a copy of h that carries ops (the backend may
// keep h for its own bookkeeping, so it is not changed).
func withOperatorState(h *backend.Handle, ops []backend.OperatorList) *backend.Handle {
	if h == nil || len(ops) == 0 {
		return h
	}
	c := *h
	c.OperatorState = ops
	return &c
}

// canonicalWithOperatorState makes a canonical savepoint of an instance
// carry its operator state: the catalog asks the backend for a canonical
// snapshot, and this wrapper adds the lists to the handle it returns.
type canonicalWithOperatorState struct {
	backend.Backend
	in  *Instance
	ops []backend.OperatorList
}

var _ backend.CanonicalSnapshotter = canonicalWithOperatorState{}

func (c canonicalWithOperatorState) CanonicalSnapshot(ctx context.Context, id uint64, store tiered.Store, dir string) (backend.PendingSnapshot, error) {
	// CanonicalSnapshotter is optional: without it the instance's backend
	// cannot take part in a canonical savepoint, which then fails with
	// ErrUnsupported (the catalog releases the other tasks' snapshots); a
	// native savepoint still works.
	cs, ok := c.Backend.(backend.CanonicalSnapshotter)
	if !ok {
		return nil, fmt.Errorf("%w: backend %s has no canonical snapshot", ErrUnsupported, c.Info().Kind)
	}
	var p backend.PendingSnapshot
	err := c.in.snapshotLocked(func() (err error) {
		p, err = cs.CanonicalSnapshot(ctx, id, store, dir)
		return err
	})
	if err != nil {
		return nil, err
	}
	return pendingWithOperatorState{PendingSnapshot: p, ops: c.ops}, nil
}

type pendingWithOperatorState struct {
	backend.PendingSnapshot
	ops []backend.OperatorList
}

func (p pendingWithOperatorState) Run(ctx context.Context) (*backend.Handle, error) {
	h, err := p.PendingSnapshot.Run(ctx)
	return withOperatorState(h, p.ops), err
}
