package kvstate

import (
	"bytes"
	"fmt"
	"sort"
	"sync"

	"github.com/statedhq/stated/backend"
)

// Config configures a State.
type Config struct {
	// Info describes the instance; errors name its task and range.
	Info backend.Info
	// Clock gives the time for TTL.
	Clock backend.Clock
	// MaxValueSize bounds keys, namespaces, values and map user keys.
	MaxValueSize int
	// States are registered now.
	States []backend.StateDescriptor
	// Restored are the states found in the handles a backend restored from.
	// They stay registered (their data is kept) even if States omits them; a
	// state in both must have the same kind, function and number type (TTL
	// may change: every entry carries its own expiry).
	Restored []backend.StateDescriptor
}

// State implements the data operations of backend.Backend over an Engine.
// Backends embed it and add snapshots and Close.
type State struct {
	eng          Engine
	info         backend.Info
	clock        backend.Clock
	maxValueSize int

	// mu: writers exclusive, readers shared. Snapshots take it exclusively
	// (Exclusive) for their synchronous part.
	mu     sync.RWMutex
	states map[string]backend.StateDescriptor
	closed bool
	// scratch is the write target of the single-operation methods, which
	// hold mu exclusively: Engine copies what it is given, so its key and
	// value buffers are reused instead of allocated for every write.
	scratch target
}

// single returns the scratch target; the caller holds mu exclusively. A
// buffer grown by one large value is dropped, so an idle instance keeps at
// most a small one.
func (s *State) single() *target {
	const keep = 64 << 10
	if cap(s.scratch.key) > keep {
		s.scratch.key = nil
	}
	if cap(s.scratch.val) > keep {
		s.scratch.val = nil
	}
	s.scratch.w = s.eng
	return &s.scratch
}

// New returns a State over eng.
func New(eng Engine, cfg Config) (*State, error) {
	s := &State{eng: eng, info: cfg.Info, clock: cfg.Clock, maxValueSize: cfg.MaxValueSize,
		states: map[string]backend.StateDescriptor{}}
	for _, d := range cfg.Restored {
		if err := d.Validate(); err != nil {
			return nil, fmt.Errorf("%w: restored %v", backend.ErrCorrupt, err)
		}
		if old, ok := s.states[d.Name]; ok && !sameShape(old, d) {
			return nil, fmt.Errorf("%w: restore handles of %s disagree on state %q (%s vs %s)",
				backend.ErrIncompatible, s.info.Task, d.Name, old.Kind, d.Kind)
		}
		s.states[d.Name] = d
	}
	for _, d := range cfg.States {
		if err := d.Validate(); err != nil {
			return nil, err
		}
		if old, ok := s.states[d.Name]; ok && !sameShape(old, d) {
			return nil, fmt.Errorf("%w: state %q of %s is registered as %s but the restored state is %s",
				backend.ErrIncompatible, d.Name, s.info.Task, describe(d), describe(old))
		}
		s.states[d.Name] = d
	}
	return s, nil
}

func sameShape(a, b backend.StateDescriptor) bool {
	return a.Kind == b.Kind && a.Aggregate == b.Aggregate && a.Number == b.Number
}

func describe(d backend.StateDescriptor) string {
	if d.Kind == backend.KindAggregate {
		return fmt.Sprintf("aggregate(%s,%s)", d.Aggregate, d.Number)
	}
	return d.Kind.String()
}

// Engine returns the engine (for the backend's snapshot code).
func (s *State) Engine() Engine { return s.eng }

// Info implements backend.Backend.
func (s *State) Info() backend.Info { return s.info }

// States implements backend.Backend.
func (s *State) States() []backend.StateDescriptor {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.statesLocked()
}

func (s *State) statesLocked() []backend.StateDescriptor {
	out := make([]backend.StateDescriptor, 0, len(s.states))
	for _, d := range s.states {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// RegisterState implements backend.Backend.
func (s *State) RegisterState(d backend.StateDescriptor) error {
	if err := d.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return backend.ErrClosed
	}
	if old, ok := s.states[d.Name]; ok {
		if old != d {
			return fmt.Errorf("%w: state %q of %s is already registered as %s (ttl %s), not %s (ttl %s)",
				backend.ErrIncompatible, d.Name, s.info.Task, describe(old), old.TTL, describe(d), d.TTL)
		}
		return nil
	}
	s.states[d.Name] = d
	return nil
}

// Exclusive runs fn while no operation runs: the synchronous part of a
// snapshot. It returns ErrClosed after Close. It also hands fn the
// registered states, which snapshots record in their handles.
func (s *State) Exclusive(fn func(states []backend.StateDescriptor) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return backend.ErrClosed
	}
	return fn(s.statesLocked())
}

