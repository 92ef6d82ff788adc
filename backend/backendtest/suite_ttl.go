package backendtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
)

const ttl = time.Second

// ttlStep is one step of a TTL script: at a time (ms after the start) run
// ops, then check that the entry is present (want > 0) or absent (want < 0)
// by reading it.
type ttlStep struct {
	at   int64
	ops  []op
	want int
}

// ttlKindOps are the write and read of one kind for TTL scripts.
type ttlKindOps struct {
	kind  backend.StateKind
	write func(state string, k backend.Key, v string) op
	read  func(state string, k backend.Key) op
}

var ttlKinds = []ttlKindOps{
	{backend.KindValue,
		func(s string, k backend.Key, v string) op { return op{kind: opPut, state: s, k: k, v: []byte(v)} },
		func(s string, k backend.Key) op { return op{kind: opGet, state: s, k: k} }},
	{backend.KindList,
		func(s string, k backend.Key, v string) op { return op{kind: opListAppend, state: s, k: k, vals: bs(v)} },
		func(s string, k backend.Key) op { return op{kind: opListGet, state: s, k: k} }},
	{backend.KindMap,
		func(s string, k backend.Key, v string) op {
			return op{kind: opMapPut, state: s, k: k, uk: []byte("u" + v), v: []byte(v)}
		},
		func(s string, k backend.Key) op { return op{kind: opMapIterate, state: s, k: k} }},
	{backend.KindAggregate,
		func(s string, k backend.Key, v string) op {
			return op{kind: opAggAdd, state: s, k: k, n: backend.Int64(int64(len(v)))}
		},
		func(s string, k backend.Key) op { return op{kind: opAggGet, state: s, k: k} }},
}

func ttlState(kind backend.StateKind, update backend.TTLUpdate) backend.StateDescriptor {
	d := backend.StateDescriptor{Name: fmt.Sprintf("%s.%s", kind, update), Kind: kind, TTL: ttl, TTLUpdate: update}
	if kind == backend.KindAggregate {
		d.Aggregate, d.Number = backend.AggSum, backend.NumInt64
	}
	return d
}

// present reads o from a copy of m (so the check itself refreshes nothing)
// and reports whether it returned an entry.
func present(m *Model, o op, now int64) bool {
	c := m.Clone()
	switch o.kind {
	case opGet:
		_, ok := c.Get(o.state, o.k, now)
		return ok
	case opListGet:
		return len(c.ListGet(o.state, o.k, now)) > 0
	case opMapIterate:
		es, _ := c.MapIterate(o.state, o.k, o.after, o.limit, now)
		return len(es) > 0
	case opMapGet, opMapContains:
		_, ok := c.MapGet(o.state, o.k, o.uk, now)
		return ok
	case opAggGet:
		_, ok := c.AggregateGet(o.state, o.k, now)
		return ok
	}
	return false
}

// runTTL runs a script against b and m: each read is compared with the
// model and its presence with the script's expectation, which is written by
// hand so that the model's TTL rules are checked too.
func runTTL(t *testing.T, e *env, b *guarded, m *Model, name string, steps []ttlStep, read op) {
	t.Helper()
	start := e.clock.Ms()
	for _, s := range steps {
		if d := start + s.at - e.clock.Ms(); d > 0 {
			e.clock.Advance(time.Duration(d) * time.Millisecond)
		}
		now := e.clock.Ms()
		for _, o := range s.ops {
			apply(t, b, m, o, now)
		}
		if s.want != 0 {
			if got := present(m, read, now); got != (s.want > 0) {
				t.Fatalf("%s at +%dms: model says present=%v, the script %v", name, s.at, got, s.want > 0)
			}
			apply(prefixed{t, fmt.Sprintf("%s at +%dms", name, s.at)}, b, m, read, now)
		}
	}
}

