package changelog

import (
	"strings"
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
	gw := &b.gw
	*gw = groupWriter{now: now.UnixNano(), buf: b.gw.buf[:0], recs: b.gw.recs[:0]}
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
		b.logGroup(gw)
	}
	gw.w = nil
	// Keep the buffers for the next group, unless one huge group grew
	// them.
	if cap(gw.buf) > maxGroupBuffer {
		gw.buf = nil
	}
	if cap(gw.recs) > maxGroupRecs {
		gw.recs = nil
	}
	clear(gw.recs) // the big changes
	return err
}

// logGroup logs the changes of a committed group in order: the runs of
// encoded changes each with one Writer call (one lock for the run, not
// one per change), a big change on its own (appendChange splits it).
// Call with wmu held.
func (b *Backend) logGroup(gw *groupWriter) {
	ents := b.gents[:0]
	for _, r := range gw.recs {
		if r.big != nil {
			b.appendEntries(ents)
			ents = ents[:0]
			b.appendChange(r.big)
			continue
		}
		ents = append(ents, dstl.Entry{KeyGroup: r.kg, Change: gw.buf[r.off:r.end]})
	}
	b.appendEntries(ents)
	// The entries point into gw.buf, which may be dropped.
	clear(ents)
	if cap(ents) <= maxGroupRecs {
		b.gents = ents[:0]
	} else {
		b.gents = nil
	}
}

// maxGroupBuffer bounds the encoding buffer a Backend keeps between groups.
const maxGroupBuffer = 1 << 20

// maxGroupRecs bounds the change count of the per-change slices a Backend
// keeps between groups.
const maxGroupRecs = 1 << 14

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

// add encodes c if the inner writer accepted it (err nil). c stays the
// caller's: only the copy of a big change is kept.
func (g *groupWriter) add(err error, c *Change) error {
	if err != nil {
		return err
	}
	c.Time = g.now
	off := len(g.buf)
	g.buf = c.Encode(g.buf)
	if len(g.buf)-off > dstl.MaxChangeSize && c.Op == OpListAppend && len(c.Values) > 1 {
		g.buf = g.buf[:off]
		g.recs = append(g.recs, groupRec{big: copyListAppend(c)})
		return nil
	}
	g.recs = append(g.recs, groupRec{kg: c.KeyGroup(), off: off, end: len(g.buf)})
	return nil
}

// copyListAppend copies a list append field by field: a struct copy of
// *c would make every caller's Change (and its one-value array) escape
// to the heap, an allocation per logged write.
func copyListAppend(c *Change) *Change {
	vs := make([][]byte, len(c.Values))
	for i, v := range c.Values {
		vs[i] = cp(v)
	}
	return &Change{Op: c.Op, Time: c.Time, State: strings.Clone(c.State), Key: cpKey(c.Key), Values: vs}
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
