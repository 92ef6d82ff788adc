package fuzz

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/daemon"
)

// The model: one operator ("op") of job "j" with maxParallelism 8, whose
// state is defined by the writes of each checkpoint (writes), applied to
// a backend and to a model alike. Everything the fixtures, the pinned
// files and the fuzz targets restore is compared with it.
const (
	job    = "j"
	opName = "op"
	maxPar = 8
	// oldPar is the parallelism the checkpoints are written with; restores
	// use 1, 2 or 3 (a rescale for 1 and 3).
	oldPar = 2
	// numKeys keys, key i in key group i%maxPar: every key group holds
	// state.
	numKeys = 12
)

// states has one state of every kind.
var states = []backend.StateDescriptor{
	{Name: "a", Kind: backend.KindAggregate, Aggregate: backend.AggSum, Number: backend.NumInt64},
	{Name: "l", Kind: backend.KindList},
	{Name: "m", Kind: backend.KindMap},
	{Name: "t", Kind: backend.KindTimers},
	{Name: "v", Kind: backend.KindValue},
}

type mkey struct {
	kg  int
	key string
}

func keyOf(i int) mkey { return mkey{kg: i % maxPar, key: fmt.Sprintf("k%02d", i)} }

func (k mkey) bk() backend.Key { return backend.Key{KeyGroup: k.kg, Key: []byte(k.key)} }

type timer struct {
	k  mkey
	ts int64
}

// model is the expected state.
type model struct {
	values map[mkey]string
	lists  map[mkey][]string
	maps   map[mkey]map[string]string
	aggs   map[mkey]int64
	timers map[timer]bool
}

func newModel() *model {
	return &model{values: map[mkey]string{}, lists: map[mkey][]string{}, maps: map[mkey]map[string]string{},
		aggs: map[mkey]int64{}, timers: map[timer]bool{}}
}

// op is one write; kind selects the operation.
type op struct {
	kind  string // put, del, append, mput, mdel, add, timer, untimer
	k     mkey
	a, b  string
	n     int64
	stamp int64
}

// writes are the writes between checkpoint ckpt-1 and ckpt (the fixtures
// and pinned files use 1 and 2; the power-loss suite goes on).
func writes(ckpt int) []op {
	var out []op
	for i := range numKeys {
		k := keyOf(i)
		switch ckpt {
		case 1:
			out = append(out,
				op{kind: "put", k: k, a: fmt.Sprintf("value-%d-1", i)},
				op{kind: "append", k: k, a: fmt.Sprintf("e%d.0", i)},
				op{kind: "append", k: k, a: fmt.Sprintf("e%d.1", i)},
				op{kind: "mput", k: k, a: "x", b: fmt.Sprintf("x%d", i)},
				op{kind: "mput", k: k, a: "y", b: fmt.Sprintf("y%d", i)},
				op{kind: "add", k: k, n: int64(i)})
			if i%2 == 0 {
				out = append(out, op{kind: "timer", k: k, stamp: int64(100 + i)})
			}
		case 2:
			switch i % 4 {
			case 0:
				out = append(out, op{kind: "put", k: k, a: fmt.Sprintf("value-%d-2", i)}, op{kind: "untimer", k: k, stamp: int64(100 + i)})
			case 1:
				out = append(out, op{kind: "del", k: k}, op{kind: "mdel", k: k, a: "x"})
			case 2:
				out = append(out, op{kind: "append", k: k, a: fmt.Sprintf("e%d.2", i)}, op{kind: "mput", k: k, a: "z", b: "z"})
			case 3:
				out = append(out, op{kind: "add", k: k, n: 1000}, op{kind: "timer", k: k, stamp: int64(200 + i)})
			}
		default:
			// Later checkpoints (the power-loss suite's cycles) change a
			// third of the keys each, every state kind in turn.
			switch (i + ckpt) % 3 {
			case 0:
				// Values of a few KiB make files of several 4 KiB blocks,
				// which a power loss can tear in the middle.
				out = append(out, op{kind: "put", k: k, a: bigValue(i, ckpt)},
					op{kind: "timer", k: k, stamp: int64(100*ckpt + i)})
			case 1:
				// The key's timer of the checkpoint before goes.
				out = append(out, op{kind: "append", k: k, a: fmt.Sprintf("e%d.%d", i, ckpt)},
					op{kind: "mput", k: k, a: "x", b: fmt.Sprintf("x%d.%d", i, ckpt)},
					op{kind: "untimer", k: k, stamp: int64(100*(ckpt-1) + i)})
			case 2:
				out = append(out, op{kind: "add", k: k, n: int64(ckpt)}, op{kind: "mdel", k: k, a: "y"})
			}
		}
	}
	return out
}

