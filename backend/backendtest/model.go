package backendtest

import (
	"bytes"
	"math"
	"sort"

	"github.com/statedhq/stated/backend"
)

// Model is the reference semantics of backend.Backend's data operations: a
// plain map per state kind, written independently of kvstate so that the
// suite does not check an implementation against itself. Times are unix
// milliseconds, as the backends store them.
//
// TTL rules it encodes (the contract every backend follows):
//   - a write stores expiry = now + TTL (whole milliseconds); an entry is
//     live while expiry > now;
//   - with TTLOnReadAndWrite, every read that returns an entry sets its
//     expiry to now + TTL again (ListGet: every live element; MapIterate:
//     the entries returned; MapContains counts as a read);
//   - list elements expire one by one; an aggregate whose entry expired
//     starts again from the next added value.
type Model struct {
	states map[string]backend.StateDescriptor
	values map[addr]entry
	lists  map[addr][]entry
	maps   map[addr]map[string]entry
	aggs   map[addr]aggEntry
	timers map[string]map[timerID]bool
}

type addr struct {
	state   string
	kg      int
	key, ns string
}

type entry struct {
	v   string
	exp int64 // 0: never
}

type aggEntry struct {
	n   backend.Number
	exp int64
}

type timerID struct {
	kg      int
	key, ns string
	ts      int64
}

// NewModel returns an empty model with states registered.
func NewModel(states ...backend.StateDescriptor) *Model {
	m := &Model{
		states: map[string]backend.StateDescriptor{},
		values: map[addr]entry{},
		lists:  map[addr][]entry{},
		maps:   map[addr]map[string]entry{},
		aggs:   map[addr]aggEntry{},
		timers: map[string]map[timerID]bool{},
	}
	for _, d := range states {
		m.Register(d)
	}
	return m
}

// Register adds a state (the caller checked that it is valid and new or
// identical).
func (m *Model) Register(d backend.StateDescriptor) { m.states[d.Name] = d }

