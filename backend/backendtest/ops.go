package backendtest

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"time"

	"pgregory.net/rapid"

	"github.com/statedhq/stated/backend"
)

// The random workload: a fixed set of states (every kind, with and without
// TTL, names that are prefixes of each other) over a small domain of keys,
// namespaces and user keys chosen to provoke layout collisions (empty,
// 0x00, 0xff, one a prefix of another). A small domain makes collisions
// and overwrites frequent and lets a comparison read every address.

const modelTTL = 100 * time.Millisecond

var modelStates = []backend.StateDescriptor{
	{Name: "a.count", Kind: backend.KindAggregate, Aggregate: backend.AggCount, Number: backend.NumInt64, TTL: modelTTL},
	{Name: "a.count.f", Kind: backend.KindAggregate, Aggregate: backend.AggCount, Number: backend.NumFloat64},
	{Name: "a.max", Kind: backend.KindAggregate, Aggregate: backend.AggMax, Number: backend.NumInt64, TTL: modelTTL, TTLUpdate: backend.TTLOnReadAndWrite},
	{Name: "a.min.f", Kind: backend.KindAggregate, Aggregate: backend.AggMin, Number: backend.NumFloat64, TTL: modelTTL},
	{Name: "a.sum", Kind: backend.KindAggregate, Aggregate: backend.AggSum, Number: backend.NumInt64},
	{Name: "a.sum.f", Kind: backend.KindAggregate, Aggregate: backend.AggSum, Number: backend.NumFloat64},
	{Name: "l", Kind: backend.KindList},
	{Name: "l.rttl", Kind: backend.KindList, TTL: modelTTL, TTLUpdate: backend.TTLOnReadAndWrite},
	{Name: "l.ttl", Kind: backend.KindList, TTL: modelTTL},
	{Name: "m", Kind: backend.KindMap},
	{Name: "m.rttl", Kind: backend.KindMap, TTL: modelTTL, TTLUpdate: backend.TTLOnReadAndWrite},
	{Name: "m.ttl", Kind: backend.KindMap, TTL: modelTTL},
	{Name: "t", Kind: backend.KindTimers},
	{Name: "t2", Kind: backend.KindTimers},
	{Name: "v", Kind: backend.KindValue},
	{Name: "v.rttl", Kind: backend.KindValue, TTL: modelTTL, TTLUpdate: backend.TTLOnReadAndWrite},
	{Name: "v.ttl", Kind: backend.KindValue, TTL: modelTTL},
}

// Domain is the set of keys, namespaces and user keys a workload uses.
type Domain struct {
	Keys, Namespaces, UserKeys [][]byte
}

var modelDomain = Domain{
	Keys:       bs("", "a", "ab", "a\x00", "\x00", "\xff", "b"),
	Namespaces: bs("", "n", "a", "\x00"),
	UserKeys:   bs("", "a", "a\x00", "ab", "b", "\xff", "\x00\x01"),
}

