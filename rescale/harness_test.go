package rescale_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/backendtest"
	"github.com/statedhq/stated/backend/file"
	"github.com/statedhq/stated/backend/heap"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/rescale"
	"github.com/statedhq/stated/tiered/memstore"
)

// The rescale tests write a small state of every kind into the old
// subtasks of a job, snapshot each one once, and restore the snapshots at
// every new parallelism, comparing each new subtask with
// backendtest.Model restricted to the subtask's key groups.
//
// TTL: entries are written in three waves, waveGap apart, with a TTL of
// ttl; the snapshot is taken after the last wave. A new subtask is then
// read at the instants just before and at each wave's expiry, so an entry
// that expires at T must be returned at T-1ms and not at T.

const (
	ttl     = 100 * time.Millisecond
	waveGap = 20 * time.Millisecond
	waves   = 3
	// snapAfter is when the old subtasks are snapshotted, after t0.
	snapAfter = 50 * time.Millisecond
)

var ctx = context.Background()

// testStates are sorted by name, as Backend.States returns them.
var testStates = []backend.StateDescriptor{
	{Name: "agg.count.ttl", Kind: backend.KindAggregate, Aggregate: backend.AggCount, Number: backend.NumInt64, TTL: ttl},
	{Name: "agg.sum", Kind: backend.KindAggregate, Aggregate: backend.AggSum, Number: backend.NumInt64},
	{Name: "list", Kind: backend.KindList},
	{Name: "list.ttl", Kind: backend.KindList, TTL: ttl},
	{Name: "map", Kind: backend.KindMap},
	{Name: "map.ttl", Kind: backend.KindMap, TTL: ttl},
	{Name: "timers", Kind: backend.KindTimers},
	{Name: "timers2", Kind: backend.KindTimers},
	{Name: "value", Kind: backend.KindValue},
	{Name: "value.rttl", Kind: backend.KindValue, TTL: ttl, TTLUpdate: backend.TTLOnReadAndWrite},
	{Name: "value.ttl", Kind: backend.KindValue, TTL: ttl},
}

// kindCase opens instances of one backend kind.
type kindCase struct {
	kind backend.Kind
	// open opens an instance with fresh local resources.
	open func(t testing.TB, o backend.Options) (backend.Backend, error)
	// name names the case in subtests; default the kind.
	name string
	// copies: an lsm case whose restores copy the other handles' key
	// groups instead of grafting them (lsm.Options.NoGraft).
	copies bool
}

func (kc kindCase) String() string {
	if kc.name != "" {
		return kc.name
	}
	return string(kc.kind)
}

// testKinds returns the three backends: heap with one snapshot store for
// the test (as a daemon has), file on an in-memory checkpoint store, lsm
// with one shared block cache on Pebble's in-memory file system (the same
// code paths without fsync, which made these tests 2-3x slower on a busy
// disk; the lsm-only tests in lsm_test.go run on local disk), and lsm
// again with restores that copy instead of grafting (both paths must
// restore the same state).
func testKinds(t *testing.T) []kindCase {
	snaps := memstore.New()
	cache := pebble.NewCache(8 << 20)
	t.Cleanup(cache.Unref)
	return []kindCase{
		{kind: backend.KindHeap, open: func(t testing.TB, o backend.Options) (backend.Backend, error) {
			return heap.Open(o, heap.Options{Snapshots: snaps})
		}},
		{kind: backend.KindFile, open: func(t testing.TB, o backend.Options) (backend.Backend, error) {
			return file.Open(o, file.Options{TempDir: t.TempDir()})
		}},
		{kind: backend.KindLSM, open: func(t testing.TB, o backend.Options) (backend.Backend, error) {
			return lsm.Open(o, lsm.Options{Dir: "instance", FS: vfs.NewMem(), Cache: cache, MemTableSize: 256 << 10, TargetFileSize: 64 << 10})
		}},
		{kind: backend.KindLSM, name: "lsm-nograft", copies: true, open: func(t testing.TB, o backend.Options) (backend.Backend, error) {
			return lsm.Open(o, lsm.Options{Dir: "instance", FS: vfs.NewMem(), Cache: cache, MemTableSize: 256 << 10, TargetFileSize: 64 << 10,
				NoGraft: true})
		}},
	}
}

