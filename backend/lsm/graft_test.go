package lsm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"pgregory.net/rapid"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/internal/kvstate"
	"github.com/statedhq/stated/tiered/memstore"
)

// graftWorld is a job of lsm instances on an in-memory file system whose
// stores take random shapes: flushes, partial compactions (some under a
// Pebble snapshot, so tables keep several versions of a key), range
// deletions across key groups, merges.
type graftWorld struct {
	t     *rapid.T
	store *memstore.Store
	maxP  int
	n     int
	id    uint64
}

func (w *graftWorld) open(sub int, r backend.KeyGroupRange, restore []*backend.Handle, noClaim bool) *Backend {
	return w.openWith(sub, r, restore, noClaim, false)
}

func (w *graftWorld) openWith(sub int, r backend.KeyGroupRange, restore []*backend.Handle, noClaim, noGraft bool) *Backend {
	w.n++
	b, err := Open(backend.Options{Task: backend.TaskID{Job: "job", Operator: "op", Subtask: sub}, KeyGroups: r,
		MaxParallelism: w.maxP, States: testStates, Store: w.store, Restore: restore, NoClaim: noClaim,
		Clock: func() time.Time { return time.Unix(1_700_000_000, 0) }},
		Options{Dir: fmt.Sprintf("/g%d", w.n), FS: vfs.NewMem(), MemTableSize: 64 << 10, TargetFileSize: 64 << 10,
			CacheSize: 1 << 20, Logger: silentLogger{}, NoGraft: noGraft})
	if err != nil {
		w.t.Fatalf("open %s from %d handle(s): %v", r, len(restore), err)
	}
	return b
}

// churn applies random operations to b, with flushes and compactions in
// between.
func (w *graftWorld) churn(b *Backend, label string) {
	ctx := context.Background()
	r := b.Info().KeyGroups
	kg := func() int { return rapid.IntRange(r.Start, r.End).Draw(w.t, "kg") }
	rounds := rapid.IntRange(1, 4).Draw(w.t, label+" rounds")
	for round := 0; round < rounds; round++ {
		n := rapid.IntRange(0, 150).Draw(w.t, "ops")
		for i := 0; i < n; i++ {
			k := key(kg(), fmt.Sprint(rapid.IntRange(0, 20).Draw(w.t, "k")))
			var err error
			switch rapid.IntRange(0, 5).Draw(w.t, "op") {
			case 0, 1:
				err = b.Put("v", k, bytes.Repeat([]byte{byte(i)}, rapid.IntRange(1, 300).Draw(w.t, "len")))
			case 2:
				err = b.Delete("v", k)
			case 3:
				err = b.ListAppend("l", k, []byte{byte(i), byte(round)})
			case 4:
				err = b.MapPut("m", k, []byte{byte(i % 3)}, []byte("x"))
			case 5:
				err = b.Delete("m", k) // a range deletion
			}
			if err != nil {
				w.t.Fatal(err)
			}
		}
		switch rapid.IntRange(0, 4).Draw(w.t, label+" shape") {
		case 0:
			must(w.t, b.DB().Flush())
		case 1, 2:
			// Compact a random span, sometimes under a snapshot so that
			// older versions survive in the output.
			lo, hi := kg(), kg()
			if lo > hi {
				lo, hi = hi, lo
			}
			var snap *pebble.Snapshot
			if rapid.Bool().Draw(w.t, "snapshot") {
				snap = b.DB().NewSnapshot()
			}
			must(w.t, b.DB().Flush())
			must(w.t, b.DB().Compact(ctx, kvstate.KeyGroupPrefix(lo), kvstate.KeyGroupPrefix(hi+1), false))
			if snap != nil {
				must(w.t, snap.Close())
			}
		case 3:
			// A range deletion across key groups (kvstate never writes
			// one, but a handle may hold anything a store can).
			lo, hi := kg(), kg()
			if lo > hi {
				lo, hi = hi, lo
			}
			start := append(kvstate.KeyGroupPrefix(lo), byte(rapid.IntRange(0, 255).Draw(w.t, "cut")))
			must(w.t, b.DB().DeleteRange(start, kvstate.KeyGroupPrefix(hi+1), pebble.NoSync))
		}
	}
}

