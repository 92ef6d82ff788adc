package changelog_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/backendtest"
	"github.com/statedhq/stated/dstl"
	"github.com/statedhq/stated/dstl/changelog"
	"github.com/statedhq/stated/tiered/memstore"
)

const propMaxP = 16

var propStates = []backend.StateDescriptor{
	{Name: "v", Kind: backend.KindValue},
	{Name: "vt", Kind: backend.KindValue, TTL: 100 * time.Millisecond, TTLUpdate: backend.TTLOnReadAndWrite},
	{Name: "l", Kind: backend.KindList, TTL: 100 * time.Millisecond, TTLUpdate: backend.TTLOnReadAndWrite},
	{Name: "m", Kind: backend.KindMap},
	{Name: "a", Kind: backend.KindAggregate, Aggregate: backend.AggSum, Number: backend.NumInt64},
	{Name: "t", Kind: backend.KindTimers},
}

var propTask = backend.TaskID{Job: "job1", Operator: "op", Subtask: 0}

// world is one property run: a checkpoint store, a shared log writer, a
// clock, and the opener of one inner kind.
type world struct {
	t     *rapid.T
	tb    testing.TB
	kind  backend.Kind
	store *memstore.Store
	ls    dstl.LogStore
	w     *dstl.Writer
	clock *backendtest.Clock
	ids   uint64
}