// clockAt returns a settable clock at unix millisecond ms.
func clockAt(ms int64) *backendtest.Clock {
	c := backendtest.NewClock()
	c.Advance(time.Duration(ms-c.Ms()) * time.Millisecond)
	return c
}

// job is the state of one operator at its old parallelism, snapshotted.
type job struct {
	kc kindCase // writes the old state
	// into restores the new subtasks (kc unless a test moves the job to
	// another backend through a canonical savepoint).
	into    kindCase
	restore *memstore.Store // RestoreStore of the new subtasks; nil: store
	maxP    int
	oldP    int
	kgs     []int // key groups that hold data, sorted
	t0      int64 // unix ms of the first wave
	model   *backendtest.Model
	store   *memstore.Store
	handles []*backend.Handle // by old subtask
	nextID  uint64
}

var task = backend.TaskID{Job: "job", Operator: "op"}

func (j *job) baseOptions() backend.Options {
	return backend.Options{Task: task, MaxParallelism: j.maxP, States: testStates, Store: j.store}
}

// restoreOptions are the options every new subtask starts from: a
// savepoint is restored in no-claim mode from its own store.
func (j *job) restoreOptions() backend.Options {
	o := j.baseOptions()
	if j.restore != nil {
		o.RestoreStore, o.NoClaim = j.restore, true
	}
	return o
}