// Close marks the state closed; it reports whether it was open. Backends
// release their engine only when it returns true, which makes their Close
// idempotent.
func (s *State) Close() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	was := !s.closed
	s.closed = true
	return was
}

// lookup checks that the state exists with kind and kg lies in range.
// Callers hold mu.
func (s *State) lookup(state string, kind backend.StateKind, kg int) (backend.StateDescriptor, error) {
	if s.closed {
		return backend.StateDescriptor{}, backend.ErrClosed
	}
	d, ok := s.states[state]
	if !ok {
		return d, fmt.Errorf("%w: %q in %s", backend.ErrUnknownState, state, s.info.Task)
	}
	if d.Kind != kind {
		return d, fmt.Errorf("%w: state %q of %s is a %s state, not %s", backend.ErrWrongKind, state, s.info.Task, d.Kind, kind)
	}
	if !s.info.KeyGroups.Contains(kg) {
		return d, fmt.Errorf("%w: key group %d, state %q, task %s owns %s",
			backend.ErrKeyGroupOutOfRange, kg, state, s.info.Task, s.info.KeyGroups)
	}
	return d, nil
}

// access checks state, kind and key group (lookup) and the sizes of k's
// key and namespace: the checks every keyed operation starts with.
func (s *State) access(state string, kind backend.StateKind, k backend.Key) (backend.StateDescriptor, error) {
	d, err := s.lookup(state, kind, k.KeyGroup)
	if err != nil {
		return d, err
	}
	return d, s.checkKey(state, k)
}

func (s *State) checkSize(state, what string, b []byte) error {
	if len(b) > s.maxValueSize {
		return fmt.Errorf("%w: %s of %d bytes for state %q of %s exceeds the %d-byte limit",
			backend.ErrInvalidArgument, what, len(b), state, s.info.Task, s.maxValueSize)
	}
	return nil
}

func (s *State) checkKey(state string, k backend.Key) error {
	if err := s.checkSize(state, "key", k.Key); err != nil {
		return err
	}
	return s.checkSize(state, "namespace", k.Namespace)
}

func (s *State) nowMs() int64 { return s.clock().UnixMilli() }

// expiryOf is expiryFor at the current time, reading the clock only for a
// state with a TTL (most have none, and the clock costs as much as the
// rest of a write's checks).
func (s *State) expiryOf(d backend.StateDescriptor) int64 {
	if d.TTL <= 0 {
		return 0
	}
	return expiryFor(d, s.nowMs())
}

func expiryFor(d backend.StateDescriptor, now int64) int64 {
	if d.TTL <= 0 {
		return 0
	}
	return now + d.TTL.Milliseconds()
}

func live(expiry, now int64) bool { return expiry == 0 || expiry > now }

// refreshOnRead reports whether reads of d write (TTL on read and write).
func refreshOnRead(d backend.StateDescriptor) bool {
	return d.TTL > 0 && d.TTLUpdate == backend.TTLOnReadAndWrite
}

// lockFor takes the write lock when a read of state refreshes TTLs, else the
// read lock; it returns the unlock function.
func (s *State) lockFor(state string) func() {
	s.mu.RLock()
	d, ok := s.states[state]
	if !ok || !refreshOnRead(d) {
		return s.mu.RUnlock
	}
	s.mu.RUnlock()
	s.mu.Lock()
	return s.mu.Unlock
}

// readLive reads a single-valued entry and returns its payload if it is
// live, with the time it checked that at. The payload is part of the
// engine's copy (Engine.Get), so it is the caller's.
func (s *State) readLive(d backend.StateDescriptor, key []byte) ([]byte, int64, bool, error) {
	v, ok, err := s.eng.Get(key)
	return s.liveValue(d, v, ok, err)
}

