package backendtest

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
)

// Views, key scans and bulk loads (backend.Viewer, KeyScanner, Loader):
// every backend kind of this module has them, so the suite fails a kind
// without them.

func viewerOf(t tester, b *guarded) backend.Viewer {
	t.Helper()
	v, ok := b.Backend.(backend.Viewer)
	if !ok {
		t.Fatalf("backend %T has no views (backend.Viewer)", b.Backend)
	}
	return v
}

func keyScannerOf(t tester, b *guarded) backend.KeyScanner {
	t.Helper()
	v, ok := b.Backend.(backend.KeyScanner)
	if !ok {
		t.Fatalf("backend %T has no key scans (backend.KeyScanner)", b.Backend)
	}
	return v
}

func loaderOf(t tester, b *guarded) backend.Loader {
	t.Helper()
	v, ok := b.Backend.(backend.Loader)
	if !ok {
		t.Fatalf("backend %T has no bulk load (backend.Loader)", b.Backend)
	}
	return v
}

// takeView freezes a view, turning a panic into a failure; it is released
// when the test ends.
func takeView(t tester, b *guarded) backend.View {
	t.Helper()
	var v backend.View
	var err error
	func() {
		defer catch(t, "View", &err)
		v, err = viewerOf(t, b).View()
	}()
	must(t, err, "take a view")
	t.Cleanup(v.Release)
	return v
}

// viewRow is an entry as the tests compare it: its address in stored-key
// order and its content.
type viewRow struct {
	kg        int
	state     string
	key, ns   string
	userKey   string
	ts        int64
	content   string
	cursor    string
	stateID   int
	kindMatch bool
}

func (r viewRow) String() string {
	return fmt.Sprintf("kg%d/%s/%q/%q/%q/%d=%s", r.kg, r.state, r.key, r.ns, r.userKey, r.ts, r.content)
}

func rowOf(e *backend.ViewEntry, states []backend.StateDescriptor) viewRow {
	r := viewRow{kg: e.KeyGroup, state: e.State, key: string(e.Key), ns: string(e.Namespace), userKey: string(e.UserKey),
		ts: e.Timestamp, cursor: string(e.Cursor), stateID: e.StateID}
	r.kindMatch = e.StateID >= 0 && e.StateID < len(states) && states[e.StateID].Name == e.State && states[e.StateID].Kind == e.Kind
	switch e.Kind {
	case backend.KindValue, backend.KindMap:
		r.content = string(e.Value)
	case backend.KindList:
		var parts []string
		for _, v := range e.Values {
			parts = append(parts, string(v))
		}
		r.content = "[" + strings.Join(parts, ",") + "]"
	case backend.KindAggregate:
		r.content = e.Number.String()
	case backend.KindTimers:
		r.content = "timer"
	}
	return r
}

// scanRows scans r of v from after, at most limit entries (<= 0: all).
func scanRows(t tester, v backend.View, r backend.KeyGroupRange, after []byte, limit int) ([]viewRow, error) {
	t.Helper()
	states := v.States()
	var rows []viewRow
	err := v.Scan(r, after, func(e *backend.ViewEntry) (bool, error) {
		rows = append(rows, rowOf(e, states))
		return limit <= 0 || len(rows) < limit, nil
	})
	return rows, err
}

// lenLess orders byte strings as a uvarint length prefix does (for the
// short strings of these tests: by length, then bytes).
func lenLess(a, b string) (less, equal bool) {
	if len(a) != len(b) {
		return len(a) < len(b), false
	}
	return a < b, a == b
}

// sortRows puts rows in the order the suite expects a scan to return:
// key group, state (by length, then name), then key, namespace and user key
// (each by length, then bytes); timers by timestamp, key, namespace.
func sortRows(rows []viewRow) {
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.kg != b.kg {
			return a.kg < b.kg
		}
		if l, eq := lenLess(a.state, b.state); !eq {
			return l
		}
		if a.ts != b.ts {
			return a.ts < b.ts
		}
		if l, eq := lenLess(a.key, b.key); !eq {
			return l
		}
		if l, eq := lenLess(a.ns, b.ns); !eq {
			return l
		}
		return a.userKey < b.userKey
	})
}

