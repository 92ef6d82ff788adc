package kvstate

import (
	"errors"

	"github.com/statedhq/stated/backend"
)

// writes is where the write bodies of State write: the Engine itself or a
// Batch of a Group.
type writes interface {
	Set(key, value []byte) error
	Merge(key, operand []byte) error
	Delete(key []byte) error
	DeleteRange(start, end []byte) error
}

// target is a write destination with scratch buffers for the stored keys
// and values it is handed. Engine and Batch copy what they are given, so a
// Group's writes reuse the buffers; the single-operation methods use a
// fresh target (nil buffers: one allocation each, as before).
type target struct {
	w        writes
	key, val []byte
}

func (t *target) entryKey(state string, k backend.Key) []byte {
	t.key = entryPrefix(t.key[:0], state, k)
	return t.key
}

func (t *target) mapKey(state string, k backend.Key, userKey []byte) []byte {
	t.key = append(entryPrefix(t.key[:0], state, k), userKey...)
	return t.key
}

func (t *target) timerKey(state string, tm backend.Timer) []byte {
	t.key = timerKey(t.key[:0], state, tm)
	return t.key
}

// value encodes a stored single value (see encodeValue).
func (t *target) value(expiry int64, payload []byte) []byte {
	if cap(t.val) < 9+len(payload) {
		t.val = make([]byte, 0, 9+len(payload))
	}
	t.val = append(appendHeader(t.val[:0], expiry), payload...)
	return t.val
}

// errWriterDone is what a Writer or Reader returns once its group has
// returned.
var errWriterDone = errors.New("kvstate: use of a group's writer or reader after the group returned")

// Writer makes the blind writes of a Group (backend.GroupWriter). Each
// method checks its operation exactly as the State method of the same name
// does and returns that error; a write that returns nil is applied when
// the group commits.
type Writer struct {
	s    *State
	t    target
	done bool
}

var _ backend.GroupWriter = (*Writer)(nil)

// Put is State.Put within a group.
func (w *Writer) Put(state string, k backend.Key, value []byte) error {
	if w.done {
		return errWriterDone
	}
	return w.s.put(&w.t, state, k, value)
}

// Delete is State.Delete within a group.
func (w *Writer) Delete(state string, k backend.Key) error {
	if w.done {
		return errWriterDone
	}
	return w.s.delete(&w.t, state, k)
}

// ListAppend is State.ListAppend within a group.
func (w *Writer) ListAppend(state string, k backend.Key, values ...[]byte) error {
	if w.done {
		return errWriterDone
	}
	return w.s.listAppend(&w.t, state, k, values)
}

// MapPut is State.MapPut within a group.
func (w *Writer) MapPut(state string, k backend.Key, userKey, value []byte) error {
	if w.done {
		return errWriterDone
	}
	return w.s.mapPut(&w.t, state, k, userKey, value)
}

// MapRemove is State.MapRemove within a group.
func (w *Writer) MapRemove(state string, k backend.Key, userKey []byte) error {
	if w.done {
		return errWriterDone
	}
	return w.s.mapRemove(&w.t, state, k, userKey)
}

// RegisterTimer is State.RegisterTimer within a group.
func (w *Writer) RegisterTimer(state string, t backend.Timer) error {
	if w.done {
		return errWriterDone
	}
	return w.s.registerTimer(&w.t, state, t)
}

// Group implements backend.Grouper: it runs fn with the writer lock held
// and hands it a Writer. Over an engine that is a Batcher the writes go
// into one batch, committed before Group returns and before the lock is
// released, so no reader, writer or snapshot (Exclusive) sees part of the
// group, and nothing is acknowledged before it is committed. Over other
// engines each write is applied as it is made. fn must not call other
// methods of s (the lock is held). Group returns the commit's error: then
// none of the group's writes was applied.
func (s *State) Group(fn func(w backend.GroupWriter)) (err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &Writer{s: s, t: target{w: s.eng}}
	defer func() { w.done = true }()
	bt, ok := s.eng.(Batcher)
	if !ok || s.closed {
		fn(w)
		return nil
	}
	b := bt.NewBatch()
	committed := false
	defer func() {
		if !committed {
			_ = b.Close()
		}
	}()
	w.t.w = b
	fn(w)
	w.done = true
	committed = true
	if b.Empty() {
		return b.Close()
	}
	return b.Commit()
}

// Reader makes the point reads of a ReadGroup (backend.GroupReader): each
// method is the State method of the same name, except that the value it
// returns is valid only until the reader's next read (over an engine that
// is an AppendGetter it is in a buffer the reader reuses, so a run of
// reads allocates no value) and that a read that would write (a state
// whose TTL is refreshed on read) fails with backend.ErrNotInGroup
// instead, to be made with the State method.
type Reader struct {
	s        *State
	key, val []byte
	done     bool
}

var _ backend.GroupReader = (*Reader)(nil)

// ReadGroup implements backend.ReadGrouper: it runs fn with the reader lock
// held (so with no writer and no snapshot), handing it a Reader.
func (s *State) ReadGroup(fn func(r backend.GroupReader)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r := &Reader{s: s}
	defer func() { r.done = true }()
	fn(r)
}

// ReadGroups implements backend.ParallelReadGrouper: ReadGroup with n
// Readers (at least one). A Reader's only mutable state is its own key
// buffer, and an Engine supports concurrent readers, so the readers may run
// on n goroutines at once.
func (s *State) ReadGroups(n int, fn func(rs []backend.GroupReader)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	readers := make([]Reader, max(n, 1))
	rs := make([]backend.GroupReader, len(readers))
	for i := range readers {
		readers[i].s = s
		rs[i] = &readers[i]
	}
	defer func() {
		for i := range readers {
			readers[i].done = true
		}
	}()
	fn(rs)
}

func (r *Reader) get(state string, kind backend.StateKind, k backend.Key, userKey []byte, isMap bool) ([]byte, bool, error) {
	if r.done {
		return nil, false, errWriterDone
	}
	s := r.s
	d, err := s.access(state, kind, k)
	if err != nil {
		return nil, false, err
	}
	if refreshOnRead(d) {
		return nil, false, backend.ErrNotInGroup
	}
	r.key = entryPrefix(r.key[:0], state, k)
	if isMap {
		if err := s.checkSize(state, "map user key", userKey); err != nil {
			return nil, false, err
		}
		r.key = append(r.key, userKey...)
	}
	var payload []byte
	var ok bool
	if ag, isAG := s.eng.(AppendGetter); isAG {
		var found bool
		r.val, found, err = ag.AppendGet(r.val[:0], r.key)
		payload, _, ok, err = s.liveValue(d, r.val, found, err)
	} else {
		payload, _, ok, err = s.readLive(d, r.key)
	}
	return payload, ok, err
}

// Get is State.Get within a read group.
func (r *Reader) Get(state string, k backend.Key) ([]byte, bool, error) {
	return r.get(state, backend.KindValue, k, nil, false)
}

// MapGet is State.MapGet within a read group.
func (r *Reader) MapGet(state string, k backend.Key, userKey []byte) ([]byte, bool, error) {
	return r.get(state, backend.KindMap, k, userKey, true)
}

// MapContains is State.MapContains within a read group.
func (r *Reader) MapContains(state string, k backend.Key, userKey []byte) (bool, error) {
	_, ok, err := r.get(state, backend.KindMap, k, userKey, true)
	return ok, err
}
