package backendtest

import (
	"bytes"
	"fmt"
	"math"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
)

var (
	sValue  = backend.StateDescriptor{Name: "value", Kind: backend.KindValue}
	sList   = backend.StateDescriptor{Name: "list", Kind: backend.KindList}
	sMap    = backend.StateDescriptor{Name: "map", Kind: backend.KindMap}
	sSum    = backend.StateDescriptor{Name: "sum", Kind: backend.KindAggregate, Aggregate: backend.AggSum, Number: backend.NumInt64}
	sTimers = backend.StateDescriptor{Name: "timers", Kind: backend.KindTimers}
	// basicStates has one state of every kind.
	basicStates = []backend.StateDescriptor{sValue, sList, sMap, sSum, sTimers}
)

func key(kg int, k, ns string) backend.Key {
	return backend.Key{KeyGroup: kg, Key: []byte(k), Namespace: []byte(ns)}
}

func testOpenOptions(t *testing.T, e *env) {
	b := e.mustOpen(t, e.opts(testRange, basicStates...))
	want := backend.Info{Kind: e.h.Kind, Task: e.task, KeyGroups: testRange, MaxParallelism: testMaxP}
	if got := b.Info(); got != want {
		t.Fatalf("Info() = %+v, want %+v", got, want)
	}
	o := e.opts(testRange)
	o.MaxParallelism = 0
	if got := e.mustOpen(t, o).Info().MaxParallelism; got != backend.DefaultMaxParallelism {
		t.Fatalf("MaxParallelism 0 opened with %d key groups, want the default %d", got, backend.DefaultMaxParallelism)
	}
	bad := map[string]func(o *backend.Options){
		"bad job name":     func(o *backend.Options) { o.Task.Job = "../x" },
		"negative subtask": func(o *backend.Options) { o.Task.Subtask = -1 },
		"range past max":   func(o *backend.Options) { o.KeyGroups = backend.KeyGroupRange{Start: 4, End: testMaxP} },
		"empty range":      func(o *backend.Options) { o.KeyGroups = backend.EmptyKeyGroupRange },
		"max parallelism":  func(o *backend.Options) { o.MaxParallelism = backend.MaxMaxParallelism + 1 },
		"duplicate state":  func(o *backend.Options) { o.States = []backend.StateDescriptor{sValue, sValue} },
		"timers with ttl": func(o *backend.Options) {
			o.States = []backend.StateDescriptor{{Name: "t", Kind: backend.KindTimers, TTL: time.Second}}
		},
		"negative value size": func(o *backend.Options) { o.MaxValueSize = -1 },
		"aggregate without fn": func(o *backend.Options) {
			o.States = []backend.StateDescriptor{{Name: "a", Kind: backend.KindAggregate}}
		},
		"unknown kind":       func(o *backend.Options) { o.States = []backend.StateDescriptor{{Name: "x", Kind: 99}} },
		"nil restore handle": func(o *backend.Options) { o.Restore = []*backend.Handle{nil} },
	}
	for name, mod := range bad {
		o := e.opts(testRange, basicStates...)
		mod(&o)
		_, err := e.open(t, o)
		wantErr(t, err, backend.ErrInvalidArgument, "open with %s", name)
	}
}