func sameRows(t tester, what string, got, want []viewRow) {
	t.Helper()
	var g, w []string
	for _, r := range got {
		g = append(g, r.String())
		if !r.kindMatch {
			t.Fatalf("%s: entry %s has state id %d and a kind that do not match the view's states", what, r, r.stateID)
		}
	}
	for _, r := range want {
		w = append(w, r.String())
	}
	if strings.Join(g, "\n") != strings.Join(w, "\n") {
		t.Fatalf("%s: scan returned\n  %s\nwant\n  %s", what, strings.Join(g, "\n  "), strings.Join(w, "\n  "))
	}
}

// seedView writes entries of every kind over the instance's key groups and
// returns the rows a view of it must hold, in scan order.
func seedView(t *testing.T, b *guarded) []viewRow {
	var rows []viewRow
	for kg := testRange.Start; kg <= testRange.End; kg++ {
		for _, k := range []string{"a", "bb", "b"} {
			for _, ns := range []string{"", "n1"} {
				kk := key(kg, k, ns)
				v := fmt.Sprintf("v-%d-%s-%s", kg, k, ns)
				must(t, b.Put("value", kk, []byte(v)), "put")
				rows = append(rows, viewRow{kg: kg, state: "value", key: k, ns: ns, content: v})
				must(t, b.ListAppend("list", kk, []byte("x"), []byte(v)), "list append")
				rows = append(rows, viewRow{kg: kg, state: "list", key: k, ns: ns, content: "[x," + v + "]"})
				for _, uk := range []string{"u2", "u1"} {
					must(t, b.MapPut("map", kk, []byte(uk), []byte(v+uk)), "map put")
					rows = append(rows, viewRow{kg: kg, state: "map", key: k, ns: ns, userKey: uk, content: v + uk})
				}
				must(t, b.AggregateAdd("sum", kk, backend.Int64(int64(kg))), "aggregate add")
				must(t, b.AggregateAdd("sum", kk, backend.Int64(1)), "aggregate add")
				rows = append(rows, viewRow{kg: kg, state: "sum", key: k, ns: ns, content: fmt.Sprint(kg + 1)})
				tm := backend.Timer{KeyGroup: kg, Key: []byte(k), Namespace: []byte(ns), Timestamp: int64(100 - kg)}
				must(t, b.RegisterTimer("timers", tm), "register timer")
				rows = append(rows, viewRow{kg: kg, state: "timers", key: k, ns: ns, ts: tm.Timestamp, content: "timer"})
			}
		}
	}
	sortRows(rows)
	return rows
}

// scramble changes every kind of entry after a view was taken.
func scramble(t *testing.T, b *guarded) {
	for kg := testRange.Start; kg <= testRange.End; kg++ {
		k := key(kg, "a", "")
		must(t, b.Put("value", k, []byte("changed")), "put")
		must(t, b.Delete("value", key(kg, "b", "n1")), "delete")
		must(t, b.Put("value", key(kg, "new", ""), []byte("new")), "put")
		must(t, b.ListAppend("list", k, []byte("later")), "list append")
		must(t, b.MapRemove("map", k, []byte("u1")), "map remove")
		must(t, b.MapPut("map", k, []byte("u3"), []byte("later")), "map put")
		must(t, b.Delete("map", key(kg, "bb", "")), "map clear")
		must(t, b.AggregateAdd("sum", k, backend.Int64(1000)), "aggregate add")
		must(t, b.DeleteTimer("timers", backend.Timer{KeyGroup: kg, Key: []byte("a"), Timestamp: int64(100 - kg)}), "delete timer")
	}
}

