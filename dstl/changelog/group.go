package changelog

import (
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/dstl"
)

func timeOf(ns int64) time.Time { return time.Unix(0, ns) }

// Group implements backend.Grouper: the inner backend commits the writes
// together, and only then are they logged, in the order fn made them. An
// inner backend without Grouper gets each write applied as it is made.
func (b *Backend) Group(fn func(w backend.GroupWriter)) error {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	now := b.opts.Clock()
	b.pin.Store(&now)
	defer b.pin.Store(nil)
	gw := &groupWriter{now: now.UnixNano(), buf: b.gbuf[:0]}
	var err error
	if g, ok := b.inner.(backend.Grouper); ok {
		err = g.Group(func(w backend.GroupWriter) {
			gw.w = w
			fn(gw)
		})
	} else {
		gw.w = b.inner
		fn(gw)
	}
	if err == nil {
		for _, r := range gw.recs {
			if r.big != nil {
				b.appendChange(r.big)
			} else {
				b.appendEncoded(r.kg, gw.buf[r.off:r.end])
			}
		}
	}
	// Keep the buffer for the next group, unless one huge group grew it.
	if cap(gw.buf) <= maxGroupBuffer {
		b.gbuf = gw.buf[:0]
	} else {
		b.gbuf = nil
	}
	return err
}

// maxGroupBuffer bounds the encoding buffer a Backend keeps between groups.
const maxGroupBuffer = 1 << 20

// groupWriter records each write the inner writer accepted. The changes
// are logged only after the group commits, but fn's slices may be reused
// once fn returns, so each change is encoded at once into buf.
type groupWriter struct {
	w    backend.GroupWriter
	now  int64
	buf  []byte
	recs []groupRec
}

// groupRec is one encoded change in groupWriter.buf, or, for a list
// append too big for one record, the change itself (appendChange splits
// it).
type groupRec struct {
	kg       int
	off, end int
	big      *Change
}

func cp(p []byte) []byte { return append([]byte{}, p...) }

func cpKey(k backend.Key) backend.Key {
	return backend.Key{KeyGroup: k.KeyGroup, Key: cp(k.Key), Namespace: cp(k.Namespace)}
}

// add encodes c if the inner writer accepted it (err nil).
func (g *groupWriter) add(err error, c *Change) error {
	if err != nil {
		return err
	}
	c.Time = g.now
	off := len(g.buf)
	g.buf = c.Encode(g.buf)
	if len(g.buf)-off > dstl.MaxChangeSize && c.Op == OpListAppend && len(c.Values) > 1 {
		g.buf = g.buf[:off]
		big := *c
		big.Key = cpKey(c.Key)
		big.Values = make([][]byte, len(c.Values))
		for i, v := range c.Values {
			big.Values[i] = cp(v)
		}
		g.recs = append(g.recs, groupRec{big: &big})
		return nil
	}
	g.recs = append(g.recs, groupRec{kg: c.KeyGroup(), off: off, end: len(g.buf)})
	return nil
}

func (g *groupWriter) Put(state string, k backend.Key, value []byte) error {
	vs := [1][]byte{value}
	return g.add(g.w.Put(state, k, value), &Change{Op: OpPut, State: state, Key: k, Values: vs[:]})
}

func (g *groupWriter) Delete(state string, k backend.Key) error {
	return g.add(g.w.Delete(state, k), &Change{Op: OpDelete, State: state, Key: k})
}

func (g *groupWriter) ListAppend(state string, k backend.Key, values ...[]byte) error {
	return g.add(g.w.ListAppend(state, k, values...), &Change{Op: OpListAppend, State: state, Key: k, Values: values})
}

func (g *groupWriter) MapPut(state string, k backend.Key, userKey, value []byte) error {
	return g.add(g.w.MapPut(state, k, userKey, value), &Change{Op: OpMapPut, State: state, Key: k, UserKey: userKey, Value: value})
}

func (g *groupWriter) MapRemove(state string, k backend.Key, userKey []byte) error {
	return g.add(g.w.MapRemove(state, k, userKey), &Change{Op: OpMapRemove, State: state, Key: k, UserKey: userKey})
}

func (g *groupWriter) RegisterTimer(state string, t backend.Timer) error {
	return g.add(g.w.RegisterTimer(state, t), &Change{Op: OpTimerAdd, State: state, Timer: t})
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