func testRegisterState(t *testing.T, e *env) {
	b := e.mustOpen(t, e.opts(testRange, sValue, sList))
	if got := b.States(); !sameStates(got, []backend.StateDescriptor{sList, sValue}) {
		t.Fatalf("States() = %v, want sorted [list value]", got)
	}
	must(t, b.RegisterState(sValue), "register the same descriptor again")
	ttl := backend.StateDescriptor{Name: "ttl", Kind: backend.KindValue, TTL: time.Second}
	agg := backend.StateDescriptor{Name: "agg", Kind: backend.KindAggregate, Aggregate: backend.AggMin, Number: backend.NumFloat64}
	must(t, b.RegisterState(ttl), "register %v", ttl)
	must(t, b.RegisterState(agg), "register %v", agg)
	must(t, b.RegisterState(ttl), "register %v again", ttl)
	conflicts := []backend.StateDescriptor{
		{Name: "value", Kind: backend.KindList},
		{Name: "value", Kind: backend.KindValue, TTL: time.Second},
		{Name: "ttl", Kind: backend.KindValue, TTL: 2 * time.Second},
		{Name: "ttl", Kind: backend.KindValue, TTL: time.Second, TTLUpdate: backend.TTLOnReadAndWrite},
		{Name: "agg", Kind: backend.KindAggregate, Aggregate: backend.AggMax, Number: backend.NumFloat64},
		{Name: "agg", Kind: backend.KindAggregate, Aggregate: backend.AggMin, Number: backend.NumInt64},
	}
	for _, d := range conflicts {
		wantErr(t, b.RegisterState(d), backend.ErrIncompatible, "register conflicting %+v", d)
	}
	invalid := []backend.StateDescriptor{
		{Name: "", Kind: backend.KindValue},
		{Name: string(bytes.Repeat([]byte("n"), backend.MaxStateNameLen+1)), Kind: backend.KindValue},
		{Name: "k", Kind: 0},
		{Name: "t", Kind: backend.KindTimers, TTL: time.Second},
		{Name: "n", Kind: backend.KindValue, TTL: -time.Second},
		{Name: "a", Kind: backend.KindAggregate, Aggregate: backend.AggSum},
		{Name: "a", Kind: backend.KindValue, Aggregate: backend.AggSum, Number: backend.NumInt64},
	}
	for _, d := range invalid {
		wantErr(t, b.RegisterState(d), backend.ErrInvalidArgument, "register invalid %+v", d)
	}
	want := []backend.StateDescriptor{agg, sList, ttl, sValue}
	if got := b.States(); !sameStates(got, want) {
		t.Fatalf("States() = %v, want %v", got, want)
	}
	// The original registrations still work after the refused ones.
	k := key(5, "k", "")
	must(t, b.Put("value", k, []byte("x")), "put")
	must(t, b.AggregateAdd("agg", k, backend.Float64(2.5)), "aggregate add")
	if n, ok, err := b.AggregateGet("agg", k); err != nil || !ok || n.Float != 2.5 {
		t.Fatalf("aggregate get = %v %v %v", n, ok, err)
	}
}

func testValue(t *testing.T, e *env) {
	b := e.mustOpen(t, e.opts(testRange, basicStates...))
	k := key(5, "k", "ns")
	expectValue(t, b, "value", k, "", false)
	must(t, b.Put("value", k, []byte("one")), "put")
	expectValue(t, b, "value", k, "one", true)
	must(t, b.Put("value", k, []byte("two")), "overwrite")
	expectValue(t, b, "value", k, "two", true)
	must(t, b.Delete("value", k), "delete")
	expectValue(t, b, "value", k, "", false)
	must(t, b.Delete("value", k), "delete absent")
	// Empty and nil values are present values.
	must(t, b.Put("value", k, nil), "put nil")
	expectValue(t, b, "value", k, "", true)
	must(t, b.Put("value", key(6, "", ""), []byte{}), "put empty under empty key")
	expectValue(t, b, "value", key(6, "", ""), "", true)
	// Binary values survive.
	bin := []byte{0, 0xff, 1, 0, 0x80}
	must(t, b.Put("value", k, bin), "put binary")
	expectValue(t, b, "value", k, string(bin), true)
	// Slices passed in may be reused by the caller; returned ones are the
	// caller's.
	in := []byte("mine")
	kb := []byte("kk")
	must(t, b.Put("value", backend.Key{KeyGroup: 5, Key: kb}, in), "put")
	copy(in, "XXXX")
	copy(kb, "ZZ")
	expectValue(t, b, "value", key(5, "kk", ""), "mine", true)
	out, _, _ := b.Get("value", key(5, "kk", ""))
	copy(out, "YYYY")
	expectValue(t, b, "value", key(5, "kk", ""), "mine", true)
	expectValue(t, b, "value", key(5, "ZZ", ""), "", false)
}

func expectValue(t *testing.T, b *guarded, state string, k backend.Key, want string, wantOK bool) {
	t.Helper()
	v, ok, err := b.Get(state, k)
	if err != nil || ok != wantOK || (ok && string(v) != want) {
		t.Fatalf("Get(%q, kg %d key %q ns %q) = %q %v %v, want %q %v", state, k.KeyGroup, k.Key, k.Namespace, v, ok, err, want, wantOK)
	}
}

func expectList(t *testing.T, b *guarded, state string, k backend.Key, want ...string) {
	t.Helper()
	l, err := b.ListGet(state, k)
	if err != nil {
		t.Fatalf("ListGet(%q, %q): %v", state, k.Key, err)
	}
	if got := normList(l); !reflect.DeepEqual(got, normList(bs(want...))) {
		t.Fatalf("ListGet(%q, kg %d key %q ns %q) = %q, want %q", state, k.KeyGroup, k.Key, k.Namespace, got, want)
	}
}

