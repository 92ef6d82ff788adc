package kvstate

import (
	"bytes"
	"fmt"
	"sort"
	"sync"

	"github.com/statedhq/stated/backend"
)

// Scanner reads a frozen engine (a memkv clone, a Pebble snapshot): Scan is
// Engine.Scan.
type Scanner interface {
	Scan(start, end []byte, fn func(k, v []byte) (bool, error)) error
}

// FreezeView freezes a view with no writer running: freeze runs under
// Exclusive and returns the frozen engine and what releases it (nil: no
// release needed). The view decodes the frozen engine's entries with the
// states registered at that moment and leaves out what had expired then.
func (s *State) FreezeView(freeze func() (Scanner, func(), error)) (*View, error) {
	v := &View{info: s.info}
	err := s.Exclusive(func(states []backend.StateDescriptor) error {
		sc, release, err := freeze()
		if err != nil {
			return err
		}
		v.scan, v.release = sc, release
		v.setStates(states)
		return nil
	})
	if err != nil {
		return nil, err
	}
	v.nowMs = s.nowMs()
	return v, nil
}

// View implements backend.View over a frozen engine.
type View struct {
	info   backend.Info
	states []backend.StateDescriptor // scan order
	ids    map[string]int
	nowMs  int64

	// mu: Scan holds it shared, Release exclusively, so a release waits
	// for a running scan and never frees what it reads.
	mu       sync.RWMutex
	scan     Scanner
	release  func()
	released bool
}

var _ backend.View = (*View)(nil)

// setStates orders states as their stored keys sort: uvarint(len) then the
// name, which for names of at most MaxStateNameLen (128) bytes is by
// length, then bytewise.
func (v *View) setStates(states []backend.StateDescriptor) {
	v.states = append([]backend.StateDescriptor(nil), states...)
	sort.Slice(v.states, func(i, j int) bool {
		a, b := v.states[i].Name, v.states[j].Name
		if len(a) != len(b) {
			return len(a) < len(b)
		}
		return a < b
	})
	v.ids = make(map[string]int, len(v.states))
	for i, d := range v.states {
		v.ids[d.Name] = i
	}
}

// States implements backend.View.
func (v *View) States() []backend.StateDescriptor {
	return append([]backend.StateDescriptor(nil), v.states...)
}

// Release implements backend.View.
func (v *View) Release() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.released {
		return
	}
	v.released = true
	v.scan = nil
	if v.release != nil {
		v.release()
	}
}

// CheckScanRange checks that r is a non-empty range within the instance's,
// and that after (when set) is a stored key in r; it returns the span to
// scan.
func CheckScanRange(info backend.Info, r backend.KeyGroupRange, after []byte) (start, end []byte, err error) {
	if r.Empty() || !info.KeyGroups.Covers(r) {
		return nil, nil, fmt.Errorf("%w: key groups %s are not within the range %s of %s",
			backend.ErrInvalidArgument, r, info.KeyGroups, info.Task)
	}
	start, end = KeyGroupSpan(r)
	if after != nil {
		kg, err := KeyGroupOf(after)
		if err != nil || !r.Contains(kg) {
			return nil, nil, fmt.Errorf("%w: the cursor does not come from a scan of key groups %s of %s "+
				"(pass the cursor of the last page of the same range, or none to start over)",
				backend.ErrInvalidArgument, r, info.Task)
		}
		// The smallest key after the cursor's.
		start = append(append(make([]byte, 0, len(after)+1), after...), 0)
	}
	return start, end, nil
}