// bigValue is a value of 6 KiB that no block compression shrinks much
// (hex of a hash chain), so that files span several 4 KiB blocks.
func bigValue(i, ckpt int) string {
	var b strings.Builder
	sum := sha256.Sum256([]byte(fmt.Sprintf("value-%d-%d", i, ckpt)))
	for b.Len() < 6<<10 {
		b.WriteString(hex.EncodeToString(sum[:]))
		sum = sha256.Sum256(sum[:])
	}
	return b.String()
}

// modelAt is the state at checkpoint ckpt (0: empty).
func modelAt(ckpt int) *model {
	m := newModel()
	for c := 1; c <= ckpt; c++ {
		for _, o := range writes(c) {
			m.apply(o)
		}
	}
	return m
}

func (m *model) apply(o op) {
	switch o.kind {
	case "put":
		m.values[o.k] = o.a
	case "del":
		delete(m.values, o.k)
	case "append":
		m.lists[o.k] = append(m.lists[o.k], o.a)
	case "mput":
		if m.maps[o.k] == nil {
			m.maps[o.k] = map[string]string{}
		}
		m.maps[o.k][o.a] = o.b
	case "mdel":
		delete(m.maps[o.k], o.a)
	case "add":
		m.aggs[o.k] += o.n
	case "timer":
		m.timers[timer{o.k, o.stamp}] = true
	case "untimer":
		delete(m.timers, timer{o.k, o.stamp})
	}
}

// applyTo runs the writes of checkpoint ckpt that fall into kg on b.
func applyTo(b backend.Backend, ckpt int, kg backend.KeyGroupRange) error {
	for _, o := range writes(ckpt) {
		if !kg.Contains(o.k.kg) {
			continue
		}
		var err error
		k := o.k.bk()
		switch o.kind {
		case "put":
			err = b.Put("v", k, []byte(o.a))
		case "del":
			err = b.Delete("v", k)
		case "append":
			err = b.ListAppend("l", k, []byte(o.a))
		case "mput":
			err = b.MapPut("m", k, []byte(o.a), []byte(o.b))
		case "mdel":
			err = b.MapRemove("m", k, []byte(o.a))
		case "add":
			err = b.AggregateAdd("a", k, backend.Int64(o.n))
		case "timer":
			err = b.RegisterTimer("t", backend.Timer{KeyGroup: k.KeyGroup, Key: k.Key, Timestamp: o.stamp})
		case "untimer":
			err = b.DeleteTimer("t", backend.Timer{KeyGroup: k.KeyGroup, Key: k.Key, Timestamp: o.stamp})
		}
		if err != nil {
			return fmt.Errorf("%s %v: %w", o.kind, o.k, err)
		}
	}
	return nil
}

