package changelog

import (
	"time"

	"github.com/statedhq/stated/backend"
)

func timeOf(ns int64) time.Time { return time.Unix(0, ns) }

// Group implements backend.Grouper: the inner backend commits the writes
// together, and only then are they logged, in the order fn made them. An
// inner backend without Grouper gets each write applied as it is made.
func (b *Backend) Group(fn func(w backend.GroupWriter)) error {
	return b.mutate(func() ([]*Change, error) {
		gw := &groupWriter{}
		g, ok := b.inner.(backend.Grouper)
		if !ok {
			gw.w = b.inner
			fn(gw)
			return gw.cs, nil
		}
		err := g.Group(func(w backend.GroupWriter) {
			gw.w = w
			fn(gw)
		})
		return gw.cs, err
	})
}

// groupWriter records each write the inner writer accepted. The changes
// are encoded only after the group commits, but fn's slices may be reused
// once fn returns, so each change keeps copies.
type groupWriter struct {
	w  backend.GroupWriter
	cs []*Change
}

func cp(p []byte) []byte { return append([]byte{}, p...) }

func cpKey(k backend.Key) backend.Key {
	return backend.Key{KeyGroup: k.KeyGroup, Key: cp(k.Key), Namespace: cp(k.Namespace)}
}

func (g *groupWriter) add(err error, c *Change) error {
	if err == nil {
		g.cs = append(g.cs, c)
	}
	return err
}

func (g *groupWriter) Put(state string, k backend.Key, value []byte) error {
	return g.add(g.w.Put(state, k, value), &Change{Op: OpPut, State: state, Key: cpKey(k), Values: [][]byte{cp(value)}})
}

func (g *groupWriter) Delete(state string, k backend.Key) error {
	return g.add(g.w.Delete(state, k), &Change{Op: OpDelete, State: state, Key: cpKey(k)})
}

func (g *groupWriter) ListAppend(state string, k backend.Key, values ...[]byte) error {
	vs := make([][]byte, len(values))
	for i, v := range values {
		vs[i] = cp(v)
	}
	return g.add(g.w.ListAppend(state, k, values...), &Change{Op: OpListAppend, State: state, Key: cpKey(k), Values: vs})
}

func (g *groupWriter) MapPut(state string, k backend.Key, userKey, value []byte) error {
	return g.add(g.w.MapPut(state, k, userKey, value), &Change{Op: OpMapPut, State: state, Key: cpKey(k), UserKey: cp(userKey), Value: cp(value)})
}

func (g *groupWriter) MapRemove(state string, k backend.Key, userKey []byte) error {
	return g.add(g.w.MapRemove(state, k, userKey), &Change{Op: OpMapRemove, State: state, Key: cpKey(k), UserKey: cp(userKey)})
}

func (g *groupWriter) RegisterTimer(state string, t backend.Timer) error {
	c := &Change{Op: OpTimerAdd, State: state, Timer: backend.Timer{KeyGroup: t.KeyGroup, Key: cp(t.Key), Namespace: cp(t.Namespace), Timestamp: t.Timestamp}}
	return g.add(g.w.RegisterTimer(state, t), c)
}

// ReadGroup implements backend.ReadGrouper. A read that refreshes a TTL
// writes, so it is refused with ErrNotInGroup (the inner backends refuse
// it too) and made with the logged Backend method instead.
func (b *Backend) ReadGroup(fn func(r backend.GroupReader)) {
	if rg, ok := b.inner.(backend.ReadGrouper); ok {
		rg.ReadGroup(func(r backend.GroupReader) { fn(readGroup{b: b, r: r}) })
		return
	}
	fn(readGroup{b: b, r: b.inner})
}

type readGroup struct {
	b *Backend
	r backend.GroupReader
}

func (g readGroup) Get(state string, k backend.Key) ([]byte, bool, error) {
	if g.b.refreshes(state) {
		return nil, false, backend.ErrNotInGroup
	}
	return g.r.Get(state, k)
}

func (g readGroup) MapGet(state string, k backend.Key, userKey []byte) ([]byte, bool, error) {
	if g.b.refreshes(state) {
		return nil, false, backend.ErrNotInGroup
	}
	return g.r.MapGet(state, k, userKey)
}

func (g readGroup) MapContains(state string, k backend.Key, userKey []byte) (bool, error) {
	return g.r.MapContains(state, k, userKey)
}