func testViewFrozen(t *testing.T, e *env) {
	b := e.mustOpen(t, e.opts(testRange, basicStates...))
	want := seedView(t, b)
	v := takeView(t, b)
	wantStates := []string{"map", "sum", "list", "value", "timers"}
	var names []string
	for _, d := range v.States() {
		names = append(names, d.Name)
	}
	if fmt.Sprint(names) != fmt.Sprint(wantStates) {
		t.Fatalf("view states %v, want them in stored-key order %v", names, wantStates)
	}
	got, err := scanRows(t, v, testRange, nil, 0)
	must(t, err, "scan the view")
	sameRows(t, "view before any later write", got, want)

	scramble(t, b)
	got, err = scanRows(t, v, testRange, nil, 0)
	must(t, err, "scan the view after later writes")
	sameRows(t, "view after later writes", got, want)
	// Registering a state after the view changes nothing in it.
	must(t, b.RegisterState(backend.StateDescriptor{Name: "late", Kind: backend.KindValue}), "register")
	must(t, b.Put("late", key(4, "k", ""), []byte("x")), "put")
	got, err = scanRows(t, v, testRange, nil, 0)
	must(t, err, "scan the view after a late state")
	sameRows(t, "view after a late state", got, want)

	// A new view sees the later writes.
	v2 := takeView(t, b)
	got2, err := scanRows(t, v2, testRange, nil, 0)
	must(t, err, "scan the second view")
	if len(got2) == len(want) {
		t.Fatalf("second view has %d entries, as many as the first: it misses the later writes", len(got2))
	}
	found := false
	for _, r := range got2 {
		if r.state == "value" && r.kg == 4 && r.key == "a" && r.ns == "" {
			found = r.content == "changed"
		}
		if r.state == "late" && r.content != "x" {
			t.Fatalf("second view has %s", r)
		}
	}
	if !found {
		t.Fatalf("second view does not hold the write made after the first view")
	}
}

func testViewPages(t *testing.T, e *env) {
	b := e.mustOpen(t, e.opts(testRange, basicStates...))
	want := seedView(t, b)
	v := takeView(t, b)
	for _, page := range []int{1, 3, 7, 1000} {
		var all []viewRow
		var after []byte
		for i := 0; ; i++ {
			if i > len(want)+1 {
				t.Fatalf("pages of %d do not end", page)
			}
			rows, err := scanRows(t, v, testRange, after, page)
			must(t, err, "scan a page of %d", page)
			if len(rows) == 0 {
				break
			}
			all = append(all, rows...)
			after = []byte(rows[len(rows)-1].cursor)
			scramble(t, b) // writes between pages change nothing
		}
		sameRows(t, fmt.Sprintf("pages of %d", page), all, want)
	}
	// Sub-ranges in order make up the whole scan.
	var all []viewRow
	for _, r := range []backend.KeyGroupRange{{Start: 4, End: 5}, {Start: 6, End: 6}, {Start: 7, End: 11}} {
		rows, err := scanRows(t, v, r, nil, 0)
		must(t, err, "scan %s", r)
		for _, row := range rows {
			if !r.Contains(row.kg) {
				t.Fatalf("scan of %s returned %s", r, row)
			}
		}
		all = append(all, rows...)
	}
	sameRows(t, "sub-ranges", all, want)
}

func testViewErrors(t *testing.T, e *env) {
	b := e.mustOpen(t, e.opts(testRange, basicStates...))
	seedView(t, b)
	v := takeView(t, b)
	for _, r := range []backend.KeyGroupRange{{Start: 3, End: 5}, {Start: 10, End: 12}, {Start: 0, End: 15}, backend.EmptyKeyGroupRange} {
		_, err := scanRows(t, v, r, nil, 0)
		wantErr(t, err, backend.ErrInvalidArgument, "scan of %s outside the instance's %s", r, testRange)
	}
	rows, err := scanRows(t, v, backend.KeyGroupRange{Start: 9, End: 9}, nil, 1)
	must(t, err, "scan key group 9")
	cur := []byte(rows[0].cursor)
	_, err = scanRows(t, v, backend.KeyGroupRange{Start: 4, End: 8}, cur, 0)
	wantErr(t, err, backend.ErrInvalidArgument, "cursor of key group 9 in a scan of 4-8")
	_, err = scanRows(t, v, testRange, []byte{0x01}, 0)
	wantErr(t, err, backend.ErrInvalidArgument, "a one-byte cursor")
	_, err = scanRows(t, v, testRange, []byte{0x7f, 0xff, 1, 2}, 0)
	wantErr(t, err, backend.ErrInvalidArgument, "a cursor of key group 32767")
	stop := errors.New("stop")
	err = v.Scan(testRange, nil, func(*backend.ViewEntry) (bool, error) { return false, stop })
	if !errors.Is(err, stop) {
		t.Fatalf("Scan returned %v, want the callback's error", err)
	}
}