func (w *graftWorld) checkpoint(b *Backend) *backend.Handle {
	w.id++
	p, err := b.Snapshot(context.Background(), w.id)
	if err != nil {
		w.t.Fatal(err)
	}
	h, err := p.Run(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	b.NotifyCheckpointComplete(w.id)
	return h
}

func dumpOf(t rapid.TB, b *Backend) map[string]string {
	out := map[string]string{}
	must(t, engine{b.db}.Scan(nil, nil, func(k, v []byte) (bool, error) {
		out[string(k)] = string(v)
		return true, nil
	}))
	return out
}

func sameEntries(t rapid.TB, what string, got, want map[string]string) {
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Fatalf("%s: entry %x = %x (present %v), want %x", what, k, g, ok, v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Fatalf("%s: entry %x = %x should not be there", what, k, v)
		}
	}
}

// generation restores every subtask at parallelism p from hs (each new
// subtask from every handle that overlaps it, in a random order), checks
// each against want, churns it, checks that a full compaction and a plain
// restore of its checkpoint change nothing, and returns the checkpoints
// and the state they hold.
func (w *graftWorld) generation(p int, hs []*backend.Handle, want map[string]string, label string) ([]*backend.Handle, map[string]string) {
	ctx := context.Background()
	next := map[string]string{}
	var out []*backend.Handle
	for i := 0; i < p; i++ {
		r := backend.KeyGroupRangeForOperator(w.maxP, p, i)
		var srcs []*backend.Handle
		for _, h := range hs {
			if !h.KeyGroups.Intersect(r).Empty() {
				srcs = append(srcs, h)
			}
		}
		srcs = rapid.Permutation(srcs).Draw(w.t, "order")
		noClaim := rapid.Bool().Draw(w.t, "noClaim")
		what := fmt.Sprintf("%s: subtask %d of %d %s from %d handle(s), noClaim %v", label, i, p, r, len(srcs), noClaim)
		b := w.open(i, r, srcs, noClaim)
		exp := map[string]string{}
		for k, v := range want {
			if kg := int(binary.BigEndian.Uint16([]byte(k))); r.Contains(kg) {
				exp[k] = v
			}
		}
		sameEntries(w.t, what, dumpOf(w.t, b), exp)
		if rs := b.RestoreStats(); len(srcs) > 1 && (rs.Graft == 0 || rs.BytesCopied != 0) {
			w.t.Fatalf("%s: stats %+v: the other handles were not grafted", what, rs)
		}
		if len(srcs) > 1 {
			// The copying path (Options.NoGraft) restores the same state.
			c := w.openWith(i, r, srcs, noClaim, true)
			sameEntries(w.t, what+", copied instead of grafted", dumpOf(w.t, c), exp)
			if rs := c.RestoreStats(); rs.Graft != 0 {
				w.t.Fatalf("%s: NoGraft: stats %+v: grafted", what, rs)
			}
			must(w.t, c.Close())
		}
		if noClaim {
			levels, err := b.DB().SSTables()
			must(w.t, err)
			for _, l := range levels {
				for _, tb := range l {
					if tb.Virtual {
						// Allowed only over a backing file of in-range keys.
						kb, ok, err := sstKeyGroupBounds(ctx, b.lo.FS, b.lo.FS.PathJoin(b.dbDir, fmt.Sprintf("%06d.sst", tb.BackingSSTNum)), b.pebbleOptions(true).MakeReaderOptions())
						must(w.t, err)
						if ok && !r.Covers(kb) {
							w.t.Fatalf("%s: virtual table %s over a backing file of key groups %s", what, tb.FileNum, kb)
						}
					}
				}
			}
		}
		w.churn(b, "new")
		d := dumpOf(w.t, b)
		must(w.t, b.DB().Compact(ctx, []byte{}, []byte{0xff}, false))
		sameEntries(w.t, what+", after a full compaction", dumpOf(w.t, b), d)
		h := w.checkpoint(b)
		must(w.t, b.Close())
		again := w.open(i, r, []*backend.Handle{h}, false)
		sameEntries(w.t, what+", restored again", dumpOf(w.t, again), d)
		must(w.t, again.Close())
		for k, v := range d {
			next[k] = v
		}
		out = append(out, h)
	}
	return out, next
}