// Scan implements backend.View.
func (v *View) Scan(r backend.KeyGroupRange, after []byte, fn func(e *backend.ViewEntry) (bool, error)) error {
	start, end, err := CheckScanRange(v.info, r, after)
	if err != nil {
		return err
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.released {
		return fmt.Errorf("%w: the view of %s was released", backend.ErrClosed, v.info.Task)
	}
	var e backend.ViewEntry
	return v.scan.Scan(start, end, func(k, val []byte) (bool, error) {
		ok, err := v.decode(k, val, &e)
		if err != nil || !ok {
			return err == nil, err
		}
		return fn(&e)
	})
}

// decode fills e from a stored entry; false: the entry expired before the
// view was taken and is left out.
func (v *View) decode(k, val []byte, e *backend.ViewEntry) (bool, error) {
	dk, err := SplitKey(k)
	if err != nil {
		return false, err
	}
	id, ok := v.ids[string(dk.State)]
	if !ok {
		return false, fmt.Errorf("%w: stored key %x of %s names state %q, which is not registered", backend.ErrCorrupt, k, v.info.Task, dk.State)
	}
	d := v.states[id]
	values := e.Values[:0]
	*e = backend.ViewEntry{KeyGroup: dk.KeyGroup, StateID: id, State: d.Name, Kind: d.Kind, Cursor: k}
	bad := func(what string) error {
		return fmt.Errorf("%w: stored %s entry %x of state %q of %s: %s", backend.ErrCorrupt, d.Kind, k, d.Name, v.info.Task, what)
	}
	if d.Kind == backend.KindTimers {
		t, ok := decodeTimer(dk.KeyGroup, dk.Rest)
		if !ok {
			return false, bad("bad timer key")
		}
		e.Key, e.Namespace, e.Timestamp = t.Key, t.Namespace, t.Timestamp
		return true, nil
	}
	key, rest, ok := readBytes(dk.Rest)
	if !ok {
		return false, bad("bad key")
	}
	ns, rest, ok := readBytes(rest)
	if !ok {
		return false, bad("bad namespace")
	}
	e.Key, e.Namespace = key, ns
	if d.Kind == backend.KindMap {
		e.UserKey = rest
	} else if len(rest) != 0 {
		return false, bad("bytes after the namespace")
	}
	if d.Kind == backend.KindList {
		elems, err := decodeList(val)
		if err != nil {
			return false, bad(err.Error())
		}
		for _, el := range elems {
			if live(el.Expiry, v.nowMs) {
				values = append(values, el.Payload)
			}
		}
		e.Values = values
		return len(values) > 0, nil
	}
	expiry, payload, err := decodeValue(val)
	if err != nil {
		return false, bad(err.Error())
	}
	if !live(expiry, v.nowMs) {
		return false, nil
	}
	switch d.Kind {
	case backend.KindValue, backend.KindMap:
		e.Value = payload
	case backend.KindAggregate:
		n, err := decodeNumber(d.Number, payload)
		if err != nil {
			return false, bad(err.Error())
		}
		e.Number = n
	}
	return true, nil
}

// stateOf checks that state may be listed by Keys: registered, not timers.
func (s *State) keysState(state string) error {
	if s.closed {
		return backend.ErrClosed
	}
	d, ok := s.states[state]
	if !ok {
		return fmt.Errorf("%w: %q in %s", backend.ErrUnknownState, state, s.info.Task)
	}
	if d.Kind == backend.KindTimers {
		return fmt.Errorf("%w: state %q of %s is a timers state, whose keys are not listed", backend.ErrWrongKind, state, s.info.Task)
	}
	return nil
}

// Keys implements backend.KeyScanner. It holds the reader lock for one
// page, whose work q.MaxRead bounds.
func (s *State) Keys(state string, q backend.KeyScan) ([]backend.StateKey, []byte, bool, error) {
	if q.Limit <= 0 || q.MaxRead <= 0 {
		return nil, nil, false, fmt.Errorf("%w: key scan of %s with limit %d and max read %d (both must be positive)",
			backend.ErrInvalidArgument, s.info.Task, q.Limit, q.MaxRead)
	}
	if _, _, err := CheckScanRange(s.info, q.Range, q.After); err != nil {
		return nil, nil, false, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.keysState(state); err != nil {
		return nil, nil, false, err
	}
	first := q.Range.Start
	var resume []byte
	if q.After != nil {
		dk, err := SplitKey(q.After)
		if err != nil || dk.State != state {
			return nil, nil, false, fmt.Errorf("%w: the cursor does not come from a key scan of state %q of %s",
				backend.ErrInvalidArgument, state, s.info.Task)
		}
		first = dk.KeyGroup
		resume = prefixEnd(q.After)
	}
	var keys []backend.StateKey
	var last []byte // entry prefix of the last entry read
	read := 0
	full := func() bool { return len(keys) >= q.Limit || read >= q.MaxRead }
	for kg := first; kg <= q.Range.End; kg++ {
		prefix := stateKGPrefix(nil, state, kg)
		start := prefix
		if kg == first && resume != nil {
			start = resume
		}
		err := s.eng.Scan(start, prefixEnd(prefix), func(k, _ []byte) (bool, error) {
			key, rest, ok := readBytes(k[len(prefix):])
			var ns []byte
			if ok {
				ns, rest, ok = readBytes(rest)
			}
			if !ok {
				return false, fmt.Errorf("%w: stored key %x of state %q of %s has a bad key or namespace", backend.ErrCorrupt, k, state, s.info.Task)
			}
			p := k[:len(k)-len(rest)]
			if last != nil && bytes.Equal(p, last) {
				return true, nil // another user key of the same map
			}
			read++
			last = append(last[:0], p...)
			if !q.HasNamespace || bytes.Equal(ns, q.Namespace) {
				keys = append(keys, backend.StateKey{KeyGroup: kg, Key: clone(key), Namespace: clone(ns)})
			}
			return !full(), nil
		})
		if err != nil {
			return nil, nil, false, err
		}
		if full() {
			return keys, last, true, nil
		}
	}
	return keys, nil, false, nil
}

// CountEntries implements backend.KeyScanner.
func (s *State) CountEntries(state string) (int64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, backend.ErrClosed
	}
	var n int64
	count := func(k, _ []byte) (bool, error) { n++; return true, nil }
	if state == "" {
		start, end := KeyGroupSpan(s.info.KeyGroups)
		return n, s.eng.Scan(start, end, count)
	}
	if _, ok := s.states[state]; !ok {
		return 0, fmt.Errorf("%w: %q in %s", backend.ErrUnknownState, state, s.info.Task)
	}
	for kg := s.info.KeyGroups.Start; kg <= s.info.KeyGroups.End; kg++ {
		p := stateKGPrefix(nil, state, kg)
		if err := s.eng.Scan(p, prefixEnd(p), count); err != nil {
			return 0, err
		}
	}
	return n, nil
}
