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

// errWriterDone is what a Writer returns once its Group has returned.
var errWriterDone = errors.New("kvstate: write through a group's writer after the group returned")

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