func testList(t *testing.T, e *env) {
	b := e.mustOpen(t, e.opts(testRange, basicStates...))
	k := key(7, "k", "")
	expectList(t, b, "list", k)
	must(t, b.ListAppend("list", k), "append nothing")
	expectList(t, b, "list", k)
	must(t, b.ListAppend("list", k, []byte("a"), []byte("b")), "append")
	must(t, b.ListAppend("list", k, []byte(""), nil, []byte("c")), "append")
	expectList(t, b, "list", k, "a", "b", "", "", "c")
	in := []byte("d")
	must(t, b.ListAppend("list", k, in), "append")
	in[0] = 'X'
	l, _ := b.ListGet("list", k)
	l[0][0] = 'Y'
	expectList(t, b, "list", k, "a", "b", "", "", "c", "d")
	expectList(t, b, "list", key(7, "k", "x"))
	expectList(t, b, "list", key(8, "k", ""))
	must(t, b.Delete("list", k), "delete")
	expectList(t, b, "list", k)
	must(t, b.ListAppend("list", k, []byte("again")), "append after delete")
	expectList(t, b, "list", k, "again")
	// A long list keeps its order.
	var want []string
	for i := 0; i < 300; i++ {
		want = append(want, fmt.Sprint(i))
		must(t, b.ListAppend("list", key(9, "long", ""), []byte(fmt.Sprint(i))), "append %d", i)
	}
	expectList(t, b, "list", key(9, "long", ""), want...)
}

func expectMap(t *testing.T, b *guarded, state string, k backend.Key, kv ...string) {
	t.Helper()
	es, more, err := b.MapIterate(state, k, nil, 0)
	if err != nil {
		t.Fatalf("MapIterate(%q, %q): %v", state, k.Key, err)
	}
	var want []backend.MapEntry
	for i := 0; i < len(kv); i += 2 {
		want = append(want, backend.MapEntry{UserKey: []byte(kv[i]), Value: []byte(kv[i+1])})
	}
	if got, w := fmtEntries(es, more), fmtEntries(want, false); got != w {
		t.Fatalf("MapIterate(%q, kg %d key %q ns %q) = %s, want %s", state, k.KeyGroup, k.Key, k.Namespace, got, w)
	}
}

func testMap(t *testing.T, e *env) {
	b := e.mustOpen(t, e.opts(testRange, basicStates...))
	k := key(4, "k", "n")
	expectMap(t, b, "map", k)
	if v, ok, err := b.MapGet("map", k, []byte("a")); err != nil || ok {
		t.Fatalf("MapGet absent = %q %v %v", v, ok, err)
	}
	if ok, err := b.MapContains("map", k, []byte("a")); err != nil || ok {
		t.Fatalf("MapContains absent = %v %v", ok, err)
	}
	must(t, b.MapRemove("map", k, []byte("a")), "remove absent")
	// Bytewise order of user keys, including the empty key, 0x00 and 0xff
	// bytes and keys that are prefixes of others.
	uks := []string{"b", "a\x00", "", "\xff", "a", "ab", "\x00", "a\xff", "\xff\xff", "B"}
	for _, uk := range uks {
		must(t, b.MapPut("map", k, []byte(uk), []byte("v"+uk)), "map put %q", uk)
	}
	sorted := append([]string(nil), uks...)
	sort.Strings(sorted)
	var kv []string
	for _, uk := range sorted {
		kv = append(kv, uk, "v"+uk)
	}
	expectMap(t, b, "map", k, kv...)
	for _, uk := range uks {
		v, ok, err := b.MapGet("map", k, []byte(uk))
		if err != nil || !ok || string(v) != "v"+uk {
			t.Fatalf("MapGet(%q) = %q %v %v", uk, v, ok, err)
		}
		if ok, err := b.MapContains("map", k, []byte(uk)); err != nil || !ok {
			t.Fatalf("MapContains(%q) = %v %v", uk, ok, err)
		}
	}
	must(t, b.MapPut("map", k, []byte("a"), []byte("new")), "overwrite")
	must(t, b.MapRemove("map", k, []byte("ab")), "remove")
	if ok, _ := b.MapContains("map", k, []byte("ab")); ok {
		t.Fatal("removed user key still contained")
	}
	if v, _, _ := b.MapGet("map", k, []byte("a")); string(v) != "new" {
		t.Fatalf("overwritten value = %q", v)
	}
	// An empty value is present.
	must(t, b.MapPut("map", k, []byte("empty"), nil), "put empty value")
	if ok, _ := b.MapContains("map", k, []byte("empty")); !ok {
		t.Fatal("user key with empty value not contained")
	}
	// Maps of other keys, namespaces and key groups are separate, also when
	// one key is a prefix of another.
	others := []backend.Key{key(4, "k", ""), key(4, "k\x00", "n"), key(4, "kn", ""), key(4, "", "kn"), key(5, "k", "n")}
	for i, o := range others {
		must(t, b.MapPut("map", o, []byte("x"), []byte(fmt.Sprint(i))), "put other map")
	}
	for i, o := range others {
		expectMap(t, b, "map", o, "x", fmt.Sprint(i))
	}
	// Delete clears every user key of one map only.
	must(t, b.Delete("map", k), "delete map")
	expectMap(t, b, "map", k)
	for i, o := range others {
		expectMap(t, b, "map", o, "x", fmt.Sprint(i))
	}
	must(t, b.MapPut("map", k, []byte("z"), []byte("1")), "put after delete")
	expectMap(t, b, "map", k, "z", "1")
	// Returned slices are the caller's.
	es, _, _ := b.MapIterate("map", k, nil, 0)
	es[0].UserKey[0], es[0].Value[0] = 'Q', 'Q'
	expectMap(t, b, "map", k, "z", "1")
}