// liveValue is readLive of a stored value v the engine has read.
func (s *State) liveValue(d backend.StateDescriptor, v []byte, ok bool, err error) ([]byte, int64, bool, error) {
	if err != nil || !ok {
		return nil, 0, false, err
	}
	expiry, payload, err := decodeValue(v)
	if err != nil {
		return nil, 0, false, fmt.Errorf("state %q of %s: %w", d.Name, s.info.Task, err)
	}
	if expiry == 0 && !refreshOnRead(d) {
		// Live whatever the time, and no refresh needs it: skip the
		// clock, which costs as much as the rest of a read's checks.
		return payload, 0, true, nil
	}
	now := s.nowMs()
	if !live(expiry, now) {
		return nil, now, false, nil
	}
	return payload, now, true, nil
}

// getLive is readLive that, for a state refreshed on read, rewrites the
// expiry.
func (s *State) getLive(d backend.StateDescriptor, key []byte) ([]byte, bool, error) {
	payload, now, ok, err := s.readLive(d, key)
	if err != nil || !ok || !refreshOnRead(d) {
		return payload, ok, err
	}
	if err := s.eng.Set(key, encodeValue(expiryFor(d, now), payload)); err != nil {
		return nil, false, err
	}
	return payload, true, nil
}

// Get implements backend.Backend.
func (s *State) Get(state string, k backend.Key) ([]byte, bool, error) {
	defer s.lockFor(state)()
	d, err := s.access(state, backend.KindValue, k)
	if err != nil {
		return nil, false, err
	}
	return s.getLive(d, entryPrefix(nil, state, k))
}

// Put implements backend.Backend.
func (s *State) Put(state string, k backend.Key, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.put(s.single(), state, k, value)
}

func (s *State) put(t *target, state string, k backend.Key, value []byte) error {
	d, err := s.access(state, backend.KindValue, k)
	if err != nil {
		return err
	}
	if err := s.checkSize(state, "value", value); err != nil {
		return err
	}
	return t.w.Set(t.entryKey(state, k), t.value(s.expiryOf(d), value))
}

// Delete implements backend.Backend.
func (s *State) Delete(state string, k backend.Key) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.delete(s.single(), state, k)
}

func (s *State) delete(t *target, state string, k backend.Key) error {
	d, ok := s.states[state]
	if ok && d.Kind == backend.KindTimers {
		return fmt.Errorf("%w: state %q of %s is a timers state; use DeleteTimer", backend.ErrWrongKind, state, s.info.Task)
	}
	kind := backend.KindValue
	if ok {
		kind = d.Kind
	}
	if _, err := s.lookup(state, kind, k.KeyGroup); err != nil {
		return err
	}
	if err := s.checkKey(state, k); err != nil {
		return err
	}
	key := t.entryKey(state, k)
	if kind == backend.KindMap {
		// The entry prefix starts with a key group (< 0x8000), so its
		// end is never nil: a batch can take it.
		return t.w.DeleteRange(key, prefixEnd(key))
	}
	return t.w.Delete(key)
}

// ListAppend implements backend.Backend.
func (s *State) ListAppend(state string, k backend.Key, values ...[]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listAppend(s.single(), state, k, values)
}

func (s *State) listAppend(t *target, state string, k backend.Key, values [][]byte) error {
	d, err := s.access(state, backend.KindList, k)
	if err != nil {
		return err
	}
	if len(values) == 0 {
		return nil
	}
	expiry := s.expiryOf(d)
	op := t.val[:0]
	for _, v := range values {
		if err := s.checkSize(state, "list element", v); err != nil {
			return err
		}
		op = appendListElement(op, expiry, v)
	}
	t.val = op
	return t.w.Merge(t.entryKey(state, k), op)
}

// ListGet implements backend.Backend.
func (s *State) ListGet(state string, k backend.Key) ([][]byte, error) {
	defer s.lockFor(state)()
	d, err := s.access(state, backend.KindList, k)
	if err != nil {
		return nil, err
	}
	key := entryPrefix(nil, state, k)
	v, ok, err := s.eng.Get(key)
	if err != nil || !ok {
		return nil, err
	}
	elems, err := decodeList(v)
	if err != nil {
		return nil, fmt.Errorf("state %q of %s: %w", state, s.info.Task, err)
	}
	now := s.nowMs()
	var out [][]byte
	var rewrite []byte
	for _, e := range elems {
		if !live(e.Expiry, now) {
			continue
		}
		out = append(out, clone(e.Payload))
		rewrite = appendListElement(rewrite, expiryFor(d, now), e.Payload)
	}
	if refreshOnRead(d) {
		if len(out) == 0 {
			return nil, s.eng.Delete(key)
		}
		return out, s.eng.Set(key, rewrite)
	}
	return out, nil
}