func bs(ss ...string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

// chooser abstracts the source of random choices so that rapid (which
// shrinks) and a seeded math/rand (for the deterministic tests) drive the
// same generator.
type chooser interface {
	intn(n int, label string) int
}

type rapidChooser struct{ t *rapid.T }

func (c rapidChooser) intn(n int, label string) int {
	return rapid.IntRange(0, n-1).Draw(c.t, label)
}

type randChooser struct{ r *rand.Rand }

func (c randChooser) intn(n int, _ string) int { return c.r.IntN(n) }

func newRand(seed uint64) randChooser {
	return randChooser{rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

type opKind int

const (
	opGet opKind = iota
	opPut
	opDelete
	opListAppend
	opListGet
	opMapGet
	opMapPut
	opMapRemove
	opMapContains
	opMapIterate
	opAggAdd
	opAggGet
	opRegisterTimer
	opDeleteTimer
	opPollTimers
	numOpKinds
)

var opNames = [...]string{"Get", "Put", "Delete", "ListAppend", "ListGet", "MapGet", "MapPut", "MapRemove",
	"MapContains", "MapIterate", "AggregateAdd", "AggregateGet", "RegisterTimer", "DeleteTimer", "PollTimers"}

func (k opKind) String() string { return opNames[k] }

// kindOf is the state kind each operation needs (Delete: any but timers).
func (k opKind) stateKind() backend.StateKind {
	switch k {
	case opGet, opPut, opDelete:
		return backend.KindValue
	case opListAppend, opListGet:
		return backend.KindList
	case opMapGet, opMapPut, opMapRemove, opMapContains, opMapIterate:
		return backend.KindMap
	case opAggAdd, opAggGet:
		return backend.KindAggregate
	}
	return backend.KindTimers
}

// op is one generated operation.
type op struct {
	kind      opKind
	state     string
	k         backend.Key
	uk, v     []byte
	vals      [][]byte
	after     []byte
	limit     int
	n         backend.Number
	timer     backend.Timer
	watermark int64
	outside   bool // k's key group is outside the instance's range
}

func (o op) String() string {
	switch o.kind {
	case opPollTimers:
		return fmt.Sprintf("PollTimers(%q, %d, %d)", o.state, o.watermark, o.limit)
	case opRegisterTimer, opDeleteTimer:
		return fmt.Sprintf("%s(%q, kg %d key %q ns %q ts %d)", o.kind, o.state, o.timer.KeyGroup, o.timer.Key, o.timer.Namespace, o.timer.Timestamp)
	}
	return fmt.Sprintf("%s(%q, kg %d key %q ns %q, uk %q v %q vals %q after %q limit %d n %v)",
		o.kind, o.state, o.k.KeyGroup, o.k.Key, o.k.Namespace, o.uk, o.v, o.vals, o.after, o.limit, o.n)
}

var (
	timestamps = []int64{math.MinInt64, -5, -1, 0, 1, 2, 3, 5, 8, 13, 20, math.MaxInt64}
	intNumbers = []int64{-3, -2, -1, 0, 1, 2, 3, 7, math.MaxInt64, math.MinInt64}
)

func pick[T any](c chooser, xs []T, label string) T { return xs[c.intn(len(xs), label)] }

func genBytes(c chooser, label string) []byte {
	n := c.intn(9, label+".len")
	b := make([]byte, n)
	for i := range b {
		b[i] = pick(c, []byte{0, 1, 'a', 'z', 0xff}, label+".byte")
	}
	return b
}

// genOp generates one operation on the states of states, key groups of r.
func genOp(c chooser, states []backend.StateDescriptor, r backend.KeyGroupRange, dom Domain) op {
	d := pick(c, states, "state")
	var kinds []opKind
	for k := opKind(0); k < numOpKinds; k++ {
		if k.stateKind() == d.Kind || (k == opDelete && d.Kind != backend.KindTimers) {
			kinds = append(kinds, k)
		}
	}
	o := op{kind: pick(c, kinds, "op"), state: d.Name}
	kg := r.Start + c.intn(r.Len(), "kg")
	if c.intn(40, "outside") == 0 {
		// Rarely, a key group just outside the range: must be rejected
		// and change nothing.
		o.outside = true
		kg = pick(c, []int{r.Start - 1, r.End + 1}, "outsideKG")
	}
	o.k = backend.Key{KeyGroup: kg, Key: pick(c, dom.Keys, "key"), Namespace: pick(c, dom.Namespaces, "ns")}
	switch o.kind {
	case opPut:
		o.v = genBytes(c, "value")
	case opListAppend:
		for i, n := 0, c.intn(4, "nvals"); i < n; i++ {
			o.vals = append(o.vals, genBytes(c, "elem"))
		}
	case opMapGet, opMapRemove, opMapContains:
		o.uk = pick(c, dom.UserKeys, "userKey")
	case opMapPut:
		o.uk = pick(c, dom.UserKeys, "userKey")
		o.v = genBytes(c, "value")
	case opMapIterate:
		if c.intn(3, "hasAfter") > 0 {
			o.after = pick(c, dom.UserKeys, "after")
		}
		o.limit = c.intn(4, "limit")
	case opAggAdd:
		if d.Number == backend.NumFloat64 {
			o.n = backend.Float64(float64(c.intn(17, "float")-8) / 4)
		} else {
			o.n = backend.Int64(pick(c, intNumbers, "int"))
		}
	case opRegisterTimer, opDeleteTimer:
		o.timer = backend.Timer{KeyGroup: kg, Key: o.k.Key, Namespace: o.k.Namespace, Timestamp: pick(c, timestamps, "ts")}
	case opPollTimers:
		o.outside = false
		o.watermark = pick(c, timestamps, "watermark")
		o.limit = c.intn(4, "limit")
	}
	return o
}

// apply runs o on b and on m and fails t if they disagree.
func apply(t tester, b backend.Backend, m *Model, o op, now int64) {
	t.Helper()
	got, want, err := run(b, m, o, now)
	if o.outside {
		wantErr(t, err, backend.ErrKeyGroupOutOfRange, "%v", o)
		return
	}
	if err != nil {
		t.Fatalf("%v: %v", o, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%v: got %v, model says %v", o, got, want)
	}
}

// run runs o on b and on m and returns both results in comparable form
// (nil for writes) and b's error.
func run(b backend.Backend, m *Model, o op, now int64) (got, want any, err error) {
	switch o.kind {
	case opGet:
		v, ok, e := b.Get(o.state, o.k)
		err = e
		if !o.outside {
			wv, wok := m.Get(o.state, o.k, now)
			got, want = optBytes(v, ok), optBytes(wv, wok)
		}
	case opPut:
		err = b.Put(o.state, o.k, o.v)
		if !o.outside {
			m.Put(o.state, o.k, o.v, now)
		}
	case opDelete:
		err = b.Delete(o.state, o.k)
		if !o.outside {
			m.Delete(o.state, o.k)
		}
	case opListAppend:
		err = b.ListAppend(o.state, o.k, o.vals...)
		if !o.outside {
			m.ListAppend(o.state, o.k, o.vals, now)
		}
	case opListGet:
		l, e := b.ListGet(o.state, o.k)
		err = e
		if !o.outside {
			got, want = normList(l), normList(m.ListGet(o.state, o.k, now))
		}
	case opMapGet:
		v, ok, e := b.MapGet(o.state, o.k, o.uk)
		err = e
		if !o.outside {
			wv, wok := m.MapGet(o.state, o.k, o.uk, now)
			got, want = optBytes(v, ok), optBytes(wv, wok)
		}
	case opMapContains:
		ok, e := b.MapContains(o.state, o.k, o.uk)
		err = e
		if !o.outside {
			_, wok := m.MapGet(o.state, o.k, o.uk, now)
			got, want = ok, wok
		}
	case opMapPut:
		err = b.MapPut(o.state, o.k, o.uk, o.v)
		if !o.outside {
			m.MapPut(o.state, o.k, o.uk, o.v, now)
		}
	case opMapRemove:
		err = b.MapRemove(o.state, o.k, o.uk)
		if !o.outside {
			m.MapRemove(o.state, o.k, o.uk)
		}
	case opMapIterate:
		es, more, e := b.MapIterate(o.state, o.k, o.after, o.limit)
		err = e
		if !o.outside {
			wes, wmore := m.MapIterate(o.state, o.k, o.after, o.limit, now)
			got, want = fmtEntries(es, more), fmtEntries(wes, wmore)
		}
	case opAggAdd:
		err = b.AggregateAdd(o.state, o.k, o.n)
		if !o.outside {
			m.AggregateAdd(o.state, o.k, o.n, now)
		}
	case opAggGet:
		n, ok, e := b.AggregateGet(o.state, o.k)
		err = e
		if !o.outside {
			wn, wok := m.AggregateGet(o.state, o.k, now)
			got, want = fmtNumber(n, ok), fmtNumber(wn, wok)
		}
	case opRegisterTimer:
		err = b.RegisterTimer(o.state, o.timer)
		if !o.outside {
			m.RegisterTimer(o.state, o.timer)
		}
	case opDeleteTimer:
		err = b.DeleteTimer(o.state, o.timer)
		if !o.outside {
			m.DeleteTimer(o.state, o.timer)
		}
	case opPollTimers:
		ts, e := b.PollTimers(o.state, o.watermark, o.limit)
		err = e
		got, want = fmtTimers(ts), fmtTimers(m.PollTimers(o.state, o.watermark, o.limit))
	}
	return got, want, err
}

// Canonical printable forms, so that nil and empty slices compare equal and
// numbers compare by their type's field only.

func optBytes(v []byte, ok bool) string {
	if !ok {
		return "<absent>"
	}
	return fmt.Sprintf("%q", v)
}

func normList(l [][]byte) []string {
	out := []string{}
	for _, x := range l {
		out = append(out, string(x))
	}
	return out
}

func fmtEntries(es []backend.MapEntry, more bool) string {
	var b bytes.Buffer
	for _, e := range es {
		fmt.Fprintf(&b, "%q=%q ", e.UserKey, e.Value)
	}
	fmt.Fprintf(&b, "more=%v", more)
	return b.String()
}

func fmtNumber(n backend.Number, ok bool) string {
	if !ok {
		return "<absent>"
	}
	switch n.Type {
	case backend.NumInt64:
		return fmt.Sprintf("int64(%d)", n.Int)
	case backend.NumFloat64:
		return fmt.Sprintf("float64(%v)", n.Float)
	}
	return fmt.Sprintf("bad number type %d", n.Type)
}

func fmtTimers(ts []backend.Timer) []string {
	out := []string{}
	for _, x := range ts {
		out = append(out, fmt.Sprintf("kg %d key %q ns %q ts %d", x.KeyGroup, x.Key, x.Namespace, x.Timestamp))
	}
	return out
}

// compareAll reads every address of dom in range r from b and m and fails t
// on the first difference; with drain it also polls every timer. Reads
// refresh TTLs on both sides alike. what names the instance in messages.
func compareAll(t tester, b backend.Backend, m *Model, r backend.KeyGroupRange, dom Domain, now int64, drain bool, what string) {
	t.Helper()
	if got, want := b.States(), m.States(); !sameStates(got, want) {
		t.Fatalf("%s: states %v, want %v", what, got, want)
	}
	for _, o := range readOps(m, r, dom, drain) {
		compareOp(t, b, m, o, now, what)
	}
}

// readOps lists the reads that cover every address of dom in r for every
// state of m (and, with drain, a poll of every timer).
func readOps(m *Model, r backend.KeyGroupRange, dom Domain, drain bool) []op {
	var ops []op
	for _, d := range m.States() {
		if d.Kind == backend.KindTimers {
			if drain {
				ops = append(ops, op{kind: opPollTimers, state: d.Name, watermark: math.MaxInt64})
			}
			continue
		}
		var kinds []opKind
		switch d.Kind {
		case backend.KindValue:
			kinds = []opKind{opGet}
		case backend.KindList:
			kinds = []opKind{opListGet}
		case backend.KindMap:
			kinds = []opKind{opMapIterate}
		case backend.KindAggregate:
			kinds = []opKind{opAggGet}
		}
		for kg := r.Start; kg <= r.End; kg++ {
			for _, key := range dom.Keys {
				for _, ns := range dom.Namespaces {
					for _, k := range kinds {
						ops = append(ops, op{kind: k, state: d.Name, k: backend.Key{KeyGroup: kg, Key: key, Namespace: ns}})
					}
				}
			}
		}
	}
	return ops
}

func compareOp(t tester, b backend.Backend, m *Model, o op, now int64, what string) {
	t.Helper()
	apply(prefixed{t, what}, b, m, o, now)
}

// prefixed prefixes failure messages with the instance they concern.
type prefixed struct {
	tester
	what string
}

func (p prefixed) Fatalf(format string, args ...any) {
	p.tester.Helper()
	p.tester.Fatalf("%s: %s", p.what, fmt.Sprintf(format, args...))
}

func (p prefixed) Errorf(format string, args ...any) {
	p.tester.Helper()
	p.tester.Errorf("%s: %s", p.what, fmt.Sprintf(format, args...))
}

// randomOps applies n generated operations to b and m, advancing the clock
// now and then (so TTLs expire mid-sequence).
func (e *env) randomOps(t tester, c chooser, b backend.Backend, m *Model, r backend.KeyGroupRange, n int) {
	t.Helper()
	states := m.States()
	for i := 0; i < n; i++ {
		if c.intn(25, "advance") == 0 {
			e.clock.Advance(time.Duration(c.intn(60, "ms")) * time.Millisecond)
		}
		apply(t, b, m, genOp(c, states, r, modelDomain), e.clock.Ms())
	}
}