func testViewRelease(t *testing.T, e *env) {
	b := e.mustOpen(t, e.opts(testRange, basicStates...))
	want := seedView(t, b)
	v := takeView(t, b)
	kept := takeView(t, b)
	v.Release()
	v.Release()
	_, err := scanRows(t, v, testRange, nil, 0)
	wantErr(t, err, backend.ErrClosed, "scan after release")

	// A release while a scan runs waits for it.
	var wg sync.WaitGroup
	started := make(chan struct{})
	v3 := takeView(t, b)
	wg.Add(1)
	var scanErr error
	var n int
	go func() {
		defer wg.Done()
		scanErr = v3.Scan(testRange, nil, func(*backend.ViewEntry) (bool, error) {
			if n == 0 {
				close(started)
				time.Sleep(10 * time.Millisecond)
			}
			n++
			return true, nil
		})
	}()
	<-started
	v3.Release()
	wg.Wait()
	if scanErr != nil || n != len(want) {
		t.Fatalf("scan racing a release returned %d entries and %v, want %d and nil", n, scanErr, len(want))
	}

	// A view taken before Close stays readable until released; a new one
	// fails.
	must(t, b.Close(), "close")
	got, err := scanRows(t, kept, testRange, nil, 0)
	must(t, err, "scan a view after its backend closed")
	sameRows(t, "view after close", got, want)
	_, err = viewerOf(t, b).View()
	wantErr(t, err, backend.ErrClosed, "view after close")
}

func testViewTTL(t *testing.T, e *env) {
	ttl := backend.StateDescriptor{Name: "ttl", Kind: backend.KindValue, TTL: time.Second}
	ttlList := backend.StateDescriptor{Name: "tl", Kind: backend.KindList, TTL: time.Second}
	b := e.mustOpen(t, e.opts(testRange, ttl, ttlList))
	must(t, b.Put("ttl", key(4, "old", ""), []byte("old")), "put")
	must(t, b.ListAppend("tl", key(4, "k", ""), []byte("old")), "append")
	e.clock.Advance(600 * time.Millisecond)
	must(t, b.Put("ttl", key(4, "new", ""), []byte("new")), "put")
	must(t, b.ListAppend("tl", key(4, "k", ""), []byte("new")), "append")
	e.clock.Advance(600 * time.Millisecond)
	v := takeView(t, b)
	e.clock.Advance(time.Hour) // expiry after the view leaves it unchanged
	got, err := scanRows(t, v, testRange, nil, 0)
	must(t, err, "scan")
	want := []viewRow{{kg: 4, state: "tl", key: "k", content: "[new]"}, {kg: 4, state: "ttl", key: "new", content: "new"}}
	sameRows(t, "view of expiring entries", got, want)
}

// testViewConcurrent scans views while writers run (for the race
// detector) and checks each view against what was written before it.
func testViewConcurrent(t *testing.T, e *env) {
	b := e.mustOpen(t, e.opts(testRange, sValue))
	const rounds = 20
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = b.Put("value", key(4+i%8, fmt.Sprintf("noise%d", i%50), ""), []byte("x"))
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	for i := 0; i < rounds; i++ {
		must(t, b.Put("value", key(7, "marker", ""), []byte(fmt.Sprint(i))), "put marker")
		v := takeView(t, b)
		must(t, b.Put("value", key(7, "marker", ""), []byte("after")), "put marker")
		rows, err := scanRows(t, v, backend.KeyGroupRange{Start: 7, End: 7}, nil, 0)
		must(t, err, "scan")
		seen := ""
		for _, r := range rows {
			if r.key == "marker" {
				seen = r.content
			}
		}
		if seen != fmt.Sprint(i) {
			t.Fatalf("round %d: the view holds marker %q, want %q (the value before the view)", i, seen, fmt.Sprint(i))
		}
		v.Release()
	}
}

// keysOf pages through Keys and returns "kg/key/ns" strings.
func keysOf(t tester, ks backend.KeyScanner, state string, q backend.KeyScan) []string {
	t.Helper()
	var out []string
	for i := 0; ; i++ {
		if i > 10000 {
			t.Fatalf("key scan of %s does not end", state)
		}
		keys, next, more, err := ks.Keys(state, q)
		must(t, err, "keys of %s", state)
		if len(keys) > q.Limit {
			t.Fatalf("a page of limit %d returned %d keys", q.Limit, len(keys))
		}
		for _, k := range keys {
			out = append(out, fmt.Sprintf("%d/%s/%s", k.KeyGroup, k.Key, k.Namespace))
		}
		if !more {
			return out
		}
		q.After = next
	}
}