func testMapPaging(t *testing.T, e *env) {
	b := e.mustOpen(t, e.opts(testRange, basicStates...))
	k := key(10, "paged", "")
	m := NewModel(basicStates...)
	uks := []string{"", "\x00", "a", "a\x00", "aa", "ab", "b", "ba", "c\xff", "\xff"}
	for i, uk := range uks {
		must(t, b.MapPut("map", k, []byte(uk), []byte(fmt.Sprint(i))), "put")
		m.MapPut("map", k, []byte(uk), []byte(fmt.Sprint(i)), 0)
	}
	full, _ := m.MapIterate("map", k, nil, 0, 0)
	for limit := 1; limit <= len(uks)+1; limit++ {
		var all []backend.MapEntry
		var after []byte
		for page := 0; ; page++ {
			if page > len(uks) {
				t.Fatalf("limit %d: paging does not end", limit)
			}
			es, more, err := b.MapIterate("map", k, after, limit)
			if err != nil {
				t.Fatalf("limit %d after %q: %v", limit, after, err)
			}
			wes, wmore := m.MapIterate("map", k, after, limit, 0)
			if got, want := fmtEntries(es, more), fmtEntries(wes, wmore); got != want {
				t.Fatalf("MapIterate(after %q, limit %d) = %s, want %s", after, limit, got, want)
			}
			all = append(all, es...)
			if !more {
				break
			}
			after = es[len(es)-1].UserKey
		}
		if got, want := fmtEntries(all, false), fmtEntries(full, false); got != want {
			t.Fatalf("limit %d: pages add up to %s, want %s", limit, got, want)
		}
	}
	// after need not be a stored key; nil and empty differ (empty skips the
	// empty user key); limit <= 0 returns everything.
	for _, after := range [][]byte{nil, {}, []byte("a\x00\x00"), []byte("b"), []byte("bz"), []byte("\xff"), []byte("\xff\xff")} {
		for _, limit := range []int{-1, 0, 2} {
			es, more, err := b.MapIterate("map", k, after, limit)
			wes, wmore := m.MapIterate("map", k, after, limit, 0)
			if got, want := fmtEntries(es, more), fmtEntries(wes, wmore); err != nil || got != want {
				t.Fatalf("MapIterate(after %q, limit %d) = %s %v, want %s", after, limit, got, err, want)
			}
		}
	}
}

