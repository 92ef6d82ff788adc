package kvstate

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/statedhq/stated/backend"
)

// KV is one stored entry, encoded: a key of the frozen key layout and its
// stored value.
type KV struct{ K, V []byte }

// EncodeLoad checks the entries of a bulk load as the matching operations
// would (state, kind, key group, sizes) and appends their stored form to
// dst, the keys and values of one call in one allocation; on the first bad
// entry it fails and appends nothing. Callers do not hold the lock.
func (s *State) EncodeLoad(dst []KV, entries []backend.LoadEntry) ([]KV, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := len(dst)
	size := 0
	for i := range entries {
		sz, err := s.checkLoad(&entries[i])
		if err != nil {
			return dst[:n], fmt.Errorf("load entry %d: %w", i, err)
		}
		size += sz
	}
	arena := make([]byte, 0, size)
	for i := range entries {
		var kv KV
		kv, arena = s.encodeLoad(arena, &entries[i])
		dst = append(dst, kv)
	}
	return dst, nil
}

// checkLoad checks e and returns an upper bound of its encoded size.
func (s *State) checkLoad(e *backend.LoadEntry) (int, error) {
	if s.closed {
		return 0, backend.ErrClosed
	}
	d, ok := s.states[e.State]
	if !ok {
		return 0, fmt.Errorf("%w: %q in %s (register it at Open or with RegisterStates before loading)", backend.ErrUnknownState, e.State, s.info.Task)
	}
	if e.Kind != 0 && e.Kind != d.Kind {
		return 0, fmt.Errorf("%w: the entry says state %q of %s is a %s state, but it is %s", backend.ErrWrongKind, e.State, s.info.Task, e.Kind, d.Kind)
	}
	if e.KeyGroup < 0 || e.KeyGroup > 0x7fff {
		return 0, fmt.Errorf("%w: key group %d, state %q, task %s owns %s", backend.ErrKeyGroupOutOfRange, e.KeyGroup, e.State, s.info.Task, s.info.KeyGroups)
	}
	k := backend.Key{KeyGroup: e.KeyGroup, Key: e.Key, Namespace: e.Namespace}
	if _, err := s.access(e.State, d.Kind, k); err != nil {
		return 0, err
	}
	// Key: kg, three length prefixes and their bytes, the user key; value:
	// a header with expiry and the payload (or the elements, each with
	// a header and a length).
	size := 2 + 3*binary.MaxVarintLen64 + len(e.State) + len(e.Key) + len(e.Namespace) + len(e.UserKey) + 9 + len(e.Value) + 8 + 16
	switch d.Kind {
	case backend.KindValue:
		return size, s.checkSize(e.State, "value", e.Value)
	case backend.KindMap:
		if err := s.checkSize(e.State, "user key", e.UserKey); err != nil {
			return 0, err
		}
		return size, s.checkSize(e.State, "value", e.Value)
	case backend.KindList:
		if len(e.Values) == 0 {
			return 0, fmt.Errorf("%w: a load entry of list state %q of %s has no elements (leave an empty list out)",
				backend.ErrInvalidArgument, e.State, s.info.Task)
		}
		for _, el := range e.Values {
			if err := s.checkSize(e.State, "list element", el); err != nil {
				return 0, err
			}
			size += 9 + binary.MaxVarintLen64 + len(el)
		}
		return size, nil
	case backend.KindAggregate:
		if e.Number.Type != d.Number {
			return 0, fmt.Errorf("%w: a load entry of aggregate state %q of %s holds a %s, but the state's numbers are %s",
				backend.ErrInvalidArgument, e.State, s.info.Task, e.Number.Type, d.Number)
		}
		return size, nil
	case backend.KindTimers:
		return size, nil
	}
	return 0, fmt.Errorf("%w: state %q of %s has kind %s", backend.ErrInvalidArgument, e.State, s.info.Task, d.Kind)
}

// encodeLoad appends the stored key and value of e (checked) to arena and
// returns them, views into arena.
func (s *State) encodeLoad(arena []byte, e *backend.LoadEntry) (KV, []byte) {
	d := s.states[e.State]
	k := backend.Key{KeyGroup: e.KeyGroup, Key: e.Key, Namespace: e.Namespace}
	start := len(arena)
	if d.Kind == backend.KindTimers {
		arena = timerKey(arena, e.State, backend.Timer{KeyGroup: e.KeyGroup, Key: e.Key, Namespace: e.Namespace, Timestamp: e.Timestamp})
	} else {
		arena = entryPrefix(arena, e.State, k)
		if d.Kind == backend.KindMap {
			arena = append(arena, e.UserKey...)
		}
	}
	key := arena[start:len(arena):len(arena)]
	start = len(arena)
	expiry := s.expiryOf(d)
	switch d.Kind {
	case backend.KindValue, backend.KindMap:
		arena = append(appendHeader(arena, expiry), e.Value...)
	case backend.KindList:
		for _, el := range e.Values {
			arena = appendListElement(arena, expiry, el)
		}
	case backend.KindAggregate:
		arena = append(appendHeader(arena, expiry), encodeNumber(e.Number)...)
	}
	return KV{key, arena[start:len(arena):len(arena)]}, arena
}

// WriteLoaded writes encoded entries as one group (one batch over a
// Batcher engine), with the writer lock held. A map entry replaces only its
// user key; a list or any other entry replaces what is stored at its key.
func (s *State) WriteLoaded(kvs []KV) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return backend.ErrClosed
	}
	var w writes = s.eng
	var b Batch
	if bt, ok := s.eng.(Batcher); ok {
		b = bt.NewBatch()
		w = b
	}
	for _, kv := range kvs {
		if err := w.Set(kv.K, kv.V); err != nil {
			if b != nil {
				_ = b.Close()
			}
			return err
		}
	}
	if b == nil {
		return nil
	}
	if b.Empty() {
		return b.Close()
	}
	return b.Commit()
}

// GroupLoad is a backend.LoadSession that writes each Add as one group:
// the bulk path of an engine that has no faster one (heap, file). It holds
// lock until the session ends.
func (s *State) GroupLoad(lock *sync.Mutex) backend.LoadSession {
	lock.Lock()
	return &groupLoad{s: s, lock: lock}
}

type groupLoad struct {
	s    *State
	lock *sync.Mutex
	kvs  []KV
	done bool
}

func (g *groupLoad) Add(entries []backend.LoadEntry) error {
	if g.done {
		return fmt.Errorf("%w: load of %s used after it ended", backend.ErrInvalidArgument, g.s.info.Task)
	}
	var err error
	g.kvs, err = g.s.EncodeLoad(g.kvs[:0], entries)
	if err != nil {
		return err
	}
	return g.s.WriteLoaded(g.kvs)
}

func (g *groupLoad) Commit() error {
	g.Close()
	return nil
}

func (g *groupLoad) Close() {
	if !g.done {
		g.done = true
		g.lock.Unlock()
	}
}