func testKeys(t *testing.T, e *env) {
	b := e.mustOpen(t, e.opts(testRange, basicStates...))
	seedView(t, b)
	ks := keyScannerOf(t, b)
	var all, n1 []string
	for kg := testRange.Start; kg <= testRange.End; kg++ {
		for _, k := range []string{"a", "b", "bb"} {
			all = append(all, fmt.Sprintf("%d/%s/", kg, k), fmt.Sprintf("%d/%s/n1", kg, k))
			n1 = append(n1, fmt.Sprintf("%d/%s/n1", kg, k))
		}
	}
	for _, state := range []string{"value", "list", "map", "sum"} {
		for _, limit := range []int{1, 2, 5, 1000} {
			for _, maxRead := range []int{1, 3, 1000} {
				q := backend.KeyScan{Range: testRange, Limit: limit, MaxRead: maxRead}
				if got := keysOf(t, ks, state, q); fmt.Sprint(got) != fmt.Sprint(all) {
					t.Fatalf("keys of %s (limit %d, max read %d) = %v, want %v", state, limit, maxRead, got, all)
				}
				q.HasNamespace, q.Namespace = true, []byte("n1")
				if got := keysOf(t, ks, state, q); fmt.Sprint(got) != fmt.Sprint(n1) {
					t.Fatalf("keys of %s in n1 (limit %d, max read %d) = %v, want %v", state, limit, maxRead, got, n1)
				}
			}
		}
	}
	q := backend.KeyScan{Range: backend.KeyGroupRange{Start: 6, End: 6}, Limit: 100, MaxRead: 100, HasNamespace: true, Namespace: []byte{}}
	if got := keysOf(t, ks, "value", q); fmt.Sprint(got) != "[6/a/ 6/b/ 6/bb/]" {
		t.Fatalf("keys of value in the empty namespace of key group 6 = %v", got)
	}
	must(t, b.Delete("map", key(6, "a", "")), "clear a map")
	if got := keysOf(t, ks, "map", q); fmt.Sprint(got) != "[6/b/ 6/bb/]" {
		t.Fatalf("keys of a map after clearing one = %v", got)
	}

	_, _, _, err := ks.Keys("nope", backend.KeyScan{Range: testRange, Limit: 1, MaxRead: 1})
	wantErr(t, err, backend.ErrUnknownState, "keys of an unknown state")
	_, _, _, err = ks.Keys("timers", backend.KeyScan{Range: testRange, Limit: 1, MaxRead: 1})
	wantErr(t, err, backend.ErrWrongKind, "keys of a timers state")
	_, _, _, err = ks.Keys("value", backend.KeyScan{Range: backend.KeyGroupRange{Start: 0, End: 4}, Limit: 1, MaxRead: 1})
	wantErr(t, err, backend.ErrInvalidArgument, "keys outside the range")
	_, _, _, err = ks.Keys("value", backend.KeyScan{Range: testRange, Limit: 0, MaxRead: 1})
	wantErr(t, err, backend.ErrInvalidArgument, "keys with limit 0")
	_, next, _, err := ks.Keys("list", backend.KeyScan{Range: testRange, Limit: 1, MaxRead: 1})
	must(t, err, "keys of list")
	_, _, _, err = ks.Keys("value", backend.KeyScan{Range: testRange, Limit: 1, MaxRead: 1, After: next})
	wantErr(t, err, backend.ErrInvalidArgument, "a cursor of another state")
	_, _, _, err = ks.Keys("value", backend.KeyScan{Range: testRange, Limit: 1, MaxRead: 1, After: []byte{9}})
	wantErr(t, err, backend.ErrInvalidArgument, "a garbage cursor")

	// Counts: 8 key groups x 3 keys x 2 namespaces, maps with 2 user keys
	// (one map cleared above).
	per := int64(8 * 3 * 2)
	for state, want := range map[string]int64{"value": per, "list": per, "map": 2*per - 2, "sum": per, "timers": per, "": 6*per - 2} {
		n, err := ks.CountEntries(state)
		must(t, err, "count %q", state)
		if n != want {
			t.Fatalf("CountEntries(%q) = %d, want %d", state, n, want)
		}
	}
	_, err = ks.CountEntries("nope")
	wantErr(t, err, backend.ErrUnknownState, "count of an unknown state")
}