func testAggregate(t *testing.T, e *env) {
	type tc struct {
		fn     backend.AggregateFunc
		num    backend.NumberType
		adds   []backend.Number
		want   backend.Number
		errAdd backend.Number // an added value of the wrong type
	}
	i64 := func(vs ...int64) []backend.Number {
		var out []backend.Number
		for _, v := range vs {
			out = append(out, backend.Int64(v))
		}
		return out
	}
	f64 := func(vs ...float64) []backend.Number {
		var out []backend.Number
		for _, v := range vs {
			out = append(out, backend.Float64(v))
		}
		return out
	}
	cases := []tc{
		{backend.AggSum, backend.NumInt64, i64(5, -2, 10), backend.Int64(13), backend.Float64(1)},
		{backend.AggSum, backend.NumInt64, i64(math.MaxInt64, 1), backend.Int64(math.MinInt64), backend.Float64(1)}, // wraps
		{backend.AggMin, backend.NumInt64, i64(5, -2, 10), backend.Int64(-2), backend.Float64(1)},
		{backend.AggMin, backend.NumInt64, i64(math.MinInt64, 0), backend.Int64(math.MinInt64), backend.Float64(1)},
		{backend.AggMax, backend.NumInt64, i64(5, -2, 10, 3), backend.Int64(10), backend.Float64(1)},
		{backend.AggMax, backend.NumInt64, i64(-7), backend.Int64(-7), backend.Float64(1)},
		{backend.AggCount, backend.NumInt64, i64(100, 100, -5), backend.Int64(3), backend.Float64(1)},
		{backend.AggSum, backend.NumFloat64, f64(1.5, 2.25, -0.5), backend.Float64(3.25), backend.Int64(1)},
		{backend.AggMin, backend.NumFloat64, f64(1.5, -2.25, 0.5), backend.Float64(-2.25), backend.Int64(1)},
		{backend.AggMax, backend.NumFloat64, f64(1.5, -2.25, 7.5, 0.5), backend.Float64(7.5), backend.Int64(1)},
		{backend.AggMax, backend.NumFloat64, f64(math.Inf(-1), -1e300), backend.Float64(-1e300), backend.Int64(1)},
		{backend.AggCount, backend.NumFloat64, f64(9.5, 9.5), backend.Float64(2), backend.Int64(1)},
	}
	var states []backend.StateDescriptor
	for i, c := range cases {
		states = append(states, backend.StateDescriptor{Name: fmt.Sprintf("agg%02d", i), Kind: backend.KindAggregate, Aggregate: c.fn, Number: c.num})
	}
	b := e.mustOpen(t, e.opts(testRange, states...))
	for i, c := range cases {
		name := states[i].Name
		k := key(4+i%8, "k", "ns")
		if n, ok, err := b.AggregateGet(name, k); err != nil || ok {
			t.Fatalf("%s(%s) absent = %v %v %v", c.fn, c.num, n, ok, err)
		}
		for _, v := range c.adds {
			must(t, b.AggregateAdd(name, k, v), "%s(%s) add %v", c.fn, c.num, v)
		}
		wantErr(t, b.AggregateAdd(name, k, c.errAdd), backend.ErrInvalidArgument, "%s(%s) add a %s", c.fn, c.num, c.errAdd.Type)
		wantErr(t, b.AggregateAdd(name, k, backend.Number{Type: 9}), backend.ErrInvalidArgument, "%s(%s) add a number of type 9", c.fn, c.num)
		n, ok, err := b.AggregateGet(name, k)
		if got, want := fmtNumber(n, ok), fmtNumber(c.want, true); err != nil || got != want {
			t.Fatalf("%s(%s) of %v = %s %v, want %s", c.fn, c.num, c.adds, got, err, want)
		}
		// Other namespaces are separate; Delete resets.
		if _, ok, _ := b.AggregateGet(name, key(k.KeyGroup, "k", "")); ok {
			t.Fatalf("%s(%s): aggregate visible in another namespace", c.fn, c.num)
		}
		must(t, b.Delete(name, k), "delete aggregate")
		if _, ok, _ := b.AggregateGet(name, k); ok {
			t.Fatalf("%s(%s): aggregate present after delete", c.fn, c.num)
		}
		must(t, b.AggregateAdd(name, k, c.adds[0]), "add after delete")
		want1 := c.adds[0]
		if c.fn == backend.AggCount {
			want1 = backend.Number{Type: c.num, Int: 1, Float: 1}
		}
		n, ok, _ = b.AggregateGet(name, k)
		if got, want := fmtNumber(n, ok), fmtNumber(want1, true); got != want {
			t.Fatalf("%s(%s) after delete and one add = %s, want %s", c.fn, c.num, got, want)
		}
	}
}