// check compares b, which holds key groups kg, with m restricted to kg,
// field by field: every state of every model key (keys outside kg must be
// refused by b), then every timer (polled, so b's timers are gone after).
func check(b backend.Backend, m *model, kg backend.KeyGroupRange) error {
	for i := range numKeys {
		k := keyOf(i)
		if !kg.Contains(k.kg) {
			continue
		}
		bk := k.bk()
		v, ok, err := b.Get("v", bk)
		if err != nil {
			return fmt.Errorf("get v %v: %w", k, err)
		}
		if want, wok := m.values[k]; ok != wok || string(v) != want {
			return fmt.Errorf("value of %v: %q (found %v), model %q (found %v)", k, v, ok, want, wok)
		}
		l, err := b.ListGet("l", bk)
		if err != nil {
			return fmt.Errorf("list l %v: %w", k, err)
		}
		if got, want := strs(l), m.lists[k]; !slices.Equal(got, want) {
			return fmt.Errorf("list of %v: %q, model %q", k, got, want)
		}
		entries, more, err := b.MapIterate("m", bk, nil, 0)
		if err != nil || more {
			return fmt.Errorf("map m %v: more %v, %v", k, more, err)
		}
		got := map[string]string{}
		for _, e := range entries {
			got[string(e.UserKey)] = string(e.Value)
		}
		want := m.maps[k]
		if len(got) != len(want) {
			return fmt.Errorf("map of %v: %v, model %v", k, got, want)
		}
		for uk, v := range want {
			if got[uk] != v {
				return fmt.Errorf("map of %v: %v, model %v", k, got, want)
			}
		}
		n, ok, err := b.AggregateGet("a", bk)
		if err != nil {
			return fmt.Errorf("aggregate a %v: %w", k, err)
		}
		if wantN, wok := m.aggs[k]; ok != wok || n.Int != wantN {
			return fmt.Errorf("aggregate of %v: %d (found %v), model %d (found %v)", k, n.Int, ok, wantN, wok)
		}
	}
	ts, err := b.PollTimers("t", math.MaxInt64, 0)
	if err != nil {
		return fmt.Errorf("poll timers: %w", err)
	}
	var want []timer
	for t := range m.timers {
		if kg.Contains(t.k.kg) {
			want = append(want, t)
		}
	}
	sort.Slice(want, func(i, j int) bool {
		a, b := want[i], want[j]
		if a.ts != b.ts {
			return a.ts < b.ts
		}
		if a.k.kg != b.k.kg {
			return a.k.kg < b.k.kg
		}
		return a.k.key < b.k.key
	})
	if len(ts) != len(want) {
		return fmt.Errorf("%d timers, model %d", len(ts), len(want))
	}
	for i, t := range ts {
		w := want[i]
		if t.Timestamp != w.ts || t.KeyGroup != w.k.kg || !bytes.Equal(t.Key, []byte(w.k.key)) || len(t.Namespace) != 0 {
			return fmt.Errorf("timer %d: %+v, model %+v", i, t, w)
		}
	}
	return nil
}

func strs(bs [][]byte) []string {
	var out []string
	for _, b := range bs {
		out = append(out, string(b))
	}
	return out
}

// Operator state: each subtask sets a split list and a union list at each
// checkpoint.
const (
	splitList = "offsets"
	unionList = "bcast"
)

func splitElem(sub, ckpt int) string { return fmt.Sprintf("s%d.%d", sub, ckpt) }
func unionElem(sub, ckpt int) string { return fmt.Sprintf("u%d.%d", sub, ckpt) }

// setOperatorState sets subtask sub's operator lists for checkpoint ckpt.
func setOperatorState(in *daemon.Instance, sub, ckpt int) error {
	if err := in.OperatorSet(splitList, backend.OperatorSplit, [][]byte{[]byte(splitElem(sub, ckpt))}); err != nil {
		return err
	}
	return in.OperatorSet(unionList, backend.OperatorUnion, [][]byte{[]byte(unionElem(sub, ckpt))})
}

// checkOperatorState compares the restored operator lists of subtask sub
// of parallelism par with what checkpoint ckpt holds: the union list of
// every old subtask everywhere; the split list of its own at the old
// parallelism, all of them at parallelism 1 (a rescale deals split
// elements out, which rescale's tests cover).
func checkOperatorState(in *daemon.Instance, sub, par, ckpt int) error {
	var union []string
	for s := range oldPar {
		union = append(union, unionElem(s, ckpt))
	}
	if err := checkList(in, unionList, union); err != nil {
		return err
	}
	switch par {
	case oldPar:
		return checkList(in, splitList, []string{splitElem(sub, ckpt)})
	case 1:
		var all []string
		for s := range oldPar {
			all = append(all, splitElem(s, ckpt))
		}
		return checkList(in, splitList, all)
	}
	return nil
}

func checkList(in *daemon.Instance, name string, want []string) error {
	l, found, err := in.OperatorGet(name)
	if err != nil {
		return fmt.Errorf("operator list %s: %w", name, err)
	}
	if got := strs(l.Elements); !found || !slices.Equal(got, want) {
		return fmt.Errorf("operator list %s: %q (found %v), model %q", name, got, found, want)
	}
	return nil
}