// load runs one load session of batches and commits it.
func load(t tester, b *guarded, batches ...[]backend.LoadEntry) error {
	t.Helper()
	s, err := loaderOf(t, b).Load()
	if err != nil {
		return err
	}
	defer s.Close()
	for _, bt := range batches {
		if err := s.Add(bt); err != nil {
			return err
		}
	}
	return s.Commit()
}

func testLoad(t *testing.T, e *env) {
	b := e.mustOpen(t, e.opts(testRange, basicStates...))
	// What a load replaces: a value, a list (not appended to), one map
	// entry (the others stay).
	must(t, b.Put("value", key(5, "k", ""), []byte("before")), "put")
	must(t, b.ListAppend("list", key(5, "k", ""), []byte("before")), "append")
	must(t, b.MapPut("map", key(5, "k", ""), []byte("stays"), []byte("before")), "map put")
	must(t, b.MapPut("map", key(5, "k", ""), []byte("u1"), []byte("before")), "map put")

	var batch1, batch2 []backend.LoadEntry
	for kg := testRange.End; kg >= testRange.Start; kg-- { // not sorted
		for _, k := range []string{"z", "k", "a"} {
			le := func(state string) backend.LoadEntry {
				return backend.LoadEntry{KeyGroup: kg, State: state, Key: []byte(k), Namespace: []byte("ns")}
			}
			v := le("value")
			v.Value = []byte(fmt.Sprintf("%d%s", kg, k))
			l := le("list")
			l.Values = [][]byte{[]byte("e1"), []byte(k)}
			m := le("map")
			m.UserKey, m.Value = []byte("u1"), []byte("m"+k)
			a := le("sum")
			a.Number = backend.Int64(int64(kg))
			tm := le("timers")
			tm.Timestamp = int64(kg)
			batch1 = append(batch1, v, l, m)
			batch2 = append(batch2, a, tm)
		}
	}
	// A later entry for the same address wins.
	batch2 = append(batch2, backend.LoadEntry{KeyGroup: 4, State: "value", Key: []byte("z"), Namespace: []byte("ns"), Value: []byte("last")})
	batch2 = append(batch2,
		backend.LoadEntry{KeyGroup: 5, State: "value", Key: []byte("k"), Value: []byte("loaded")},
		backend.LoadEntry{KeyGroup: 5, State: "list", Kind: backend.KindList, Key: []byte("k"), Values: [][]byte{[]byte("loaded")}},
		backend.LoadEntry{KeyGroup: 5, State: "map", Key: []byte("k"), UserKey: []byte("u1"), Value: []byte("loaded")})
	must(t, load(t, b, batch1, batch2), "load")

	expectValue(t, b, "value", key(9, "a", "ns"), "9a", true)
	expectValue(t, b, "value", key(4, "z", "ns"), "last", true)
	expectValue(t, b, "value", key(5, "k", ""), "loaded", true)
	expectList(t, b, "list", key(11, "k", "ns"), "e1", "k")
	expectList(t, b, "list", key(5, "k", ""), "loaded")
	expectMap(t, b, "map", key(7, "z", "ns"), "u1", "mz")
	expectMap(t, b, "map", key(5, "k", ""), "stays", "before", "u1", "loaded")
	if n, ok, err := b.AggregateGet("sum", key(8, "a", "ns")); err != nil || !ok || n != backend.Int64(8) {
		t.Fatalf("loaded aggregate = %v %v %v, want 8", n, ok, err)
	}
	must(t, b.AggregateAdd("sum", key(8, "a", "ns"), backend.Int64(2)), "add to a loaded aggregate")
	if n, _, _ := b.AggregateGet("sum", key(8, "a", "ns")); n != backend.Int64(10) {
		t.Fatalf("aggregate after an add = %v, want 10", n)
	}
	ts, err := b.PollTimers("timers", 5, 0)
	must(t, err, "poll")
	if len(ts) != 6 || ts[0].Timestamp != 4 || string(ts[0].Key) != "a" {
		t.Fatalf("polled %d loaded timers (%v), want the 6 of key groups 4 and 5", len(ts), ts)
	}
	// A view of the loaded instance holds what was loaded.
	rows, err := scanRows(t, takeView(t, b), backend.KeyGroupRange{Start: 10, End: 10}, nil, 0)
	must(t, err, "scan")
	if len(rows) != 15 { // 3 keys x (value, list, map, sum, timer): its timers are not due
		t.Fatalf("key group 10 holds %d entries after the load, want 15: %v", len(rows), rows)
	}
}