func mapKey(state string, k backend.Key, userKey []byte) []byte {
	return append(entryPrefix(nil, state, k), userKey...)
}

// MapGet implements backend.Backend.
func (s *State) MapGet(state string, k backend.Key, userKey []byte) ([]byte, bool, error) {
	defer s.lockFor(state)()
	d, err := s.access(state, backend.KindMap, k)
	if err != nil {
		return nil, false, err
	}
	if err := s.checkSize(state, "map user key", userKey); err != nil {
		return nil, false, err
	}
	return s.getLive(d, mapKey(state, k, userKey))
}

// MapContains implements backend.Backend.
func (s *State) MapContains(state string, k backend.Key, userKey []byte) (bool, error) {
	_, ok, err := s.MapGet(state, k, userKey)
	return ok, err
}

// MapPut implements backend.Backend.
func (s *State) MapPut(state string, k backend.Key, userKey, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mapPut(s.single(), state, k, userKey, value)
}

func (s *State) mapPut(t *target, state string, k backend.Key, userKey, value []byte) error {
	d, err := s.access(state, backend.KindMap, k)
	if err != nil {
		return err
	}
	if err := s.checkSize(state, "map user key", userKey); err != nil {
		return err
	}
	if err := s.checkSize(state, "map value", value); err != nil {
		return err
	}
	return t.w.Set(t.mapKey(state, k, userKey), t.value(s.expiryOf(d), value))
}

// MapRemove implements backend.Backend.
func (s *State) MapRemove(state string, k backend.Key, userKey []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mapRemove(s.single(), state, k, userKey)
}

func (s *State) mapRemove(t *target, state string, k backend.Key, userKey []byte) error {
	if _, err := s.access(state, backend.KindMap, k); err != nil {
		return err
	}
	if err := s.checkSize(state, "map user key", userKey); err != nil {
		return err
	}
	return t.w.Delete(t.mapKey(state, k, userKey))
}

// MapIterate implements backend.Backend.
func (s *State) MapIterate(state string, k backend.Key, after []byte, limit int) ([]backend.MapEntry, bool, error) {
	defer s.lockFor(state)()
	d, err := s.access(state, backend.KindMap, k)
	if err != nil {
		return nil, false, err
	}
	prefix := entryPrefix(nil, state, k)
	start := prefix
	if after != nil {
		start = append(append(append([]byte{}, prefix...), after...), 0)
	}
	now := s.nowMs()
	var out []backend.MapEntry
	more := false
	err = s.eng.Scan(start, prefixEnd(prefix), func(key, v []byte) (bool, error) {
		expiry, payload, err := decodeValue(v)
		if err != nil {
			return false, fmt.Errorf("state %q of %s: %w", state, s.info.Task, err)
		}
		if !live(expiry, now) {
			return true, nil
		}
		if limit > 0 && len(out) == limit {
			more = true
			return false, nil
		}
		out = append(out, backend.MapEntry{UserKey: clone(key[len(prefix):]), Value: clone(payload)})
		return true, nil
	})
	if err != nil {
		return nil, false, err
	}
	if refreshOnRead(d) {
		for _, e := range out {
			if err := s.eng.Set(append(append([]byte{}, prefix...), e.UserKey...), encodeValue(expiryFor(d, now), e.Value)); err != nil {
				return nil, false, err
			}
		}
	}
	return out, more, nil
}

// AggregateAdd implements backend.Backend.
func (s *State) AggregateAdd(state string, k backend.Key, v backend.Number) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, err := s.access(state, backend.KindAggregate, k)
	if err != nil {
		return err
	}
	if v.Type != d.Number {
		return fmt.Errorf("%w: state %q of %s aggregates %s, got a %s", backend.ErrInvalidArgument, state, s.info.Task, d.Number, v.Type)
	}
	key := entryPrefix(nil, state, k)
	now := s.nowMs()
	var acc backend.Number
	ok := false
	if old, found, err := s.eng.Get(key); err != nil {
		return err
	} else if found {
		expiry, payload, err := decodeValue(old)
		if err != nil {
			return fmt.Errorf("state %q of %s: %w", state, s.info.Task, err)
		}
		if live(expiry, now) {
			if acc, err = decodeNumber(d.Number, payload); err != nil {
				return fmt.Errorf("state %q of %s: %w", state, s.info.Task, err)
			}
			ok = true
		}
	}
	return s.eng.Set(key, encodeValue(expiryFor(d, now), encodeNumber(d.Aggregate.Merge(acc, ok, v))))
}