func testTTL(t *testing.T, e *env) {
	var states []backend.StateDescriptor
	for _, kind := range ttlKinds {
		for _, u := range []backend.TTLUpdate{backend.TTLOnCreateAndWrite, backend.TTLOnReadAndWrite} {
			states = append(states, ttlState(kind.kind, u))
		}
	}
	b := e.mustOpen(t, e.opts(testRange, states...))
	m := NewModel(states...)
	for i, kind := range ttlKinds {
		k := key(4+i, "k", "")
		// On create and write: reads never extend the life of an entry;
		// writes do.
		d := ttlState(kind.kind, backend.TTLOnCreateAndWrite)
		w := func(v string) []op { return []op{kind.write(d.Name, k, v)} }
		runTTL(t, e, b, m, d.Name, []ttlStep{
			{at: 0, ops: w("a"), want: 1},
			{at: 500, want: 1},
			{at: 999, want: 1},
			{at: 1000, want: -1},
			{at: 1000, ops: w("bb"), want: 1},
			{at: 1999, want: 1},
			{at: 2000, want: -1},
			{at: 2500, ops: w("c")},
			{at: 3000, ops: w("dd"), want: 1},
			{at: 3999, want: 1},
			{at: 4000, want: -1},
		}, kind.read(d.Name, k))
		// On read and write: every read that returns the entry extends it.
		d = ttlState(kind.kind, backend.TTLOnReadAndWrite)
		k = key(4+i, "k", "r")
		w = func(v string) []op { return []op{kind.write(d.Name, k, v)} }
		runTTL(t, e, b, m, d.Name, []ttlStep{
			{at: 0, ops: w("a")},
			{at: 999, want: 1},
			{at: 1998, want: 1},
			{at: 2997, want: 1},
			{at: 3997, want: -1},
			{at: 4000, ops: w("bb")},
			{at: 4999, want: 1},
			{at: 6000, want: -1},
		}, kind.read(d.Name, k))
	}

	// Lists expire element by element.
	lc, lr := ttlState(backend.KindList, backend.TTLOnCreateAndWrite).Name, ttlState(backend.KindList, backend.TTLOnReadAndWrite).Name
	k := key(9, "elements", "")
	runTTL(t, e, b, m, "list elements", []ttlStep{
		{at: 0, ops: []op{{kind: opListAppend, state: lc, k: k, vals: bs("a", "b")}}},
		{at: 600, ops: []op{{kind: opListAppend, state: lc, k: k, vals: bs("c")}}, want: 1},
		{at: 1000, want: 1}, // [c]
		{at: 1599, want: 1},
		{at: 1600, want: -1},
	}, op{kind: opListGet, state: lc, k: k})
	runTTL(t, e, b, m, "list elements, refreshed on read", []ttlStep{
		{at: 0, ops: []op{{kind: opListAppend, state: lr, k: k, vals: bs("a")}}},
		{at: 600, ops: []op{{kind: opListAppend, state: lr, k: k, vals: bs("b")}}},
		{at: 900, want: 1},  // [a b], both extended to +1900
		{at: 1899, want: 1}, // [a b] again, extended to +2899
		{at: 2000, ops: []op{{kind: opListAppend, state: lr, k: k, vals: bs("c")}}},
		{at: 2899, ops: []op{{kind: opListGet, state: lr, k: k}}}, // [a b c]
		{at: 3899, want: -1},
	}, op{kind: opListGet, state: lr, k: k})

	// Maps expire entry by entry; paging skips expired entries and more
	// counts only live ones; on-read refresh extends only what was read.
	mc, mr := ttlState(backend.KindMap, backend.TTLOnCreateAndWrite).Name, ttlState(backend.KindMap, backend.TTLOnReadAndWrite).Name
	k = key(10, "entries", "")
	put := func(state, uk string) op {
		return op{kind: opMapPut, state: state, k: k, uk: []byte(uk), v: []byte("v" + uk)}
	}
	page := func(state string, after string, limit int) op {
		o := op{kind: opMapIterate, state: state, k: k, limit: limit}
		if after != "" {
			o.after = []byte(after)
		}
		return o
	}
	runTTL(t, e, b, m, "map entries", []ttlStep{
		{at: 0, ops: []op{put(mc, "a"), put(mc, "b")}},
		{at: 500, ops: []op{put(mc, "c"), put(mc, "d")}},
		{at: 1000, ops: []op{page(mc, "", 1), page(mc, "c", 1), page(mc, "", 2),
			{kind: opMapContains, state: mc, k: k, uk: []byte("a")}, {kind: opMapGet, state: mc, k: k, uk: []byte("c")}}, want: 1},
		{at: 1500, want: -1},
	}, page(mc, "", 0))
	runTTL(t, e, b, m, "map entries, refreshed on read", []ttlStep{
		{at: 0, ops: []op{put(mr, "a"), put(mr, "b"), put(mr, "c")}},
		{at: 900, ops: []op{page(mr, "", 1), {kind: opMapGet, state: mr, k: k, uk: []byte("c")}}},
		{at: 1000, ops: []op{page(mr, "", 0)}}, // a and c
		{at: 1999, ops: []op{{kind: opMapContains, state: mr, k: k, uk: []byte("a")}}, want: 1},
		{at: 2999, want: -1},
	}, page(mr, "", 0))

	// An expired aggregate starts again from the next value.
	ac := ttlState(backend.KindAggregate, backend.TTLOnCreateAndWrite).Name
	k = key(11, "agg", "")
	add := func(v int64) []op { return []op{{kind: opAggAdd, state: ac, k: k, n: backend.Int64(v)}} }
	runTTL(t, e, b, m, "aggregate restart", []ttlStep{
		{at: 0, ops: add(5)},
		{at: 999, ops: add(2), want: 1}, // 7, until +1999
		{at: 1999, want: -1},
		{at: 2000, ops: add(3), want: 1}, // 3
	}, op{kind: opAggGet, state: ac, k: k})

	// Expiry times survive a snapshot and a restore.
	dc, dr := ttlState(backend.KindValue, backend.TTLOnCreateAndWrite).Name, ttlState(backend.KindValue, backend.TTLOnReadAndWrite).Name
	k = key(8, "restored", "")
	start := e.clock.Ms()
	apply(t, b, m, op{kind: opPut, state: dc, k: k, v: []byte("c")}, start)
	apply(t, b, m, op{kind: opPut, state: dr, k: k, v: []byte("r")}, start)
	e.clock.Advance(100 * time.Millisecond)
	atSnapshot := m.Clone()
	h := e.checkpoint(t, b)
	e.clock.Advance(400 * time.Millisecond) // restore at +500
	r := e.restore(t, testRange, states, h)
	snap := atSnapshot.Clone()
	rd := func(state string) op { return op{kind: opGet, state: state, k: k} }
	runTTL(t, e, r, snap, "restored, on read", []ttlStep{{at: 0, want: 1}}, rd(dr)) // extended to +1500
	runTTL(t, e, r, snap, "restored, on create", []ttlStep{{at: 0, want: 1}, {at: 499, want: 1}, {at: 500, want: -1}}, rd(dc))
	runTTL(t, e, r, snap, "restored, on read", []ttlStep{{at: 499, want: 1}, {at: 1499, want: -1}}, rd(dr))
	r = e.restore(t, testRange, states, h)
	snap = atSnapshot.Clone()
	runTTL(t, e, r, snap, "restored after expiry", []ttlStep{{at: 0, want: -1}}, rd(dr))
	runTTL(t, e, r, snap, "restored after expiry", []ttlStep{{at: 0, want: -1}}, rd(dc))
}