func testTimers(t *testing.T, e *env) {
	t2 := backend.StateDescriptor{Name: "timers2", Kind: backend.KindTimers}
	b := e.mustOpen(t, e.opts(testRange, sTimers, t2))
	m := NewModel(sTimers, t2)
	reg := func(state string, tm backend.Timer) {
		t.Helper()
		must(t, b.RegisterTimer(state, tm), "register %+v", tm)
		m.RegisterTimer(state, tm)
	}
	poll := func(state string, wm int64, limit int) {
		t.Helper()
		got, err := b.PollTimers(state, wm, limit)
		if err != nil {
			t.Fatalf("PollTimers(%d, %d): %v", wm, limit, err)
		}
		if g, w := fmtTimers(got), fmtTimers(m.PollTimers(state, wm, limit)); !reflect.DeepEqual(g, w) {
			t.Fatalf("PollTimers(%q, %d, %d) = %q, want %q", state, wm, limit, g, w)
		}
	}
	if ts, err := b.PollTimers("timers", math.MaxInt64, 0); err != nil || len(ts) != 0 {
		t.Fatalf("poll empty = %v %v", ts, err)
	}
	// Same timestamp in several key groups, keys and namespaces: the order
	// is (timestamp, key group, key, namespace).
	for _, kg := range []int{11, 4, 7} {
		for _, k := range []string{"b", "", "a", "a\x00"} {
			for _, ns := range []string{"y", "", "x"} {
				reg("timers", backend.Timer{KeyGroup: kg, Key: []byte(k), Namespace: []byte(ns), Timestamp: 100})
			}
		}
	}
	for _, ts := range []int64{math.MaxInt64, 150, -50, 99, 101, math.MinInt64, 0} {
		reg("timers", backend.Timer{KeyGroup: 8, Key: []byte("t"), Timestamp: ts})
	}
	reg("timers2", backend.Timer{KeyGroup: 8, Key: []byte("t"), Timestamp: 5})
	// Registering an existing timer is a no-op; deleting an absent one is
	// not an error.
	reg("timers", backend.Timer{KeyGroup: 8, Key: []byte("t"), Timestamp: 150})
	must(t, b.DeleteTimer("timers", backend.Timer{KeyGroup: 9, Key: []byte("none"), Timestamp: 1}), "delete absent")
	del := backend.Timer{KeyGroup: 8, Key: []byte("t"), Timestamp: 99}
	must(t, b.DeleteTimer("timers", del), "delete")
	m.DeleteTimer("timers", del)

	poll("timers", math.MinInt64, 0) // the MinInt64 timer only
	poll("timers", -51, 0)           // nothing
	poll("timers", 99, 0)            // -50, 0
	poll("timers", 100, 5)           // the first 5 at 100
	poll("timers", 100, 1)
	poll("timers", 100, 0) // the rest at 100 (polled ones are gone)
	poll("timers", 100, 0) // nothing
	poll("timers2", 4, 0)
	poll("timers", math.MaxInt64, 2) // 101, 150
	poll("timers", math.MaxInt64, 0) // MaxInt64
	poll("timers", math.MaxInt64, 0)
	poll("timers2", 5, 0)
	// A polled timer can be registered again.
	reg("timers", backend.Timer{KeyGroup: 4, Key: []byte("again"), Timestamp: 1})
	poll("timers", 1, 0)
	// Delete on a timers state is the wrong operation.
	wantErr(t, b.Delete("timers", key(4, "again", "")), backend.ErrWrongKind, "Delete on a timers state")
}

func testNamespaces(t *testing.T, e *env) {
	prefixStates := []backend.StateDescriptor{
		{Name: "s", Kind: backend.KindValue}, {Name: "s2", Kind: backend.KindValue}, {Name: "s\x00", Kind: backend.KindValue},
		{Name: "l", Kind: backend.KindList}, {Name: "m", Kind: backend.KindMap},
	}
	b := e.mustOpen(t, e.opts(testRange, prefixStates...))
	m := NewModel(prefixStates...)
	// Addresses whose concatenation of key and namespace (and state name)
	// collide unless the layout keeps them apart.
	addrs := []backend.Key{
		key(5, "ab", ""), key(5, "a", "b"), key(5, "", "ab"), key(5, "a\x01", "b"), key(5, "a", "\x01b"),
		key(5, "ab", "\x00"), key(5, "ab\x00", ""), key(6, "ab", ""), key(5, "\x00", ""), key(5, "", "\x00"), key(5, "", ""),
	}
	for i, k := range addrs {
		for _, d := range prefixStates {
			v := []byte(fmt.Sprintf("%s/%d", d.Name, i))
			switch d.Kind {
			case backend.KindValue:
				must(t, b.Put(d.Name, k, v), "put")
				m.Put(d.Name, k, v, 0)
			case backend.KindList:
				must(t, b.ListAppend(d.Name, k, v), "append")
				m.ListAppend(d.Name, k, [][]byte{v}, 0)
			case backend.KindMap:
				must(t, b.MapPut(d.Name, k, []byte{byte(i)}, v), "map put")
				m.MapPut(d.Name, k, []byte{byte(i)}, v, 0)
			}
		}
	}
	dom := Domain{}
	for _, k := range addrs {
		dom.Keys = append(dom.Keys, k.Key)
		dom.Namespaces = append(dom.Namespaces, k.Namespace)
	}
	now := e.clock.Ms()
	compareAll(t, b, m, backend.KeyGroupRange{Start: 4, End: 7}, dom, now, false, "instance")
	// Deleting one address leaves its neighbours.
	for _, d := range prefixStates {
		must(t, b.Delete(d.Name, addrs[0]), "delete")
		m.Delete(d.Name, addrs[0])
	}
	compareAll(t, b, m, backend.KeyGroupRange{Start: 4, End: 7}, dom, now, false, "instance after delete")
}

