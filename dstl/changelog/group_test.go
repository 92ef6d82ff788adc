package changelog_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/heap"
	"github.com/statedhq/stated/dstl"
	"github.com/statedhq/stated/dstl/changelog"
	"github.com/statedhq/stated/tiered/memstore"
)

// groupOp is one write of a group, as the api batch path makes them.
type groupOp struct {
	op             changelog.Op
	kg             int
	key, uk, value []byte
	values         [][]byte
	ts             int64
}

func (o groupOp) apply(w backend.GroupWriter) error {
	k := backend.Key{KeyGroup: o.kg, Key: o.key}
	switch o.op {
	case changelog.OpPut:
		return w.Put("v", k, o.value)
	case changelog.OpDelete:
		return w.Delete("v", k)
	case changelog.OpListAppend:
		return w.ListAppend("l", k, o.values...)
	case changelog.OpMapPut:
		return w.MapPut("m", k, o.uk, o.value)
	case changelog.OpMapRemove:
		return w.MapRemove("m", k, o.uk)
	default:
		return w.RegisterTimer("t", backend.Timer{KeyGroup: o.kg, Key: o.key, Timestamp: o.ts})
	}
}

// want is the change the log must hold for o.
func (o groupOp) want(now int64) changelog.Change {
	c := changelog.Change{Op: o.op, Time: now}
	k := backend.Key{KeyGroup: o.kg, Key: o.key, Namespace: []byte{}}
	switch o.op {
	case changelog.OpPut:
		c.State, c.Key, c.Values = "v", k, [][]byte{o.value}
	case changelog.OpDelete:
		c.State, c.Key = "v", k
	case changelog.OpListAppend:
		c.State, c.Key, c.Values = "l", k, o.values
	case changelog.OpMapPut:
		c.State, c.Key, c.UserKey, c.Value = "m", k, o.uk, o.value
	case changelog.OpMapRemove:
		c.State, c.Key, c.UserKey = "m", k, o.uk
	default:
		c.State, c.Timer = "t", backend.Timer{KeyGroup: o.kg, Key: o.key, Namespace: []byte{}, Timestamp: o.ts}
	}
	return c
}

func drawBytes(t *rapid.T, name string, max int) []byte {
	return rapid.SliceOfN(rapid.Byte(), 0, max).Draw(t, name)
}

func drawGroupOp(t *rapid.T) groupOp {
	ops := []changelog.Op{changelog.OpPut, changelog.OpDelete, changelog.OpListAppend, changelog.OpMapPut,
		changelog.OpMapRemove, changelog.OpTimerAdd}
	o := groupOp{op: rapid.SampledFrom(ops).Draw(t, "op"), kg: rapid.IntRange(0, propMaxP-1).Draw(t, "kg"),
		key: drawBytes(t, "key", 20), uk: drawBytes(t, "userKey", 10), value: drawBytes(t, "value", 300),
		ts: rapid.Int64().Draw(t, "ts")}
	for i := rapid.IntRange(1, 4).Draw(t, "values"); i > 0; i-- {
		o.values = append(o.values, drawBytes(t, "listValue", 50))
	}
	return o
}

// TestPropertyGroupLogsWhatWasWritten: random groups of writes, with the
// caller reusing its buffers between writes (as the api batch path may):
// the log holds exactly one record per write, in order, with consecutive
// seqs, each decoding to the write as it was made.
func TestPropertyGroupLogsWhatWasWritten(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		store := memstore.New()
		ls := dstl.TieredLogStore{Store: memstore.New()}
		w, err := dstl.NewWriter(ls, dstl.Options{FlushDelay: time.Millisecond, BlockSize: rapid.IntRange(64, 4096).Draw(rt, "blockSize")})
		if err != nil {
			rt.Fatal(err)
		}
		defer w.Close()
		clock := time.Unix(1700000000, 0)
		b, err := changelog.Open(backend.Options{Task: propTask, KeyGroups: backend.KeyGroupRange{Start: 0, End: propMaxP - 1},
			MaxParallelism: propMaxP, States: propStates, Store: store, Clock: func() time.Time { return clock }},
			changelog.Options{OpenInner: func(o backend.Options) (backend.Backend, error) { return heap.Open(o, heap.Options{Snapshots: store}) },
				Writer: w, Log: ls})
		if err != nil {
			rt.Fatal(err)
		}
		defer b.Close()
		first := b.Stats().LastSeq
		var want []changelog.Change
		for g := rapid.IntRange(1, 8).Draw(rt, "groups"); g > 0; g-- {
			clock = clock.Add(time.Duration(rapid.IntRange(1, 1000).Draw(rt, "ms")) * time.Millisecond)
			ops := rapid.SliceOfN(rapid.Custom(drawGroupOp), 1, 30).Draw(rt, "ops")
			err := b.Group(func(gw backend.GroupWriter) {
				for _, o := range ops {
					// The caller's buffers, overwritten after each write.
					scratch := groupOp{op: o.op, kg: o.kg, ts: o.ts, key: append([]byte{}, o.key...),
						uk: append([]byte{}, o.uk...), value: append([]byte{}, o.value...)}
					for _, v := range o.values {
						scratch.values = append(scratch.values, append([]byte{}, v...))
					}
					if err := scratch.apply(gw); err != nil {
						rt.Fatalf("%v: %v", o.op, err)
					}
					for _, p := range append([][]byte{scratch.key, scratch.uk, scratch.value}, scratch.values...) {
						for i := range p {
							p[i] ^= 0xFF
						}
					}
				}
			})
			if err != nil {
				rt.Fatal(err)
			}
			for _, o := range ops {
				want = append(want, o.want(clock.UnixNano()))
			}
		}
		if got := b.Stats().LastSeq; got != first+uint64(len(want)) {
			rt.Fatalf("last seq %d after %d writes from %d", got, len(want), first)
		}
		h, err := w.Persist(ctx, b.WriterID(), math.MaxUint64)
		if err != nil {
			rt.Fatal(err)
		}
		var got []changelog.Change
		next := first + 1
		err = dstl.Read(ctx, ls, h, dstl.ReadOptions{}, func(r dstl.Record) error {
			if r.Seq <= first {
				return nil
			}
			if r.Seq != next {
				return fmt.Errorf("seq %d, want %d", r.Seq, next)
			}
			next++
			c, err := changelog.DecodeChange(r.Change)
			if err != nil {
				return err
			}
			if r.KeyGroup != c.KeyGroup() {
				return fmt.Errorf("seq %d logged under key group %d, change is of %d", r.Seq, r.KeyGroup, c.KeyGroup())
			}
			got = append(got, *c)
			return nil
		})
		if err != nil {
			rt.Fatal(err)
		}
		if len(got) != len(want) {
			rt.Fatalf("log holds %d changes, want %d", len(got), len(want))
		}
		for i := range want {
			if g, w := fmt.Sprintf("%+v", got[i]), fmt.Sprintf("%+v", want[i]); g != w {
				rt.Fatalf("change %d:\n got %s\nwant %s", i, g, w)
			}
		}
	})
}