func newWorld(t *rapid.T, tb testing.TB, kind backend.Kind) *world {
	ls := dstl.TieredLogStore{Store: memstore.New()}
	// Small segments and blocks so that truncation releases segments and a
	// rescale replay filters inside blocks.
	w, err := dstl.NewWriter(ls, dstl.Options{FlushDelay: time.Millisecond, BlockSize: 256, FlushSize: 2048, PreemptiveFlushSize: 1024})
	if err != nil {
		t.Fatalf("writer: %v", err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return &world{t: t, tb: tb, kind: kind, store: memstore.New(), ls: ls, w: w, clock: backendtest.NewClock()}
}

func (wd *world) open(r backend.KeyGroupRange, subtask int, restore ...*backend.Handle) *changelog.Backend {
	task := propTask
	task.Subtask = subtask
	b, err := changelog.Open(backend.Options{
		Task: task, KeyGroups: r, MaxParallelism: propMaxP, States: propStates,
		Store: wd.store, Clock: wd.clock.Now, Restore: restore,
	}, changelog.Options{
		OpenInner: func(o backend.Options) (backend.Backend, error) { return inners[wd.kind](wd.tb, o) },
		Writer:    wd.w, Log: wd.ls,
	})
	if err != nil {
		wd.t.Fatalf("open %s from %d handles: %v", r, len(restore), err)
	}
	wd.t.Cleanup(func() { _ = b.Close() })
	return b
}

func (wd *world) checkpoint(b *changelog.Backend) *backend.Handle {
	wd.ids++
	p, err := b.Snapshot(context.Background(), wd.ids)
	if err != nil {
		wd.t.Fatalf("snapshot %d: %v", wd.ids, err)
	}
	h, err := p.Run(context.Background())
	if err != nil {
		wd.t.Fatalf("snapshot %d: run: %v", wd.ids, err)
	}
	return h
}

// domain of keys: few, so that ops hit the same entries.
func drawKey(t *rapid.T, r backend.KeyGroupRange) backend.Key {
	return backend.Key{
		KeyGroup: rapid.IntRange(r.Start, r.End).Draw(t, "kg"),
		Key:      []byte{byte('a' + rapid.IntRange(0, 2).Draw(t, "key"))},
	}
}

// op applies one random write or refreshing read to b and m.
func op(t *rapid.T, b backend.Backend, m *backendtest.Model, r backend.KeyGroupRange, now int64) {
	k := drawKey(t, r)
	v := []byte(fmt.Sprint(rapid.IntRange(0, 99).Draw(t, "v")))
	var err error
	switch rapid.IntRange(0, 11).Draw(t, "op") {
	case 0:
		err = b.Put("v", k, v)
		m.Put("v", k, v, now)
	case 1:
		err = b.Put("vt", k, v)
		m.Put("vt", k, v, now)
	case 2:
		got, ok, e := b.Get("vt", k)
		want, wok := m.Get("vt", k, now)
		err = e
		if e == nil && (ok != wok || string(got) != string(want)) {
			t.Fatalf("get vt %v: got %q %v, want %q %v", k, got, ok, want, wok)
		}
	case 3:
		err = b.ListAppend("l", k, v, v)
		m.ListAppend("l", k, [][]byte{v, v}, now)
	case 4:
		got, e := b.ListGet("l", k)
		want := m.ListGet("l", k, now)
		err = e
		if e == nil && fmt.Sprint(got) != fmt.Sprint(want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("list l %v: got %q, want %q", k, got, want)
		}
	case 5:
		err = b.MapPut("m", k, v[:1], v)
		m.MapPut("m", k, v[:1], v, now)
	case 6:
		err = b.MapRemove("m", k, v[:1])
		m.MapRemove("m", k, v[:1])
	case 7:
		err = b.AggregateAdd("a", k, backend.Int64(int64(len(v))))
		m.AggregateAdd("a", k, backend.Int64(int64(len(v))), now)
	case 8:
		tm := backend.Timer{KeyGroup: k.KeyGroup, Key: k.Key, Timestamp: int64(v[0] - '0')}
		err = b.RegisterTimer("t", tm)
		m.RegisterTimer("t", tm)
	case 9:
		got, e := b.PollTimers("t", 4, 2)
		want := m.PollTimers("t", 4, 2)
		err = e
		if e == nil && fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("poll: got %v, want %v", got, want)
		}
	case 10:
		err = b.Delete("v", k)
		m.Delete("v", k)
	case 11:
		g, ok := b.(backend.Grouper)
		if !ok {
			t.Fatalf("%T is not a Grouper", b)
		}
		err = g.Group(func(w backend.GroupWriter) {
			_ = w.Put("v", k, v)
			_ = w.MapPut("m", k, v[:1], v)
		})
		m.Put("v", k, v, now)
		m.MapPut("m", k, v[:1], v, now)
	}
	if err != nil {
		t.Fatalf("op on %v: %v", k, err)
	}
}

// compare reads every entry of range r from b and m (reads refresh both
// alike) and drains the timers.
func compare(t *rapid.T, b backend.Backend, m *backendtest.Model, r backend.KeyGroupRange, now int64, what string) {
	for kg := r.Start; kg <= r.End; kg++ {
		for c := byte('a'); c <= 'c'; c++ {
			k := backend.Key{KeyGroup: kg, Key: []byte{c}}
			for _, s := range []string{"v", "vt"} {
				got, ok, err := b.Get(s, k)
				want, wok := m.Get(s, k, now)
				if err != nil || ok != wok || string(got) != string(want) {
					t.Fatalf("%s: get %s %v: got %q %v %v, want %q %v", what, s, k, got, ok, err, want, wok)
				}
			}
			gl, err := b.ListGet("l", k)
			wl := m.ListGet("l", k, now)
			if err != nil || (fmt.Sprint(gl) != fmt.Sprint(wl) && len(gl)+len(wl) > 0) {
				t.Fatalf("%s: list %v: got %q %v, want %q", what, k, gl, err, wl)
			}
			ge, _, err := b.MapIterate("m", k, nil, 0)
			we, _ := m.MapIterate("m", k, nil, 0, now)
			if err != nil || (!reflect.DeepEqual(ge, we) && len(ge)+len(we) > 0) {
				t.Fatalf("%s: map %v: got %v %v, want %v", what, k, ge, err, we)
			}
			gn, gok, err := b.AggregateGet("a", k)
			wn, wok := m.AggregateGet("a", k, now)
			if err != nil || gok != wok || (gok && gn != wn) {
				t.Fatalf("%s: aggregate %v: got %v %v %v, want %v %v", what, k, gn, gok, err, wn, wok)
			}
		}
	}
	gt, err := b.PollTimers("t", 1<<62, 0)
	wt := m.PollTimers("t", 1<<62, 0)
	if err != nil || fmt.Sprint(gt) != fmt.Sprint(wt) {
		t.Fatalf("%s: timers: got %v %v, want %v", what, gt, err, wt)
	}
}

type cp struct {
	h *backend.Handle
	m *backendtest.Model
}

// TestProperty: random ops, clock moves, checkpoints, materializations,
// confirmations, savepoints and restores (into the whole range, a
// sub-range, and split in two then merged back) match the model.
func TestProperty(t *testing.T) {
	for _, kind := range []backend.Kind{backend.KindHeap, backend.KindLSM} {
		t.Run(string(kind), func(tt *testing.T) {
			rapid.Check(tt, func(t *rapid.T) {
				wd := newWorld(t, tt, kind)
				full := backend.KeyGroupRange{Start: 0, End: propMaxP - 1}
				b := wd.open(full, 0)
				m := backendtest.NewModel(propStates...)
				var cps []cp
				t.Repeat(map[string]func(*rapid.T){
					"ops": func(t *rapid.T) {
						for i := rapid.IntRange(1, 20).Draw(t, "n"); i > 0; i-- {
							op(t, b, m, full, wd.clock.Ms())
						}
					},
					"clock": func(t *rapid.T) {
						wd.clock.Advance(time.Duration(rapid.IntRange(1, 80).Draw(t, "ms")) * time.Millisecond)
					},
					"checkpoint": func(t *rapid.T) {
						cps = append(cps, cp{wd.checkpoint(b), m.Clone()})
					},
					"materialize": func(t *rapid.T) {
						if err := b.Materialize(context.Background()); err != nil {
							t.Fatalf("materialize: %v", err)
						}
					},
					"complete": func(t *rapid.T) {
						if len(cps) == 0 {
							t.Skip("no checkpoint")
						}
						b.NotifyCheckpointComplete(cps[len(cps)-1].h.CheckpointID)
					},
					"savepoint": func(t *rapid.T) {
						wd.ids++
						p, err := b.CanonicalSnapshot(context.Background(), wd.ids, memstore.New(), "sp")
						if err != nil {
							t.Fatalf("savepoint: %v", err)
						}
						if _, err := p.Run(context.Background()); err != nil {
							t.Fatalf("savepoint: run: %v", err)
						}
					},
					"restore": func(t *rapid.T) {
						if len(cps) == 0 {
							t.Skip("no checkpoint")
						}
						c := cps[rapid.IntRange(0, len(cps)-1).Draw(t, "cp")]
						now := wd.clock.Ms()
						s := rapid.IntRange(0, propMaxP-2).Draw(t, "split")
						lo, hi := backend.KeyGroupRange{Start: 0, End: s}, backend.KeyGroupRange{Start: s + 1, End: propMaxP - 1}
						switch rapid.IntRange(0, 2).Draw(t, "how") {
						case 0: // fail over: the restored instance goes on
							nb := wd.open(full, 0, c.h)
							_ = b.Close()
							b, m = nb, c.m.Clone()
							cps = nil
						case 1: // split into two subtasks, check both
							compare(t, wd.open(lo, 0, c.h), c.m.Restrict(lo), lo, now, "lower half")
							compare(t, wd.open(hi, 1, c.h), c.m.Restrict(hi), hi, now, "upper half")
						case 2: // split, write, checkpoint both, merge back
							mlo, mhi := c.m.Restrict(lo), c.m.Restrict(hi)
							blo, bhi := wd.open(lo, 0, c.h), wd.open(hi, 1, c.h)
							for i := 0; i < 10; i++ {
								op(t, blo, mlo, lo, now)
								op(t, bhi, mhi, hi, now)
							}
							hlo := wd.checkpoint(blo)
							if rapid.Bool().Draw(t, "materialize lower") {
								if err := blo.Materialize(context.Background()); err != nil {
									t.Fatalf("materialize: %v", err)
								}
								op(t, blo, mlo, lo, now)
								hlo = wd.checkpoint(blo)
							}
							hhi := wd.checkpoint(bhi)
							merged := backendtest.Union([]*backendtest.Model{mlo, mhi}, []backend.KeyGroupRange{lo, hi})
							compare(t, wd.open(full, 0, hhi, hlo), merged, full, now, "merged back")
						}
					},
				})
			})
		})
	}
}