// TestGraftedRescaleMatchesSources: rescaling stores of random shapes
// (several generations, so grafted stores are grafted again) gives every
// new subtask exactly the entries of its key groups, which survive writes,
// full compactions (where grafted tables of two sequence-number histories
// meet) and checkpoint round trips.
func TestGraftedRescaleMatchesSources(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		w := &graftWorld{t: rt, store: memstore.New(), maxP: rapid.SampledFrom([]int{8, 16}).Draw(rt, "maxP")}
		oldP := rapid.IntRange(1, 3).Draw(rt, "oldP")
		var hs []*backend.Handle
		want := map[string]string{}
		for i := 0; i < oldP; i++ {
			b := w.open(i, backend.KeyGroupRangeForOperator(w.maxP, oldP, i), nil, false)
			w.churn(b, "old")
			for k, v := range dumpOf(rt, b) {
				want[k] = v
			}
			hs = append(hs, w.checkpoint(b))
			must(rt, b.Close())
		}
		for gen := 0; gen < 2; gen++ {
			p := rapid.IntRange(1, 4).Draw(rt, "p")
			hs, want = w.generation(p, hs, want, fmt.Sprintf("generation %d", gen))
		}
	})
}

// TestRewriteWhenGraftImpossible: another handle whose store holds a range
// key (kvstate writes none, but a handle may hold anything a store can)
// is not grafted; its key groups' point entries are rewritten into SSTs
// and ingested.
func TestRewriteWhenGraftImpossible(t *testing.T) {
	e := newEnv(t)
	low := backend.KeyGroupRange{Start: 0, End: 63}
	high := backend.KeyGroupRange{Start: 64, End: 127}
	a := e.open(low, nil)
	fill(t, a, low, 3000, "a")
	must(t, a.DB().RangeKeySet(kvstate.KeyGroupPrefix(10), kvstate.KeyGroupPrefix(60), nil, []byte("rk"), pebble.NoSync))
	ha := checkpoint(t, a, 1)
	b := e.open(high, func(o *backend.Options, _ *Options) { o.Task.Subtask = 1 })
	fill(t, b, high, 3000, "b")
	hb := checkpoint(t, b, 1)
	want := dump(t, a)
	for k, v := range dump(t, b) {
		want[k] = v
	}
	r := backend.KeyGroupRange{Start: 20, End: 120}
	c := e.open(r, func(o *backend.Options, _ *Options) { o.Restore = []*backend.Handle{ha, hb} })
	sameDump(t, dump(t, c), restrict(t, want, r))
	if rs := c.RestoreStats(); rs.Graft != 0 || rs.BytesCopied == 0 {
		t.Fatalf("stats %+v: want the handle with a range key rewritten, not grafted", rs)
	}
}

// TestGraftRefusesStoresThatShareKeys: a handle whose store holds keys
// outside its key groups (forged, or written by a bug) would make the
// grafted store unsound; the restore refuses it instead.
func TestGraftRefusesStoresThatShareKeys(t *testing.T) {
	e := newEnv(t)
	x := e.open(full(), nil)
	fill(t, x, full(), 500, "x") // one SST over every key group
	hx := checkpoint(t, x, 1)
	forged := *hx
	forged.KeyGroups = backend.KeyGroupRange{Start: 64, End: 127}
	forged.Task.Subtask = 1
	low := backend.KeyGroupRange{Start: 0, End: 63}
	y := e.open(low, func(o *backend.Options, _ *Options) { o.Task.Subtask = 2 })
	fill(t, y, low, 500, "y")
	hy := checkpoint(t, y, 1)
	e.n++
	_, err := Open(backend.Options{Task: testTask, KeyGroups: backend.KeyGroupRange{Start: 32, End: 100}, States: testStates,
		Store: e.store, Restore: []*backend.Handle{hy, &forged}}, Options{Dir: fmt.Sprintf("%s/share-%d", e.root, e.n), Logger: silentLogger{}})
	if !errors.Is(err, backend.ErrCorrupt) || !strings.Contains(err.Error(), "share keys") {
		t.Fatalf("restore from stores that share keys: %v, want a corruption error", err)
	}
}