func testLoadErrors(t *testing.T, e *env) {
	b := e.mustOpen(t, e.opts(testRange, basicStates...))
	good := backend.LoadEntry{KeyGroup: 6, State: "value", Key: []byte("good"), Value: []byte("x")}
	bad := map[string]struct {
		e    backend.LoadEntry
		want error
	}{
		"unknown state":      {backend.LoadEntry{KeyGroup: 6, State: "nope", Key: []byte("k")}, backend.ErrUnknownState},
		"key group below":    {backend.LoadEntry{KeyGroup: 3, State: "value", Key: []byte("k")}, backend.ErrKeyGroupOutOfRange},
		"key group above":    {backend.LoadEntry{KeyGroup: 12, State: "value", Key: []byte("k")}, backend.ErrKeyGroupOutOfRange},
		"key group negative": {backend.LoadEntry{KeyGroup: -1, State: "value", Key: []byte("k")}, backend.ErrKeyGroupOutOfRange},
		"wrong kind":         {backend.LoadEntry{KeyGroup: 6, State: "value", Kind: backend.KindList, Key: []byte("k")}, backend.ErrWrongKind},
		"empty list":         {backend.LoadEntry{KeyGroup: 6, State: "list", Key: []byte("k")}, backend.ErrInvalidArgument},
		"number type":        {backend.LoadEntry{KeyGroup: 6, State: "sum", Key: []byte("k"), Number: backend.Float64(1)}, backend.ErrInvalidArgument},
		"oversized value":    {backend.LoadEntry{KeyGroup: 6, State: "value", Key: []byte("k"), Value: make([]byte, backend.DefaultMaxValueSize+1)}, backend.ErrInvalidArgument},
	}
	for name, c := range bad {
		err := load(t, b, []backend.LoadEntry{good, c.e})
		wantErr(t, err, c.want, "load with %s", name)
		// The bad entry's batch wrote nothing, not even the good entry
		// before it.
		expectValue(t, b, "value", key(6, "good", ""), "", false)
	}
	// After a failed session a new one works (the session lock was freed).
	must(t, load(t, b, []backend.LoadEntry{good}), "load after failures")
	expectValue(t, b, "value", key(6, "good", ""), "x", true)
	s, err := loaderOf(t, b).Load()
	must(t, err, "start a load")
	s.Close()
	if err := s.Add([]backend.LoadEntry{good}); err == nil {
		t.Fatal("Add after Close succeeded")
	}
	must(t, b.Close(), "close")
	if err := load(t, b, []backend.LoadEntry{good}); err == nil {
		t.Fatal("a load into a closed backend succeeded")
	}
}

// testLoadRoundTrip loads what a view of one instance holds into another
// and checks that a view of the second holds the same: the engine's
// restore path from its own snapshot.
func testLoadRoundTrip(t *testing.T, e *env) {
	src := e.mustOpen(t, e.opts(testRange, basicStates...))
	want := seedView(t, src)
	v := takeView(t, src)
	dst := e.mustOpen(t, e.opts(testRange, basicStates...))
	s, err := loaderOf(t, dst).Load()
	must(t, err, "start a load")
	defer s.Close()
	var batch []backend.LoadEntry
	err = v.Scan(testRange, nil, func(en *backend.ViewEntry) (bool, error) {
		c := *en
		c.Key, c.Namespace, c.UserKey, c.Value = bytes.Clone(en.Key), bytes.Clone(en.Namespace), bytes.Clone(en.UserKey), bytes.Clone(en.Value)
		c.Values = nil
		for _, x := range en.Values {
			c.Values = append(c.Values, bytes.Clone(x))
		}
		c.Cursor = nil
		batch = append(batch, c)
		if len(batch) == 17 {
			if err := s.Add(batch); err != nil {
				return false, err
			}
			batch = nil
		}
		return true, nil
	})
	must(t, err, "scan and load")
	must(t, s.Add(batch), "load the rest")
	must(t, s.Commit(), "commit")
	got, err := scanRows(t, takeView(t, dst), testRange, nil, 0)
	must(t, err, "scan the loaded instance")
	sameRows(t, "loaded from a view", got, want)
}