// opCall runs one operation of kind k on state with key k; it is the table
// the bad-input tests sweep.
func opCall(b backend.Backend, kind opKind, state string, k backend.Key, v []byte) error {
	var err error
	timer := backend.Timer{KeyGroup: k.KeyGroup, Key: k.Key, Namespace: k.Namespace, Timestamp: 1}
	switch kind {
	case opGet:
		_, _, err = b.Get(state, k)
	case opPut:
		err = b.Put(state, k, v)
	case opDelete:
		err = b.Delete(state, k)
	case opListAppend:
		err = b.ListAppend(state, k, v)
	case opListGet:
		_, err = b.ListGet(state, k)
	case opMapGet:
		_, _, err = b.MapGet(state, k, v)
	case opMapPut:
		err = b.MapPut(state, k, v, v)
	case opMapRemove:
		err = b.MapRemove(state, k, v)
	case opMapContains:
		_, err = b.MapContains(state, k, v)
	case opMapIterate:
		_, _, err = b.MapIterate(state, k, nil, 0)
	case opAggAdd:
		err = b.AggregateAdd(state, k, backend.Int64(1))
	case opAggGet:
		_, _, err = b.AggregateGet(state, k)
	case opRegisterTimer:
		err = b.RegisterTimer(state, timer)
	case opDeleteTimer:
		err = b.DeleteTimer(state, timer)
	case opPollTimers:
		_, err = b.PollTimers(state, math.MaxInt64, 0)
	}
	return err
}

// stateFor returns the basic state an operation applies to.
func stateFor(kind opKind) string {
	switch kind.stateKind() {
	case backend.KindValue:
		return sValue.Name
	case backend.KindList:
		return sList.Name
	case backend.KindMap:
		return sMap.Name
	case backend.KindAggregate:
		return sSum.Name
	}
	return sTimers.Name
}

// seedBasic writes one entry of every basic state and returns the model.
func seedBasic(t *testing.T, b *guarded) *Model {
	t.Helper()
	m := NewModel(basicStates...)
	for kg := testRange.Start; kg <= testRange.End; kg += 3 {
		k := key(kg, "k", "")
		for _, kind := range []opKind{opPut, opListAppend, opMapPut, opAggAdd, opRegisterTimer} {
			must(t, opCall(b, kind, stateFor(kind), k, []byte("v")), "seed %s", kind)
		}
		m.Put("value", k, []byte("v"), 0)
		m.ListAppend("list", k, bs("v"), 0)
		m.MapPut("map", k, []byte("v"), []byte("v"), 0)
		m.AggregateAdd("sum", k, backend.Int64(1), 0)
		m.RegisterTimer("timers", backend.Timer{KeyGroup: kg, Key: k.Key, Namespace: k.Namespace, Timestamp: 1})
	}
	return m
}

var seedDomain = Domain{Keys: bs("k", "x"), Namespaces: bs(""), UserKeys: bs("v")}

func testKeyGroups(t *testing.T, e *env) {
	b := e.mustOpen(t, e.opts(testRange, basicStates...))
	m := seedBasic(t, b)
	for kind := opKind(0); kind < numOpKinds; kind++ {
		if kind == opPollTimers {
			continue
		}
		for _, kg := range []int{testRange.Start - 1, testRange.End + 1, 0, -1, testMaxP, testMaxP + 1, 1 << 16, math.MaxInt32} {
			wantErr(t, opCall(b, kind, stateFor(kind), key(kg, "x", ""), []byte("x")), backend.ErrKeyGroupOutOfRange, "%s on key group %d of %s", kind, kg, testRange)
		}
		for _, kg := range []int{testRange.Start, testRange.End} {
			if kind == opPut || kind == opListAppend || kind == opMapPut || kind == opAggAdd || kind == opRegisterTimer {
				continue // checked below through the model
			}
			must(t, opCall(b, kind, stateFor(kind), key(kg, "x", ""), []byte("x")), "%s on key group %d of %s", kind, kg, testRange)
		}
	}
	// The edges of the range hold data; the same key in another key group is
	// another entry.
	for _, kg := range []int{testRange.Start, testRange.End} {
		k := key(kg, "x", "")
		must(t, b.Put("value", k, []byte(fmt.Sprint(kg))), "put on edge key group %d", kg)
		m.Put("value", k, []byte(fmt.Sprint(kg)), 0)
	}
	compareAll(t, b, m, testRange, seedDomain, e.clock.Ms(), true, "after rejected operations")
}

func testUnknownState(t *testing.T, e *env) {
	b := e.mustOpen(t, e.opts(testRange, basicStates...))
	m := seedBasic(t, b)
	for kind := opKind(0); kind < numOpKinds; kind++ {
		for _, name := range []string{"nope", "valu", "value2", ""} {
			wantErr(t, opCall(b, kind, name, key(5, "k", ""), []byte("x")), backend.ErrUnknownState, "%s on state %q", kind, name)
		}
	}
	compareAll(t, b, m, testRange, seedDomain, e.clock.Ms(), true, "after rejected operations")
}

