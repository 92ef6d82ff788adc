package changelog

import (
	"fmt"

	"github.com/statedhq/stated/backend"
)

// Read views and key scans read the inner backend, which holds every
// change the moment it returns; the log only adds durability. A bulk load
// is not forwarded to the inner backend's fast path: its entries must be
// in the log (a checkpoint holds the changes since its base), so it is
// written through Group, entry by entry, after the whole batch is checked.

var (
	_ backend.Viewer     = (*Backend)(nil)
	_ backend.KeyScanner = (*Backend)(nil)
	_ backend.Loader     = (*Backend)(nil)
)

// View implements backend.Viewer.
func (b *Backend) View() (backend.View, error) {
	v, ok := b.inner.(backend.Viewer)
	if !ok {
		return nil, fmt.Errorf("%w: changelog: inner backend %T has no read views", backend.ErrInvalidArgument, b.inner)
	}
	return v.View()
}

// Keys implements backend.KeyScanner.
func (b *Backend) Keys(state string, q backend.KeyScan) ([]backend.StateKey, []byte, bool, error) {
	ks, ok := b.inner.(backend.KeyScanner)
	if !ok {
		return nil, nil, false, fmt.Errorf("%w: changelog: inner backend %T has no key scans", backend.ErrInvalidArgument, b.inner)
	}
	return ks.Keys(state, q)
}

// CountEntries implements backend.KeyScanner.
func (b *Backend) CountEntries(state string) (int64, error) {
	ks, ok := b.inner.(backend.KeyScanner)
	if !ok {
		return 0, fmt.Errorf("%w: changelog: inner backend %T cannot count entries", backend.ErrInvalidArgument, b.inner)
	}
	return ks.CountEntries(state)
}

// Load implements backend.Loader. An aggregate is loaded as a delete and
// one add of its number, which a COUNT aggregate cannot express: loading
// one is refused.
func (b *Backend) Load() (backend.LoadSession, error) {
	b.wmu.Lock()
	closed := b.closed
	b.wmu.Unlock()
	if closed {
		return nil, fmt.Errorf("changelog: load into %s: %w", b.opts.Task, backend.ErrClosed)
	}
	return &load{b: b}, nil
}

type load struct {
	b    *Backend
	done bool
}

// check checks an entry as the operations that load it would.
func (l *load) check(e *backend.LoadEntry) error {
	b := l.b
	b.smu.RLock()
	d, ok := b.states[e.State]
	b.smu.RUnlock()
	task, r := b.opts.Task, b.inner.Info().KeyGroups
	switch {
	case !ok:
		return fmt.Errorf("%w: %q in %s", backend.ErrUnknownState, e.State, task)
	case e.Kind != 0 && e.Kind != d.Kind:
		return fmt.Errorf("%w: the entry says state %q of %s is a %s state, but it is %s", backend.ErrWrongKind, e.State, task, e.Kind, d.Kind)
	case !r.Contains(e.KeyGroup):
		return fmt.Errorf("%w: key group %d, state %q, task %s owns %s", backend.ErrKeyGroupOutOfRange, e.KeyGroup, e.State, task, r)
	case d.Kind == backend.KindList && len(e.Values) == 0:
		return fmt.Errorf("%w: a load entry of list state %q of %s has no elements", backend.ErrInvalidArgument, e.State, task)
	case d.Kind == backend.KindAggregate && e.Number.Type != d.Number:
		return fmt.Errorf("%w: a load entry of aggregate state %q of %s holds a %s, but the state's numbers are %s",
			backend.ErrInvalidArgument, e.State, task, e.Number.Type, d.Number)
	case d.Kind == backend.KindAggregate && d.Aggregate == backend.AggCount:
		return fmt.Errorf("%w: the COUNT aggregate %q of %s cannot be loaded in changelog mode", backend.ErrInvalidArgument, e.State, task)
	}
	max := b.opts.MaxValueSize
	if max <= 0 {
		max = backend.DefaultMaxValueSize
	}
	for _, x := range append([][]byte{e.Key, e.Namespace, e.UserKey, e.Value}, e.Values...) {
		if len(x) > max {
			return fmt.Errorf("%w: an operand of %d bytes for state %q of %s exceeds the %d-byte limit", backend.ErrInvalidArgument, len(x), e.State, task, max)
		}
	}
	return nil
}

func (l *load) Add(entries []backend.LoadEntry) error {
	b := l.b
	if l.done {
		return fmt.Errorf("changelog: load into %s: %w: used after it ended", b.opts.Task, backend.ErrInvalidArgument)
	}
	for i := range entries {
		if err := l.check(&entries[i]); err != nil {
			return fmt.Errorf("load entry %d: %w", i, err)
		}
	}
	var first error
	var aggs []int
	err := b.Group(func(w backend.GroupWriter) {
		for i := range entries {
			e := &entries[i]
			k := backend.Key{KeyGroup: e.KeyGroup, Key: e.Key, Namespace: e.Namespace}
			var err error
			switch b.kindOf(e.State) {
			case backend.KindValue:
				err = w.Put(e.State, k, e.Value)
			case backend.KindMap:
				err = w.MapPut(e.State, k, e.UserKey, e.Value)
			case backend.KindList:
				if err = w.Delete(e.State, k); err == nil {
					err = w.ListAppend(e.State, k, e.Values...)
				}
			case backend.KindTimers:
				err = w.RegisterTimer(e.State, backend.Timer{KeyGroup: e.KeyGroup, Key: e.Key, Namespace: e.Namespace, Timestamp: e.Timestamp})
			case backend.KindAggregate:
				err = w.Delete(e.State, k)
				aggs = append(aggs, i)
			}
			if err != nil && first == nil {
				first = fmt.Errorf("load entry %d: %w", i, err)
			}
		}
	})
	if err == nil {
		err = first
	}
	if err != nil {
		return err
	}
	for _, i := range aggs {
		e := &entries[i]
		if err := b.AggregateAdd(e.State, backend.Key{KeyGroup: e.KeyGroup, Key: e.Key, Namespace: e.Namespace}, e.Number); err != nil {
			return fmt.Errorf("load entry %d: %w", i, err)
		}
	}
	return nil
}

func (b *Backend) kindOf(state string) backend.StateKind {
	b.smu.RLock()
	defer b.smu.RUnlock()
	return b.states[state].Kind
}

func (l *load) Commit() error {
	l.done = true
	return nil
}

func (l *load) Close() { l.done = true }