// open opens an instance through the kind's opener and closes it when t
// ends.
func (j *job) open(t testing.TB, o backend.Options) backend.Backend {
	t.Helper()
	b, err := j.kc.open(t, o)
	if err != nil {
		t.Fatalf("%s: open %s %s from %d handle(s): %v", j.kc, o.Task, o.KeyGroups, len(o.Restore), err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// checkpoint takes a full checkpoint of b.
func (j *job) checkpoint(t testing.TB, b backend.Backend) *backend.Handle {
	t.Helper()
	j.nextID++
	p, err := b.Snapshot(ctx, j.nextID)
	if err != nil {
		t.Fatalf("snapshot %d of %s: %v", j.nextID, b.Info().Task, err)
	}
	h, err := p.Run(ctx)
	if err != nil {
		t.Fatalf("snapshot %d of %s: run: %v", j.nextID, b.Info().Task, err)
	}
	b.NotifyCheckpointComplete(j.nextID)
	return h
}

// savepoint takes a canonical snapshot of b into the job's savepoint
// store.
func (j *job) savepoint(t testing.TB, b backend.Backend) *backend.Handle {
	t.Helper()
	j.nextID++
	cs, ok := b.(backend.CanonicalSnapshotter)
	if !ok {
		t.Fatalf("%s does not take canonical snapshots", j.kc.kind)
	}
	p, err := cs.CanonicalSnapshot(ctx, j.nextID, j.restore, "savepoint-1")
	if err != nil {
		t.Fatalf("savepoint of %s: %v", b.Info().Task, err)
	}
	h, err := p.Run(ctx)
	if err != nil {
		t.Fatalf("savepoint of %s: run: %v", b.Info().Task, err)
	}
	return h
}

// keyOf is the key written in key group kg; the key group is part of the
// bytes so that entries of two key groups never look alike.
func keyOf(kg int, ns string) backend.Key {
	return backend.Key{KeyGroup: kg, Key: fmt.Appendf(nil, "k%d", kg), Namespace: []byte(ns)}
}

// probeKeys are the addresses read in key group kg: the written key in two
// namespaces, the empty key, and a key that was written and deleted.
func probeKeys(kg int) []backend.Key {
	return []backend.Key{
		keyOf(kg, ""), keyOf(kg, "n"),
		{KeyGroup: kg, Key: []byte{}},
		{KeyGroup: kg, Key: []byte("gone")},
	}
}

// writer applies every write to the owning old subtask and to the model.
type writer struct {
	t     testing.TB
	bs    []backend.Backend
	maxP  int
	m     *backendtest.Model
	clock *backendtest.Clock
}

func (w *writer) b(kg int) backend.Backend {
	return w.bs[backend.OperatorForKeyGroup(w.maxP, len(w.bs), kg)]
}

func (w *writer) must(err error, op string, k backend.Key) {
	w.t.Helper()
	if err != nil {
		w.t.Fatalf("%s kg %d key %q ns %q: %v", op, k.KeyGroup, k.Key, k.Namespace, err)
	}
}

func (w *writer) put(s string, k backend.Key, v string) {
	w.must(w.b(k.KeyGroup).Put(s, k, []byte(v)), "put "+s, k)
	w.m.Put(s, k, []byte(v), w.clock.Ms())
}

func (w *writer) del(s string, k backend.Key) {
	w.must(w.b(k.KeyGroup).Delete(s, k), "delete "+s, k)
	w.m.Delete(s, k)
}

func (w *writer) appendList(s string, k backend.Key, vs ...string) {
	var bs [][]byte
	for _, v := range vs {
		bs = append(bs, []byte(v))
	}
	w.must(w.b(k.KeyGroup).ListAppend(s, k, bs...), "append "+s, k)
	w.m.ListAppend(s, k, bs, w.clock.Ms())
}

func (w *writer) mapPut(s string, k backend.Key, uk, v string) {
	w.must(w.b(k.KeyGroup).MapPut(s, k, []byte(uk), []byte(v)), "map put "+s, k)
	w.m.MapPut(s, k, []byte(uk), []byte(v), w.clock.Ms())
}

func (w *writer) add(s string, k backend.Key, n int64) {
	w.must(w.b(k.KeyGroup).AggregateAdd(s, k, backend.Int64(n)), "add "+s, k)
	w.m.AggregateAdd(s, k, backend.Int64(n), w.clock.Ms())
}

func (w *writer) timer(s string, k backend.Key, ts int64) {
	tm := backend.Timer{KeyGroup: k.KeyGroup, Key: k.Key, Namespace: k.Namespace, Timestamp: ts}
	w.must(w.b(k.KeyGroup).RegisterTimer(s, tm), "timer "+s, k)
	w.m.RegisterTimer(s, tm)
}

func (w *writer) delTimer(s string, k backend.Key, ts int64) {
	tm := backend.Timer{KeyGroup: k.KeyGroup, Key: k.Key, Namespace: k.Namespace, Timestamp: ts}
	w.must(w.b(k.KeyGroup).DeleteTimer(s, tm), "delete timer "+s, k)
	w.m.DeleteTimer(s, tm)
}

// wave writes wave n of key group kg: every kind, two namespaces, the
// empty key, deletes, and TTL entries whose expiry depends on the wave.
func (w *writer) wave(n, kg int) {
	k, kn := keyOf(kg, ""), keyOf(kg, "n")
	empty, gone := backend.Key{KeyGroup: kg, Key: []byte{}}, backend.Key{KeyGroup: kg, Key: []byte("gone")}
	switch n {
	case 0:
		w.put("value", k, fmt.Sprintf("v-%d", kg))
		w.put("value", kn, fmt.Sprintf("vn-%d", kg))
		if kg%5 == 0 {
			w.put("value", empty, "empty")
		}
		w.put("value", gone, "x")
		w.put("value.rttl", k, "r")
		w.appendList("list", k, "a", fmt.Sprint(kg))
		w.appendList("list", kn, "n")
		w.mapPut("map", k, "u1", "m1")
		w.mapPut("map", k, "u2", fmt.Sprint(kg))
		w.mapPut("map", kn, "u1", "other")
		w.mapPut("map.ttl", k, "a", "0")
		w.add("agg.sum", k, int64(kg))
		w.add("agg.count.ttl", k, 0)
		w.appendList("list.ttl", k, "e0")
		w.timer("timers", k, 1000+int64(kg))
		w.timer("timers", kn, 1000+int64(kg))
		w.timer("timers2", k, 5000-int64(kg))
		w.timer("timers2", gone, 7)
	case 1:
		w.del("value", gone)
		w.add("agg.sum", k, 1)
		w.add("agg.sum", kn, -1)
		w.appendList("list.ttl", k, "e1")
		w.appendList("list", k, "c")
		w.delTimer("timers2", gone, 7)
	case 2:
		w.appendList("list.ttl", k, "e2")
		w.mapPut("map.ttl", k, "b", "2")
		w.mapPut("map.ttl", kn, "a", "n")
	}
	// One TTL value and one count per key group written in a wave that
	// depends on the key group, so every subtask sees several expiries.
	if kg%waves == n {
		w.put("value.ttl", k, fmt.Sprintf("t-%d", kg))
		w.add("agg.count.ttl", k, 0)
	}
}

// newJob writes the test state for key groups kgs into oldP subtasks of
// kind kc and snapshots each subtask once.
func newJob(t testing.TB, kc kindCase, maxP, oldP int, kgs []int) *job {
	t.Helper()
	return newJobSnap(t, kc, maxP, oldP, kgs, false)
}

// newJobSnap is newJob; with savepoint, the old subtasks take canonical
// snapshots into a savepoint store instead of checkpoints.
func newJobSnap(t testing.TB, kc kindCase, maxP, oldP int, kgs []int, savepoint bool) *job {
	t.Helper()
	sort.Ints(kgs)
	clock := backendtest.NewClock()
	j := &job{kc: kc, into: kc, maxP: maxP, oldP: oldP, kgs: kgs, t0: clock.Ms(),
		model: backendtest.NewModel(testStates...), store: memstore.New()}
	w := &writer{t: t, maxP: maxP, m: j.model, clock: clock}
	for i := 0; i < oldP; i++ {
		o := j.baseOptions()
		o.Task.Subtask = i
		o.KeyGroups = backend.KeyGroupRangeForOperator(maxP, oldP, i)
		o.Clock = clock.Now
		w.bs = append(w.bs, j.open(t, o))
	}
	for n := 0; n < waves; n++ {
		for _, kg := range kgs {
			w.wave(n, kg)
		}
		clock.Advance(waveGap)
	}
	clock.Advance(snapAfter - waves*waveGap)
	if savepoint {
		j.restore = memstore.New()
	}
	for _, b := range w.bs {
		var h *backend.Handle
		if savepoint {
			h = j.savepoint(t, b)
		} else {
			h = j.checkpoint(t, b)
		}
		h.OperatorState = []backend.OperatorList{
			{Name: "offsets", Mode: backend.OperatorSplit, Elements: [][]byte{fmt.Appendf(nil, "o%d", h.Task.Subtask)}},
			{Name: "config", Mode: backend.OperatorUnion, Elements: [][]byte{fmt.Appendf(nil, "c%d", h.Task.Subtask)}},
		}
		j.handles = append(j.handles, h)
		_ = b.Close()
	}
	return j
}

func (j *job) snapMs() int64 { return j.t0 + snapAfter.Milliseconds() }

// restored is one new subtask with its clock.
type restored struct {
	st    rescale.Subtask
	b     backend.Backend
	clock *backendtest.Clock
}

// rescaleTo plans newP subtasks from the job's handles and restores each.
func (j *job) rescaleTo(t testing.TB, newP int, handles []*backend.Handle) (*rescale.Plan, []restored) {
	t.Helper()
	plan, err := rescale.PlanOperator(handles, j.maxP, newP)
	if err != nil {
		t.Fatalf("plan %d->%d: %v", len(handles), newP, err)
	}
	clocks := make([]*backendtest.Clock, newP)
	var mu sync.Mutex
	bs, err := plan.RestoreAll(ctx, j.restoreOptions(), 2, func(_ context.Context, st rescale.Subtask, o backend.Options) (backend.Backend, error) {
		c := clockAt(j.snapMs())
		o.Clock = c.Now
		mu.Lock()
		clocks[st.Index] = c
		mu.Unlock()
		return j.into.open(t, o)
	})
	if err != nil {
		t.Fatalf("%s: rescale %d->%d: %v", j.into, len(handles), newP, err)
	}
	out := make([]restored, newP)
	for i, b := range bs {
		t.Cleanup(func() { _ = b.Close() })
		out[i] = restored{st: plan.Subtasks[i], b: b, clock: clocks[i]}
		// The lsm cases must take the path they name: graft the other lsm
		// handles, or copy them.
		lb, ok := b.(*lsm.Backend)
		if !ok {
			continue
		}
		lsmHandles := 0
		for _, h := range plan.Subtasks[i].Handles() {
			if h.Backend == backend.KindLSM {
				lsmHandles++
			}
		}
		if rs := lb.RestoreStats(); (j.into.copies && rs.Graft != 0) || (!j.into.copies && lsmHandles > 1 && rs.Graft == 0) {
			t.Fatalf("%s: subtask %d restored from %d lsm handles: stats %+v", j.into, i, lsmHandles, rs)
		}
	}
	return plan, out
}

// closeAll closes the new subtasks (the test's cleanup would too, but a
// test that rescales many times must not keep hundreds of stores open).
func closeAll(t testing.TB, subs []restored) {
	t.Helper()
	for _, s := range subs {
		if err := s.b.Close(); err != nil {
			t.Fatalf("close subtask %d: %v", s.st.Index, err)
		}
	}
}

// ttlInstants are the times, after t0, at which the TTL states are read
// again: just before and at each wave's expiry.
func ttlInstants() []time.Duration {
	var out []time.Duration
	for n := 0; n < waves; n++ {
		exp := ttl + time.Duration(n)*waveGap
		out = append(out, exp-time.Millisecond, exp)
	}
	return out
}

// checkRescale compares the new subtasks with the job's model: each holds
// exactly the key groups OperatorForKeyGroup gives it, with every kind of
// state, namespaces, TTL expiries and timers; together they hold the old
// state; operator state is redistributed by mode.
func (j *job) checkRescale(t testing.TB, plan *rescale.Plan, subs []restored) {
	t.Helper()
	newP := len(subs)
	what := fmt.Sprintf("%s max %d: %d->%d", j.into.kind, j.maxP, plan.OldParallelism, newP)
	seen := map[int]int{}
	var polled []backend.Timer
	for i, s := range subs {
		r := s.st.KeyGroups
		if want := backend.KeyGroupRangeForOperator(j.maxP, newP, i); r != want || s.st.Index != i {
			t.Fatalf("%s: subtask %d planned with %s, want %s", what, i, r, want)
		}
		info := s.b.Info()
		if info.KeyGroups != r || info.Task.Subtask != i || info.MaxParallelism != j.maxP {
			t.Fatalf("%s: subtask %d reports %+v", what, i, info)
		}
		if got := s.b.States(); !reflect.DeepEqual(got, testStates) {
			t.Fatalf("%s: subtask %d states %v, want %v", what, i, got, testStates)
		}
		m := j.model.Restrict(r)
		sw := fmt.Sprintf("%s: subtask %d %s", what, i, r)
		var mine []int
		for _, kg := range j.kgs {
			if r.Contains(kg) {
				if owner := backend.OperatorForKeyGroup(j.maxP, newP, kg); owner != i {
					t.Fatalf("%s: holds key group %d, which OperatorForKeyGroup gives to %d", sw, kg, owner)
				}
				mine = append(mine, kg)
				seen[kg]++
			}
		}
		now := s.clock.Ms()
		for _, kg := range mine {
			for _, d := range testStates {
				compareKeys(t, s.b, m, d, kg, now, sw)
			}
		}
		for _, at := range ttlInstants() {
			s.clock.Advance(time.Duration(j.t0+at.Milliseconds()-s.clock.Ms()) * time.Millisecond)
			now := s.clock.Ms()
			for _, kg := range mine {
				for _, d := range testStates {
					if d.TTL > 0 {
						compareKeys(t, s.b, m, d, kg, now, fmt.Sprintf("%s at t0+%s", sw, at))
					}
				}
			}
		}
		for _, name := range []string{"timers", "timers2"} {
			// A partial poll (limit and watermark) and then the rest.
			for _, p := range []struct {
				wm    int64
				limit int
			}{{1000 + int64(j.maxP)/2, 3}, {1 << 62, 0}} {
				got, err := s.b.PollTimers(name, p.wm, p.limit)
				if err != nil {
					t.Fatalf("%s: poll %s: %v", sw, name, err)
				}
				want := m.PollTimers(name, p.wm, p.limit)
				if fmtTimers(got) != fmtTimers(want) {
					t.Fatalf("%s: poll %s (watermark %d limit %d) = %s, want %s", sw, name, p.wm, p.limit, fmtTimers(got), fmtTimers(want))
				}
				polled = append(polled, got...)
			}
		}
		for _, kg := range []int{r.Start - 1, r.End + 1} {
			if kg < 0 || kg >= j.maxP {
				continue
			}
			if _, _, err := s.b.Get("value", keyOf(kg, "")); !errors.Is(err, backend.ErrKeyGroupOutOfRange) {
				t.Fatalf("%s: get in key group %d outside the range: %v, want ErrKeyGroupOutOfRange", sw, kg, err)
			}
		}
	}
	for _, kg := range j.kgs {
		if seen[kg] != 1 {
			t.Fatalf("%s: key group %d is held by %d new subtasks", what, kg, seen[kg])
		}
	}
	// Together the new subtasks fired every timer of the old state once.
	all := j.model.Clone()
	var want []backend.Timer
	for _, name := range []string{"timers", "timers2"} {
		want = append(want, all.PollTimers(name, 1<<62, 0)...)
	}
	sortTimers(polled)
	sortTimers(want)
	if fmtTimers(polled) != fmtTimers(want) {
		t.Fatalf("%s: the new subtasks fired %d timers, the old state has %d", what, len(polled), len(want))
	}
	j.checkOperatorState(t, plan, what)
}

func sortTimers(ts []backend.Timer) {
	sort.Slice(ts, func(a, b int) bool { return backendtest.TimerLess(ts[a], ts[b]) })
}

// checkOperatorState: split lists deal every old element out once, union
// lists give every new subtask every old element.
func (j *job) checkOperatorState(t testing.TB, plan *rescale.Plan, what string) {
	t.Helper()
	ops, err := plan.OperatorState()
	if err != nil {
		t.Fatalf("%s: operator state: %v", what, err)
	}
	if len(ops) != plan.NewParallelism {
		t.Fatalf("%s: operator state for %d subtasks", what, len(ops))
	}
	want := map[backend.OperatorStateMode][]string{}
	for _, h := range plan.OldHandles() {
		for _, l := range h.OperatorState {
			for _, e := range l.Elements {
				want[l.Mode] = append(want[l.Mode], string(e))
			}
		}
	}
	sort.Strings(want[backend.OperatorSplit])
	sort.Strings(want[backend.OperatorUnion])
	var split []string
	for i, lists := range ops {
		if len(lists) != 2 || lists[0].Name != "config" || lists[1].Name != "offsets" {
			t.Fatalf("%s: subtask %d operator state %+v", what, i, lists)
		}
		union := elems(lists[0])
		sort.Strings(union)
		if !reflect.DeepEqual(union, want[backend.OperatorUnion]) {
			t.Fatalf("%s: subtask %d union state %v, want %v", what, i, union, want[backend.OperatorUnion])
		}
		split = append(split, elems(lists[1])...)
	}
	sort.Strings(split)
	if !reflect.DeepEqual(split, want[backend.OperatorSplit]) {
		t.Fatalf("%s: split operator state %v, want %v", what, split, want[backend.OperatorSplit])
	}
}

func elems(l backend.OperatorList) []string {
	var out []string
	for _, e := range l.Elements {
		out = append(out, string(e))
	}
	return out
}

// checkpointAll checkpoints every new subtask, as the job does after the
// restore, with the redistributed operator state in each handle (the
// daemon's job), and returns the handles by subtask.
func (j *job) checkpointAll(t testing.TB, plan *rescale.Plan, subs []restored) []*backend.Handle {
	t.Helper()
	ops, err := plan.OperatorState()
	if err != nil {
		t.Fatalf("operator state: %v", err)
	}
	hs := make([]*backend.Handle, len(subs))
	for i, s := range subs {
		hs[i] = j.checkpoint(t, s.b)
		hs[i].OperatorState = ops[i]
	}
	return hs
}

// compareKeys reads every probe key of key group kg in state d from b and
// from the model m at now, in the same order (reads refresh TTL for
// TTLOnReadAndWrite in both).
func compareKeys(t testing.TB, b backend.Backend, m *backendtest.Model, d backend.StateDescriptor, kg int, now int64, what string) {
	t.Helper()
	keys := probeKeys(kg)
	if d.TTL > 0 {
		// Only these two keys are ever written to TTL states; re-reading
		// the others at every instant would only repeat the first read.
		keys = keys[:2]
	}
	for _, k := range keys {
		var got, want string
		var err error
		switch d.Kind {
		case backend.KindValue:
			v, ok, e := b.Get(d.Name, k)
			mv, mok := m.Get(d.Name, k, now)
			got, want, err = optString(v, ok), optString(mv, mok), e
		case backend.KindList:
			l, e := b.ListGet(d.Name, k)
			got, want, err = fmt.Sprintf("%q", l), fmt.Sprintf("%q", m.ListGet(d.Name, k, now)), e
		case backend.KindMap:
			es, more, e := b.MapIterate(d.Name, k, nil, 0)
			mes, mmore := m.MapIterate(d.Name, k, nil, 0, now)
			got, want, err = fmtEntries(es, more), fmtEntries(mes, mmore), e
		case backend.KindAggregate:
			n, ok, e := b.AggregateGet(d.Name, k)
			mn, mok := m.AggregateGet(d.Name, k, now)
			got, want, err = fmtNumber(n, ok), fmtNumber(mn, mok), e
		default:
			continue
		}
		if err != nil {
			t.Fatalf("%s: %s kg %d key %q ns %q: %v", what, d.Name, kg, k.Key, k.Namespace, err)
		}
		if got != want {
			t.Fatalf("%s: %s kg %d key %q ns %q = %s, want %s", what, d.Name, kg, k.Key, k.Namespace, got, want)
		}
	}
}

func optString(v []byte, ok bool) string {
	if !ok {
		return "<absent>"
	}
	return fmt.Sprintf("%q", v)
}

func fmtEntries(es []backend.MapEntry, more bool) string {
	s := ""
	for _, e := range es {
		s += fmt.Sprintf("%q=%q ", e.UserKey, e.Value)
	}
	return fmt.Sprintf("{%s} more=%v", s, more)
}

func fmtNumber(n backend.Number, ok bool) string {
	if !ok {
		return "<absent>"
	}
	return n.Type.String() + ":" + n.String()
}

func fmtTimers(ts []backend.Timer) string {
	s := ""
	for _, tm := range ts {
		s += fmt.Sprintf("(%d kg %d %q %q) ", tm.Timestamp, tm.KeyGroup, tm.Key, tm.Namespace)
	}
	return "[" + s + "]"
}