func testWrongKind(t *testing.T, e *env) {
	b := e.mustOpen(t, e.opts(testRange, basicStates...))
	m := seedBasic(t, b)
	for kind := opKind(0); kind < numOpKinds; kind++ {
		for _, d := range basicStates {
			fits := kind.stateKind() == d.Kind || (kind == opDelete && d.Kind != backend.KindTimers)
			if fits {
				continue
			}
			wantErr(t, opCall(b, kind, d.Name, key(5, "x", ""), []byte("x")), backend.ErrWrongKind, "%s on %s state %q", kind, d.Kind, d.Name)
		}
	}
	compareAll(t, b, m, testRange, seedDomain, e.clock.Ms(), true, "after rejected operations")
}

func testOversized(t *testing.T, e *env) {
	const limit = 32
	o := e.opts(testRange, basicStates...)
	o.MaxValueSize = limit
	b := e.mustOpen(t, o)
	m := seedBasic(t, b)
	ok := bytes.Repeat([]byte("o"), limit)
	big := bytes.Repeat([]byte("b"), limit+1)
	k := key(5, "k", "")
	type write struct {
		what string
		fn   func(x []byte) error
	}
	writes := []write{
		{"value", func(x []byte) error { return b.Put("value", k, x) }},
		{"value key", func(x []byte) error { return b.Put("value", backend.Key{KeyGroup: 5, Key: x}, []byte("v")) }},
		{"value namespace", func(x []byte) error { return b.Put("value", backend.Key{KeyGroup: 5, Namespace: x}, []byte("v")) }},
		{"list element", func(x []byte) error { return b.ListAppend("list", k, []byte("fine"), x) }},
		{"list key", func(x []byte) error { return b.ListAppend("list", backend.Key{KeyGroup: 5, Key: x}, []byte("v")) }},
		{"map user key", func(x []byte) error { return b.MapPut("map", k, x, []byte("v")) }},
		{"map value", func(x []byte) error { return b.MapPut("map", k, []byte("u"), x) }},
		{"map namespace", func(x []byte) error {
			return b.MapPut("map", backend.Key{KeyGroup: 5, Namespace: x}, []byte("u"), []byte("v"))
		}},
		{"aggregate key", func(x []byte) error { return b.AggregateAdd("sum", backend.Key{KeyGroup: 5, Key: x}, backend.Int64(1)) }},
		{"timer key", func(x []byte) error {
			return b.RegisterTimer("timers", backend.Timer{KeyGroup: 5, Key: x, Timestamp: 3})
		}},
		{"timer namespace", func(x []byte) error {
			return b.RegisterTimer("timers", backend.Timer{KeyGroup: 5, Namespace: x, Timestamp: 3})
		}},
	}
	for _, w := range writes {
		wantErr(t, w.fn(big), backend.ErrInvalidArgument, "%s of %d bytes with MaxValueSize %d", w.what, len(big), limit)
	}
	// Nothing of the refused writes is visible (the list append with one
	// good element and one too big wrote neither).
	compareAll(t, b, m, testRange, Domain{Keys: bs("k", ""), Namespaces: bs("")}, e.clock.Ms(), false, "after refused writes")
	for _, w := range writes {
		must(t, w.fn(ok), "%s of exactly %d bytes", w.what, limit)
	}
	expectValue(t, b, "value", k, string(ok), true)
	expectList(t, b, "list", k, "fine", string(ok))
}

func testClosed(t *testing.T, e *env) {
	b := e.mustOpen(t, e.opts(testRange, basicStates...))
	m := seedBasic(t, b)
	id := e.nextID()
	p, err := b.Snapshot(e.ctx, id)
	must(t, err, "snapshot")
	states := b.States()
	must(t, b.Close(), "close")
	must(t, b.Close(), "second close")
	for kind := opKind(0); kind < numOpKinds; kind++ {
		wantErr(t, opCall(b, kind, stateFor(kind), key(5, "k", ""), []byte("x")), backend.ErrClosed, "%s after Close", kind)
	}
	wantErr(t, b.RegisterState(backend.StateDescriptor{Name: "new", Kind: backend.KindValue}), backend.ErrClosed, "RegisterState after Close")
	_, err = b.Snapshot(e.ctx, e.nextID())
	wantErr(t, err, backend.ErrClosed, "Snapshot after Close")
	_ = b.Info()
	_ = b.States()
	b.NotifyCheckpointComplete(id)
	b.NotifyCheckpointAborted(id + 1)
	// A snapshot returned before Close still runs to completion.
	h, err := p.Run(e.ctx)
	must(t, err, "run a snapshot taken before Close")
	e.checkHandle(t, backend.Info{Kind: e.h.Kind, Task: e.task, KeyGroups: testRange, MaxParallelism: testMaxP}, h, id, states)
	r := e.restore(t, testRange, basicStates, h)
	compareAll(t, r, m, testRange, seedDomain, e.clock.Ms(), true, "restored from a snapshot run after Close")
}
