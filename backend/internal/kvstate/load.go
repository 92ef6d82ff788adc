package kvstate

import (
	"fmt"
	"sync"

	"github.com/statedhq/stated/backend"
)

// KV is one stored entry, encoded: a key of the frozen key layout and its
// stored value.
type KV struct{ K, V []byte }

// EncodeLoad checks the entries of a bulk load as the matching operations
// would (state, kind, key group, sizes) and appends their stored form to
// dst; on the first bad entry it fails and appends nothing. Callers do not
// hold the lock.
func (s *State) EncodeLoad(dst []KV, entries []backend.LoadEntry) ([]KV, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := len(dst)
	for i := range entries {
		kv, err := s.encodeLoad(&entries[i])
		if err != nil {
			return dst[:n], fmt.Errorf("load entry %d: %w", i, err)
		}
		dst = append(dst, kv)
	}
	return dst, nil
}

func (s *State) encodeLoad(e *backend.LoadEntry) (KV, error) {
	if s.closed {
		return KV{}, backend.ErrClosed
	}
	d, ok := s.states[e.State]
	if !ok {
		return KV{}, fmt.Errorf("%w: %q in %s (register it at Open or with RegisterStates before loading)", backend.ErrUnknownState, e.State, s.info.Task)
	}
	if e.Kind != 0 && e.Kind != d.Kind {
		return KV{}, fmt.Errorf("%w: the entry says state %q of %s is a %s state, but it is %s", backend.ErrWrongKind, e.State, s.info.Task, e.Kind, d.Kind)
	}
	if e.KeyGroup < 0 || e.KeyGroup > 0x7fff {
		return KV{}, fmt.Errorf("%w: key group %d, state %q, task %s owns %s", backend.ErrKeyGroupOutOfRange, e.KeyGroup, e.State, s.info.Task, s.info.KeyGroups)
	}
	k := backend.Key{KeyGroup: e.KeyGroup, Key: e.Key, Namespace: e.Namespace}
	if _, err := s.access(e.State, d.Kind, k); err != nil {
		return KV{}, err
	}
	expiry := s.expiryOf(d)
	switch d.Kind {
	case backend.KindValue:
		if err := s.checkSize(e.State, "value", e.Value); err != nil {
			return KV{}, err
		}
		return KV{entryPrefix(nil, e.State, k), encodeValue(expiry, e.Value)}, nil
	case backend.KindMap:
		if err := s.checkSize(e.State, "user key", e.UserKey); err != nil {
			return KV{}, err
		}
		if err := s.checkSize(e.State, "value", e.Value); err != nil {
			return KV{}, err
		}
		return KV{mapKey(e.State, k, e.UserKey), encodeValue(expiry, e.Value)}, nil
	case backend.KindList:
		if len(e.Values) == 0 {
			return KV{}, fmt.Errorf("%w: a load entry of list state %q of %s has no elements (leave an empty list out)",
				backend.ErrInvalidArgument, e.State, s.info.Task)
		}
		var v []byte
		for _, el := range e.Values {
			if err := s.checkSize(e.State, "list element", el); err != nil {
				return KV{}, err
			}
			v = appendListElement(v, expiry, el)
		}
		return KV{entryPrefix(nil, e.State, k), v}, nil
	case backend.KindAggregate:
		if e.Number.Type != d.Number {
			return KV{}, fmt.Errorf("%w: a load entry of aggregate state %q of %s holds a %s, but the state's numbers are %s",
				backend.ErrInvalidArgument, e.State, s.info.Task, e.Number.Type, d.Number)
		}
		return KV{entryPrefix(nil, e.State, k), encodeValue(expiry, encodeNumber(e.Number))}, nil
	case backend.KindTimers:
		return KV{timerKey(nil, e.State, backend.Timer{KeyGroup: e.KeyGroup, Key: e.Key, Namespace: e.Namespace, Timestamp: e.Timestamp}),
			[]byte{}}, nil
	}
	return KV{}, fmt.Errorf("%w: state %q of %s has kind %s", backend.ErrInvalidArgument, e.State, s.info.Task, d.Kind)
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