// TestGroupRefusedChangeKeepsTheOthers: a change the log refuses in the
// middle of a group (too big for a record) is lost to the log alone; the
// group's other changes are logged in order, and the next checkpoint
// takes a new base that has the lost change.
func TestGroupRefusedChangeKeepsTheOthers(t *testing.T) {
	e := newEnv(t)
	b := e.openHeapForBigChanges(t)
	before := b.Stats()
	big := make([]byte, dstl.MaxChangeSize)
	keys := []backend.Key{{KeyGroup: 1, Key: []byte("a")}, {KeyGroup: 2, Key: []byte("big")}, {KeyGroup: 3, Key: []byte("c")}}
	vals := [][]byte{[]byte("va"), big, []byte("vc")}
	if err := b.Group(func(w backend.GroupWriter) {
		for i, k := range keys {
			if err := w.Put("v", k, vals[i]); err != nil {
				t.Fatal(err)
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	s := b.Stats()
	if s.LastSeq != before.LastSeq+2 || s.LostChanges != before.LostChanges+1 {
		t.Fatalf("stats %+v after a group with one refused change of three (before %+v): want 2 logged, 1 lost", s, before)
	}
	h, l := e.checkpoint(b)
	if l.BaseSeq != s.LastSeq || l.Log != nil {
		t.Fatalf("checkpoint after the refused change: base at %d, log %+v; want a new base at %d and no log", l.BaseSeq, l.Log, s.LastSeq)
	}
	r := e.open(h)
	for i, k := range keys {
		if got, ok, err := r.Get("v", k); err != nil || !ok || len(got) != len(vals[i]) {
			t.Fatalf("restored %v: %d bytes, %v, %v; want %d bytes", k, len(got), ok, err, len(vals[i]))
		}
	}
}

// TestGroupAllocations: logging a group of puts allocates per group, not
// per put: the changes are encoded into a buffer the Backend keeps and
// handed to the Writer in one call. The inner heap backend's own
// allocations are subtracted.
func TestGroupAllocations(t *testing.T) {
	const group = 100
	store := memstore.New()
	opts := backend.Options{Task: propTask, KeyGroups: backend.KeyGroupRange{Start: 0, End: propMaxP - 1},
		MaxParallelism: propMaxP, States: propStates, Store: store}
	plain, err := heap.Open(opts, heap.Options{Snapshots: store})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	ls := dstl.TieredLogStore{Store: memstore.New()}
	// No cut while measuring: the flusher's allocations would count.
	w, err := dstl.NewWriter(ls, dstl.Options{FlushDelay: time.Hour, FlushSize: 256 << 20, PreemptiveFlushSize: 256 << 20,
		MaxBytesInFlight: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	logged, err := changelog.Open(opts, changelog.Options{
		OpenInner: func(o backend.Options) (backend.Backend, error) { return heap.Open(o, heap.Options{Snapshots: store}) },
		Writer:    w, Log: ls})
	if err != nil {
		t.Fatal(err)
	}
	defer logged.Close()
	keys := make([]backend.Key, group)
	for i := range keys {
		keys[i] = backend.Key{KeyGroup: i % propMaxP, Key: []byte(fmt.Sprint("key-", i))}
	}
	value := make([]byte, 100)
	allocs := func(g backend.Grouper) float64 {
		run := func() {
			if err := g.Group(func(w backend.GroupWriter) {
				for _, k := range keys {
					_ = w.Put("v", k, value)
				}
			}); err != nil {
				t.Fatal(err)
			}
		}
		run() // the keys exist, the buffers are grown
		return testing.AllocsPerRun(50, run)
	}
	base, with := allocs(plain), allocs(logged)
	// A few per group (the pinned time, the closure, a raw block's growth
	// now and then); before, each put allocated its change's value slice
	// and each group grew its record list from nothing. The race
	// detector's instrumentation allocates on its own.
	if extra := with - base; extra > 8 && !raceEnabled {
		t.Fatalf("changelog mode adds %.1f allocations per group of %d puts (heap %.1f, changelog %.1f); want at most 8",
			extra, group, base, with)
	}
	t.Logf("allocations per group of %d puts: heap %.1f, changelog %.1f", group, base, with)
}