// States returns the registered states sorted by name.
func (m *Model) States() []backend.StateDescriptor {
	out := make([]backend.StateDescriptor, 0, len(m.states))
	for _, d := range m.states {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Clone returns a deep copy: the state at a snapshot.
func (m *Model) Clone() *Model {
	c := NewModel(m.States()...)
	for a, e := range m.values {
		c.values[a] = e
	}
	for a, l := range m.lists {
		c.lists[a] = append([]entry(nil), l...)
	}
	for a, mm := range m.maps {
		cm := make(map[string]entry, len(mm))
		for k, e := range mm {
			cm[k] = e
		}
		c.maps[a] = cm
	}
	for a, e := range m.aggs {
		c.aggs[a] = e
	}
	for s, ts := range m.timers {
		ct := make(map[timerID]bool, len(ts))
		for id := range ts {
			ct[id] = true
		}
		c.timers[s] = ct
	}
	return c
}

// Restrict drops every entry outside r: what a restore into r keeps.
func (m *Model) Restrict(r backend.KeyGroupRange) *Model {
	c := m.Clone()
	for a := range c.values {
		if !r.Contains(a.kg) {
			delete(c.values, a)
		}
	}
	for a := range c.lists {
		if !r.Contains(a.kg) {
			delete(c.lists, a)
		}
	}
	for a := range c.maps {
		if !r.Contains(a.kg) {
			delete(c.maps, a)
		}
	}
	for a := range c.aggs {
		if !r.Contains(a.kg) {
			delete(c.aggs, a)
		}
	}
	for _, ts := range c.timers {
		for id := range ts {
			if !r.Contains(id.kg) {
				delete(ts, id)
			}
		}
	}
	return c
}

// Union returns a model holding, for every key group, the entries of the
// first of models whose range (ranges[i]) holds it: a restore from several
// handles.
func Union(models []*Model, ranges []backend.KeyGroupRange) *Model {
	out := NewModel()
	owner := func(kg int) int {
		for i, r := range ranges {
			if r.Contains(kg) {
				return i
			}
		}
		return -1
	}
	for i, m := range models {
		for _, d := range m.States() {
			out.Register(d)
		}
		for a, e := range m.values {
			if owner(a.kg) == i {
				out.values[a] = e
			}
		}
		for a, l := range m.lists {
			if owner(a.kg) == i {
				out.lists[a] = append([]entry(nil), l...)
			}
		}
		for a, mm := range m.maps {
			if owner(a.kg) == i {
				cm := map[string]entry{}
				for k, e := range mm {
					cm[k] = e
				}
				out.maps[a] = cm
			}
		}
		for a, e := range m.aggs {
			if owner(a.kg) == i {
				out.aggs[a] = e
			}
		}
		for s, ts := range m.timers {
			for id := range ts {
				if owner(id.kg) == i {
					out.timerSet(s)[id] = true
				}
			}
		}
	}
	return out
}

func toAddr(state string, k backend.Key) addr {
	return addr{state: state, kg: k.KeyGroup, key: string(k.Key), ns: string(k.Namespace)}
}

func (m *Model) expiry(state string, now int64) int64 {
	d := m.states[state]
	if d.TTL <= 0 {
		return 0
	}
	return now + d.TTL.Milliseconds()
}

func (m *Model) refreshes(state string) bool {
	d := m.states[state]
	return d.TTL > 0 && d.TTLUpdate == backend.TTLOnReadAndWrite
}

func live(exp, now int64) bool { return exp == 0 || exp > now }

// Get models Backend.Get.
func (m *Model) Get(state string, k backend.Key, now int64) ([]byte, bool) {
	a := toAddr(state, k)
	e, ok := m.values[a]
	if !ok || !live(e.exp, now) {
		return nil, false
	}
	if m.refreshes(state) {
		e.exp = m.expiry(state, now)
		m.values[a] = e
	}
	return []byte(e.v), true
}

// Put models Backend.Put.
func (m *Model) Put(state string, k backend.Key, v []byte, now int64) {
	m.values[toAddr(state, k)] = entry{v: string(v), exp: m.expiry(state, now)}
}

// Delete models Backend.Delete.
func (m *Model) Delete(state string, k backend.Key) {
	a := toAddr(state, k)
	delete(m.values, a)
	delete(m.lists, a)
	delete(m.maps, a)
	delete(m.aggs, a)
}

// ListAppend models Backend.ListAppend.
func (m *Model) ListAppend(state string, k backend.Key, values [][]byte, now int64) {
	a := toAddr(state, k)
	for _, v := range values {
		m.lists[a] = append(m.lists[a], entry{v: string(v), exp: m.expiry(state, now)})
	}
}

// ListGet models Backend.ListGet.
func (m *Model) ListGet(state string, k backend.Key, now int64) [][]byte {
	a := toAddr(state, k)
	var out [][]byte
	var kept []entry
	for _, e := range m.lists[a] {
		if !live(e.exp, now) {
			continue
		}
		out = append(out, []byte(e.v))
		kept = append(kept, entry{v: e.v, exp: m.expiry(state, now)})
	}
	if m.refreshes(state) {
		if len(kept) == 0 {
			delete(m.lists, a)
		} else {
			m.lists[a] = kept
		}
	}
	return out
}

// MapGet models Backend.MapGet (and MapContains).
func (m *Model) MapGet(state string, k backend.Key, uk []byte, now int64) ([]byte, bool) {
	a := toAddr(state, k)
	e, ok := m.maps[a][string(uk)]
	if !ok || !live(e.exp, now) {
		return nil, false
	}
	if m.refreshes(state) {
		e.exp = m.expiry(state, now)
		m.maps[a][string(uk)] = e
	}
	return []byte(e.v), true
}

// MapPut models Backend.MapPut.
func (m *Model) MapPut(state string, k backend.Key, uk, v []byte, now int64) {
	a := toAddr(state, k)
	if m.maps[a] == nil {
		m.maps[a] = map[string]entry{}
	}
	m.maps[a][string(uk)] = entry{v: string(v), exp: m.expiry(state, now)}
}

// MapRemove models Backend.MapRemove.
func (m *Model) MapRemove(state string, k backend.Key, uk []byte) {
	a := toAddr(state, k)
	delete(m.maps[a], string(uk))
	if len(m.maps[a]) == 0 {
		delete(m.maps, a)
	}
}

// MapIterate models Backend.MapIterate.
func (m *Model) MapIterate(state string, k backend.Key, after []byte, limit int, now int64) ([]backend.MapEntry, bool) {
	a := toAddr(state, k)
	var keys []string
	for uk, e := range m.maps[a] {
		if live(e.exp, now) && (after == nil || uk > string(after)) {
			keys = append(keys, uk)
		}
	}
	sort.Strings(keys)
	more := false
	if limit > 0 && len(keys) > limit {
		keys, more = keys[:limit], true
	}
	out := make([]backend.MapEntry, 0, len(keys))
	for _, uk := range keys {
		e := m.maps[a][uk]
		out = append(out, backend.MapEntry{UserKey: []byte(uk), Value: []byte(e.v)})
		if m.refreshes(state) {
			e.exp = m.expiry(state, now)
			m.maps[a][uk] = e
		}
	}
	return out, more
}

// AggregateAdd models Backend.AggregateAdd (v has the state's type).
func (m *Model) AggregateAdd(state string, k backend.Key, v backend.Number, now int64) {
	d := m.states[state]
	a := toAddr(state, k)
	old, ok := m.aggs[a]
	ok = ok && live(old.exp, now)
	var n backend.Number
	switch {
	case d.Aggregate == backend.AggCount:
		n = backend.Number{Type: d.Number, Int: 1, Float: 1}
		if ok {
			n = backend.Number{Type: d.Number, Int: old.n.Int + 1, Float: old.n.Float + 1}
		}
	case !ok:
		n = v
	case d.Number == backend.NumFloat64:
		n = backend.Float64(pickFloat(d.Aggregate, old.n.Float, v.Float))
	default:
		n = backend.Int64(pickInt(d.Aggregate, old.n.Int, v.Int))
	}
	m.aggs[a] = aggEntry{n: n, exp: m.expiry(state, now)}
}

func pickFloat(f backend.AggregateFunc, acc, v float64) float64 {
	switch f {
	case backend.AggMin:
		return math.Min(acc, v)
	case backend.AggMax:
		return math.Max(acc, v)
	}
	return acc + v
}

func pickInt(f backend.AggregateFunc, acc, v int64) int64 {
	switch f {
	case backend.AggMin:
		return min(acc, v)
	case backend.AggMax:
		return max(acc, v)
	}
	return acc + v // wraps, as the contract says
}

// AggregateGet models Backend.AggregateGet.
func (m *Model) AggregateGet(state string, k backend.Key, now int64) (backend.Number, bool) {
	a := toAddr(state, k)
	e, ok := m.aggs[a]
	if !ok || !live(e.exp, now) {
		return backend.Number{}, false
	}
	if m.refreshes(state) {
		e.exp = m.expiry(state, now)
		m.aggs[a] = e
	}
	return e.n, true
}

func (m *Model) timerSet(state string) map[timerID]bool {
	if m.timers[state] == nil {
		m.timers[state] = map[timerID]bool{}
	}
	return m.timers[state]
}

func toTimerID(t backend.Timer) timerID {
	return timerID{kg: t.KeyGroup, key: string(t.Key), ns: string(t.Namespace), ts: t.Timestamp}
}

// RegisterTimer models Backend.RegisterTimer.
func (m *Model) RegisterTimer(state string, t backend.Timer) { m.timerSet(state)[toTimerID(t)] = true }

// DeleteTimer models Backend.DeleteTimer.
func (m *Model) DeleteTimer(state string, t backend.Timer) { delete(m.timerSet(state), toTimerID(t)) }

// PollTimers models Backend.PollTimers.
func (m *Model) PollTimers(state string, watermark int64, limit int) []backend.Timer {
	var due []backend.Timer
	for id := range m.timers[state] {
		if id.ts <= watermark {
			due = append(due, backend.Timer{KeyGroup: id.kg, Key: []byte(id.key), Namespace: []byte(id.ns), Timestamp: id.ts})
		}
	}
	sort.Slice(due, func(i, j int) bool { return TimerLess(due[i], due[j]) })
	if limit > 0 && len(due) > limit {
		due = due[:limit]
	}
	for _, t := range due {
		delete(m.timers[state], toTimerID(t))
	}
	return due
}

// TimerLess is the poll order: (Timestamp, KeyGroup, Key, Namespace).
func TimerLess(a, b backend.Timer) bool {
	if a.Timestamp != b.Timestamp {
		return a.Timestamp < b.Timestamp
	}
	if a.KeyGroup != b.KeyGroup {
		return a.KeyGroup < b.KeyGroup
	}
	if c := bytes.Compare(a.Key, b.Key); c != 0 {
		return c < 0
	}
	return bytes.Compare(a.Namespace, b.Namespace) < 0
}