// TestGraftMatchesPebble is the guard of graft's coupling to Pebble's
// MANIFEST format (the version in go.mod): the self-check that restores
// run before their first graft must pass. It grafts a physical and a
// virtual table, has Pebble open the store, compares the tables Pebble
// lists with what graft wrote, reads every entry back, and compares
// graft's encoding of each table with the bytes of the MANIFEST snapshot
// Pebble writes at open. (Pebble's manifest tool, pebble/v2/tool, would
// add modules to go.mod that nothing else needs.)
func TestGraftMatchesPebble(t *testing.T) {
	p, err := probeGraft()
	if err != nil {
		t.Fatalf("graft's MANIFEST edit does not match Pebble: %v", err)
	}
	physical, virtual := 0, 0
	for _, g := range p.tables {
		if g.info.Virtual {
			virtual++
		} else {
			physical++
		}
	}
	if physical == 0 || virtual == 0 {
		t.Fatalf("the probe grafted %d physical and %d virtual tables; it must cover both encodings", physical, virtual)
	}
	if err := graftCheck(); err != nil {
		t.Fatalf("graftCheck: %v", err)
	}
}

// recordingLogger keeps Pebble's error lines (and the warnings of lsm).
type recordingLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *recordingLogger) Infof(string, ...any) {}
func (l *recordingLogger) Errorf(f string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(f, args...))
}
func (l *recordingLogger) Fatalf(f string, args ...any) { quietLogger{}.Fatalf(f, args...) }

func (l *recordingLogger) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// TestRestoreCopiesWhenGraftUnusable: with Options.NoGraft, or when the
// self-check finds that graft's edit does not match Pebble, a restore from
// several handles copies the other handles' key groups instead of
// grafting (logging a warning in the second case), and ends with the same
// entries as a grafting restore.
func TestRestoreCopiesWhenGraftUnusable(t *testing.T) {
	e := newEnv(t)
	low := backend.KeyGroupRange{Start: 0, End: 63}
	high := backend.KeyGroupRange{Start: 64, End: 127}
	a := e.open(low, nil)
	fill(t, a, low, 3000, "a")
	ha := checkpoint(t, a, 1)
	b := e.open(high, func(o *backend.Options, _ *Options) { o.Task.Subtask = 1 })
	fill(t, b, high, 3000, "b")
	hb := checkpoint(t, b, 1)
	all := dump(t, a)
	for k, v := range dump(t, b) {
		all[k] = v
	}
	r := backend.KeyGroupRange{Start: 20, End: 120}
	restore := func(noGraft bool, logger pebble.Logger) *Backend {
		return e.open(r, func(o *backend.Options, lo *Options) {
			o.Restore = []*backend.Handle{ha, hb}
			lo.NoGraft, lo.Logger = noGraft, logger
		})
	}
	grafted := restore(false, silentLogger{})
	if rs := grafted.RestoreStats(); rs.Graft == 0 || rs.BytesCopied != 0 {
		t.Fatalf("stats %+v: want the other handle grafted", rs)
	}
	want := restrict(t, all, r)
	sameDump(t, dump(t, grafted), want)

	copied := restore(true, silentLogger{})
	if rs := copied.RestoreStats(); rs.Graft != 0 || rs.BytesCopied == 0 {
		t.Fatalf("NoGraft: stats %+v: want the other handle copied", rs)
	}
	sameDump(t, dump(t, copied), want)

	saved := graftCheck
	graftCheck = func() error { return errors.New("probe mismatch") }
	graftWarning = sync.Once{}
	t.Cleanup(func() { graftCheck, graftWarning = saved, sync.Once{} })
	log := &recordingLogger{}
	fallback := restore(false, log)
	if rs := fallback.RestoreStats(); rs.Graft != 0 || rs.BytesCopied == 0 {
		t.Fatalf("failed self-check: stats %+v: want the other handle copied", rs)
	}
	sameDump(t, dump(t, fallback), want)
	if got := log.text(); !strings.Contains(got, "copy instead of grafting") || !strings.Contains(got, "probe mismatch") {
		t.Fatalf("failed self-check: logged %q, want a warning with the cause", got)
	}
}