// AggregateGet implements backend.Backend.
func (s *State) AggregateGet(state string, k backend.Key) (backend.Number, bool, error) {
	defer s.lockFor(state)()
	d, err := s.access(state, backend.KindAggregate, k)
	if err != nil {
		return backend.Number{}, false, err
	}
	payload, ok, err := s.getLive(d, entryPrefix(nil, state, k))
	if err != nil || !ok {
		return backend.Number{}, false, err
	}
	n, err := decodeNumber(d.Number, payload)
	if err != nil {
		return backend.Number{}, false, fmt.Errorf("state %q of %s: %w", state, s.info.Task, err)
	}
	return n, true, nil
}

func (s *State) checkTimer(state string, t backend.Timer) error {
	if _, err := s.lookup(state, backend.KindTimers, t.KeyGroup); err != nil {
		return err
	}
	return s.checkKey(state, backend.Key{KeyGroup: t.KeyGroup, Key: t.Key, Namespace: t.Namespace})
}

// RegisterTimer implements backend.Backend.
func (s *State) RegisterTimer(state string, t backend.Timer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.registerTimer(s.single(), state, t)
}

func (s *State) registerTimer(t *target, state string, tm backend.Timer) error {
	if err := s.checkTimer(state, tm); err != nil {
		return err
	}
	return t.w.Set(t.timerKey(state, tm), nil)
}

// DeleteTimer implements backend.Backend.
func (s *State) DeleteTimer(state string, t backend.Timer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deleteTimer(s.single(), state, t)
}

func (s *State) deleteTimer(t *target, state string, tm backend.Timer) error {
	if err := s.checkTimer(state, tm); err != nil {
		return err
	}
	return t.w.Delete(t.timerKey(state, tm))
}

// PollTimers implements backend.Backend. Each key group's timers are
// contiguous and sorted by timestamp, so one bounded scan per key group
// finds the due ones; the results are merged by timestamp.
func (s *State) PollTimers(state string, watermark int64, limit int) ([]backend.Timer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.lookup(state, backend.KindTimers, s.info.KeyGroups.Start); err != nil {
		return nil, err
	}
	var due []backend.Timer
	var keys [][]byte
	r := s.info.KeyGroups
	for kg := r.Start; kg <= r.End; kg++ {
		p := stateKGPrefix(nil, state, kg)
		end := prefixEnd(p)
		if watermark != 1<<63-1 {
			end = timerKey(nil, state, backend.Timer{KeyGroup: kg, Timestamp: watermark + 1})
			end = end[:len(p)+8]
		}
		n := 0
		err := s.eng.Scan(p, end, func(key, _ []byte) (bool, error) {
			t, ok := decodeTimer(kg, key[len(p):])
			if !ok {
				return false, fmt.Errorf("%w: timer key %x of state %q of %s", backend.ErrCorrupt, key, state, s.info.Task)
			}
			due = append(due, t)
			keys = append(keys, clone(key))
			n++
			return limit <= 0 || n < limit, nil
		})
		if err != nil {
			return nil, err
		}
	}
	idx := make([]int, len(due))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return timerLess(due[idx[a]], due[idx[b]]) })
	if limit > 0 && len(idx) > limit {
		idx = idx[:limit]
	}
	out := make([]backend.Timer, len(idx))
	for i, j := range idx {
		out[i] = due[j]
		if err := s.eng.Delete(keys[j]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func timerLess(a, b backend.Timer) bool {
	if a.Timestamp != b.Timestamp {
		return a.Timestamp < b.Timestamp
	}
	if a.KeyGroup != b.KeyGroup {
		return a.KeyGroup < b.KeyGroup
	}
	if c := bytes.Compare(a.Key, b.Key); c != 0 {
		return c < 0
	}
	return bytes.Compare(a.Namespace, b.Namespace) < 0
}
