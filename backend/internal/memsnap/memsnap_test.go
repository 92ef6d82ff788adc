package memsnap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/internal/memkv"
	"github.com/statedhq/stated/backend/internal/snapfmt"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

var (
	task   = backend.TaskID{Job: "job", Operator: "op", Subtask: 1}
	full   = backend.KeyGroupRange{Start: 0, End: 15}
	states = []backend.StateDescriptor{
		{Name: "v", Kind: backend.KindValue},
		{Name: "vt", Kind: backend.KindValue, TTL: 10 * time.Second},
		{Name: "l", Kind: backend.KindList},
		{Name: "m", Kind: backend.KindMap},
		{Name: "a", Kind: backend.KindAggregate, Aggregate: backend.AggSum, Number: backend.NumInt64},
		{Name: "t", Kind: backend.KindTimers},
	}
)

type world struct {
	store *memstore.Store
	now   time.Time
	mu    sync.Mutex
}

func (w *world) clock() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.now
}

func newWorld() *world { return &world{store: memstore.New(), now: time.UnixMilli(1_700_000_000_000)} }

func (w *world) config(r backend.KeyGroupRange, restore ...*backend.Handle) Config {
	o := backend.Options{Task: task, KeyGroups: r, MaxParallelism: 16, States: states, Store: w.store, Restore: restore, Clock: w.clock}
	o.EnsureDefaults()
	return Config{
		Kind: backend.KindFile, Options: o, Snapshots: w.store,
		RestoreSource: func(*backend.Handle) ([]tiered.Store, string) { return []tiered.Store{w.store}, "" },
	}
}

func (w *world) open(t *testing.T, r backend.KeyGroupRange, restore ...*backend.Handle) *Backend {
	t.Helper()
	cfg := w.config(r, restore...)
	if err := cfg.Options.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func k(kg int, key string) backend.Key { return backend.Key{KeyGroup: kg, Key: []byte(key)} }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// dump is everything an instance holds for the keys fill writes.
func dump(t *testing.T, b *Backend) string {
	t.Helper()
	var sb strings.Builder
	r := b.Info().KeyGroups
	for kg := r.Start; kg <= r.End; kg++ {
		for i := 0; i < 4; i++ {
			key := k(kg, fmt.Sprint("k", i))
			v, ok, err := b.Get("v", key)
			must(t, err)
			vt, okt, err := b.Get("vt", key)
			must(t, err)
			l, err := b.ListGet("l", key)
			must(t, err)
			m, _, err := b.MapIterate("m", key, nil, 0)
			must(t, err)
			a, oka, err := b.AggregateGet("a", key)
			must(t, err)
			fmt.Fprintf(&sb, "%d/%d v=%q,%v vt=%q,%v l=%q m=%v a=%v,%v\n", kg, i, v, ok, vt, okt, l, m, a, oka)
		}
	}
	ts, err := b.PollTimers("t", 1<<62, 0)
	must(t, err)
	fmt.Fprintf(&sb, "timers=%v\n", ts)
	return sb.String()
}

// fill writes round-dependent data into every key group of b's range.
func fill(t *testing.T, b *Backend, round int) {
	t.Helper()
	fillRange(t, b, b.Info().KeyGroups, round)
}

func TestSnapshotWhileWriting(t *testing.T) {
	w := newWorld()
	b := w.open(t, full)
	fill(t, b, 1)
	fill(t, b, 2)
	// The state at the snapshot, seen through a twin instance that gets
	// the same writes (dump polls timers, so b itself is not dumped).
	twin := w.open(t, full)
	fill(t, twin, 1)
	fill(t, twin, 2)
	p, err := b.Snapshot(context.Background(), 7)
	must(t, err)
	// Keep writing, concurrently with Run.
	var wg sync.WaitGroup
	var werr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for kg := 0; kg <= 15 && werr == nil; kg++ {
			for i := 0; i < 4 && werr == nil; i++ {
				key := k(kg, fmt.Sprint("k", i))
				werr = errors.Join(b.Put("v", key, []byte("later")), b.Delete("vt", key),
					b.ListAppend("l", key, []byte("later")), b.MapPut("m", key, []byte("later"), nil),
					b.AggregateAdd("a", key, backend.Int64(1000)), b.Put("v", k(kg, "new"), nil))
			}
		}
	}()
	h, err := p.Run(context.Background())
	must(t, err)
	wg.Wait()
	must(t, werr)
	fill(t, b, 4)
	if h.Backend != backend.KindFile || h.CheckpointID != 7 || h.KeyGroups != full || h.Task != task ||
		len(h.Files) != 1 || h.FullSize != h.Files[0].Size || h.CheckpointedSize != h.FullSize || h.Files[0].Shared {
		t.Fatalf("handle = %+v", h)
	}
	if !reflect.DeepEqual(h.States, b.States()) {
		t.Fatalf("handle states %v", h.States)
	}
	if ok, _ := regexp.MatchString(`^job/chk-7/op-1/state-[0-9a-f]{32}$`, h.Files[0].Path); !ok {
		t.Fatalf("path %s", h.Files[0].Path)
	}
	r := w.open(t, full, h)
	if got, want := dump(t, r), dump(t, twin); got != want {
		t.Fatalf("restored state differs from the state at the snapshot:\n%s\nwant\n%s", got, want)
	}
}

func TestUniquePaths(t *testing.T) {
	w := newWorld()
	b := w.open(t, full)
	seen := map[string]bool{}
	for i := 0; i < 3; i++ {
		p, err := b.Snapshot(context.Background(), 1)
		must(t, err)
		h, err := p.Run(context.Background())
		must(t, err)
		if seen[h.Files[0].Path] {
			t.Fatalf("path %s reused", h.Files[0].Path)
		}
		seen[h.Files[0].Path] = true
	}
}

func TestRestoreSubRangeAndSeveralHandles(t *testing.T) {
	w := newWorld()
	left := w.open(t, backend.KeyGroupRange{Start: 0, End: 7})
	right := w.open(t, backend.KeyGroupRange{Start: 8, End: 15})
	fill(t, left, 1)
	fill(t, right, 2)
	hl, hr := snap(t, left, 1), snap(t, right, 1)

	// Reference: an instance of [4,11] with the same writes.
	sub := backend.KeyGroupRange{Start: 4, End: 11}
	ref := w.open(t, sub)
	fillRange(t, ref, backend.KeyGroupRange{Start: 4, End: 7}, 1)
	fillRange(t, ref, backend.KeyGroupRange{Start: 8, End: 11}, 2)

	// Only the key groups of [4,11] are read: damage the blocks of the
	// others and the restore still succeeds.
	damageOutside(t, w.store, hl, sub)
	damageOutside(t, w.store, hr, sub)
	got := w.open(t, sub, hl, hr)
	if a, b := dump(t, got), dump(t, ref); a != b {
		t.Fatalf("restored\n%s\nwant\n%s", a, b)
	}
	// The whole range cannot be restored from damaged files.
	if _, err := Open(w.config(full, hl, hr)); !errors.Is(err, backend.ErrCorrupt) {
		t.Fatalf("restore over damaged blocks: %v", err)
	}
}

func TestFirstHandleWins(t *testing.T) {
	w := newWorld()
	a := w.open(t, full)
	b := w.open(t, full)
	must(t, a.Put("v", k(3, "x"), []byte("from a")))
	must(t, b.Put("v", k(3, "x"), []byte("from b")))
	must(t, b.Put("v", k(4, "y"), []byte("only b")))
	ha, hb := snap(t, a, 1), snap(t, b, 1)
	r := w.open(t, backend.KeyGroupRange{Start: 3, End: 4}, ha, hb)
	if v, _, _ := r.Get("v", k(3, "x")); string(v) != "from a" {
		t.Fatalf("key group 3 = %q, want the first handle's", v)
	}
	// Key group 4 comes from a too (a covers it, empty): b's entry is not
	// mixed in.
	if v, ok, _ := r.Get("v", k(4, "y")); ok {
		t.Fatalf("key group 4 = %q, want a's (empty) key group", v)
	}
}

// fillRange writes round-dependent data into the key groups of r.
func fillRange(t *testing.T, b *Backend, r backend.KeyGroupRange, round int) {
	t.Helper()
	for kg := r.Start; kg <= r.End; kg++ {
		for i := 0; i < 4; i++ {
			key := k(kg, fmt.Sprint("k", i))
			if (i+round)%3 == 0 {
				must(t, b.Delete("v", key))
			} else {
				must(t, b.Put("v", key, []byte(fmt.Sprint("v", round, kg, i))))
			}
			must(t, b.Put("vt", key, []byte(fmt.Sprint(round))))
			must(t, b.ListAppend("l", key, []byte(fmt.Sprint(round))))
			must(t, b.MapPut("m", key, []byte(fmt.Sprint("u", round%2)), []byte(fmt.Sprint(round))))
			must(t, b.AggregateAdd("a", key, backend.Int64(int64(round))))
			must(t, b.RegisterTimer("t", backend.Timer{KeyGroup: kg, Key: key.Key, Timestamp: int64(round*100 + i)}))
		}
	}
}

// damageOutside flips a byte in every non-empty block of h's file whose key
// group is outside keep.
func damageOutside(t *testing.T, s *memstore.Store, h *backend.Handle, keep backend.KeyGroupRange) {
	t.Helper()
	f := h.Files[0]
	data, err := tiered.ReadAll(context.Background(), s, f.Path, 0)
	must(t, err)
	for i := 0; i < h.KeyGroups.Len(); i++ {
		a, b := f.KeyGroupOffsets[i], f.KeyGroupOffsets[i+1]
		if b > a && !keep.Contains(h.KeyGroups.Start+i) {
			data[a] ^= 0xff
		}
	}
	must(t, tiered.PutBytes(context.Background(), s, f.Path, data))
}

func snap(t *testing.T, b *Backend, id uint64) *backend.Handle {
	t.Helper()
	p, err := b.Snapshot(context.Background(), id)
	must(t, err)
	h, err := p.Run(context.Background())
	must(t, err)
	return h
}

func TestExpiredEntriesLeftOut(t *testing.T) {
	w := newWorld()
	b := w.open(t, full)
	must(t, b.Put("vt", k(1, "old"), []byte("x")))
	w.mu.Lock()
	w.now = w.now.Add(5 * time.Second)
	w.mu.Unlock()
	must(t, b.Put("vt", k(1, "new"), []byte("y")))
	w.mu.Lock()
	w.now = w.now.Add(6 * time.Second) // "old" expired, "new" not
	w.mu.Unlock()
	h := snap(t, b, 1)
	// Restore with the clock turned back: an expired entry that had been
	// written would show up again.
	w.mu.Lock()
	w.now = w.now.Add(-11 * time.Second)
	w.mu.Unlock()
	r := w.open(t, full, h)
	if _, ok, _ := r.Get("vt", k(1, "old")); ok {
		t.Fatal("expired entry written into the snapshot")
	}
	if v, ok, _ := r.Get("vt", k(1, "new")); !ok || string(v) != "y" {
		t.Fatalf("live entry = %q %v", v, ok)
	}
}

func TestDamagedAndMissingFiles(t *testing.T) {
	w := newWorld()
	b := w.open(t, full)
	fill(t, b, 1)
	h := snap(t, b, 1)
	path := h.Files[0].Path
	orig, err := tiered.ReadAll(context.Background(), w.store, path, 0)
	must(t, err)
	check := func(name string, target error, r backend.KeyGroupRange) {
		t.Helper()
		_, err := Open(w.config(r, h))
		if !errors.Is(err, target) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "checkpoint 1") {
			t.Fatalf("%s: %v", name, err)
		}
	}
	bad := bytes.Clone(orig)
	bad[len(bad)/2] ^= 1
	must(t, tiered.PutBytes(context.Background(), w.store, path, bad))
	check("flipped bit", backend.ErrCorrupt, full)
	must(t, tiered.PutBytes(context.Background(), w.store, path, orig[:len(orig)-3]))
	check("truncated", backend.ErrCorrupt, full)
	check("truncated, sub-range", backend.ErrCorrupt, backend.KeyGroupRange{Start: 15, End: 15})
	must(t, w.store.Delete(context.Background(), path))
	check("missing", backend.ErrNotFound, full)
	check("missing, sub-range", backend.ErrNotFound, backend.KeyGroupRange{Start: 2, End: 3})
}

func TestRefusedHandles(t *testing.T) {
	w := newWorld()
	b := w.open(t, full)
	h := snap(t, b, 1)
	lsm := *h
	lsm.Backend = backend.KindLSM
	_, err := Open(w.config(full, &lsm))
	if !errors.Is(err, backend.ErrIncompatible) || !strings.Contains(err.Error(), "canonical savepoint") {
		t.Fatalf("lsm handle: %v", err)
	}
	noOffsets := *h
	noOffsets.Files = []backend.FileRef{h.Files[0]}
	noOffsets.Files[0].KeyGroupOffsets = nil
	if _, err := Open(w.config(full, &noOffsets)); !errors.Is(err, backend.ErrCorrupt) {
		t.Fatalf("handle without offsets: %v", err)
	}
	// A file with entries of a state its handle does not register.
	ref, err := snapfmt.Write(context.Background(), w.store, "job/chk-2/op-1/state-odd", full, func(fn func(k, v []byte) error) error {
		return fn([]byte{0, 3, 1, 'z', 0, 0}, []byte{0})
	}, snapfmt.WriteOptions{})
	must(t, err)
	odd := *h
	odd.Files = []backend.FileRef{ref}
	if _, err := Open(w.config(full, &odd)); !errors.Is(err, backend.ErrCorrupt) || !strings.Contains(err.Error(), `"z"`) {
		t.Fatalf("unregistered state: %v", err)
	}
}

func TestPendingSnapshotLifecycle(t *testing.T) {
	w := newWorld()
	b := w.open(t, full)
	must(t, b.Put("v", k(0, "a"), []byte("1")))
	p, err := b.Snapshot(context.Background(), 1)
	must(t, err)
	if _, err := p.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Run(context.Background()); err == nil {
		t.Fatal("second Run succeeded")
	}
	p.Release() // no-op after Run
	p2, err := b.Snapshot(context.Background(), 2)
	must(t, err)
	p2.Release()
	p2.Release()
	if _, err := p2.Run(context.Background()); err == nil {
		t.Fatal("Run after Release succeeded")
	}
	// A snapshot taken before Close still runs after it.
	p3, err := b.Snapshot(context.Background(), 3)
	must(t, err)
	must(t, b.Close())
	must(t, b.Close())
	h, err := p3.Run(context.Background())
	must(t, err)
	if _, err := b.Snapshot(context.Background(), 4); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("snapshot after close: %v", err)
	}
	r := w.open(t, full, h)
	if v, _, _ := r.Get("v", k(0, "a")); string(v) != "1" {
		t.Fatalf("restored %q", v)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Snapshot(ctx, 5); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled snapshot: %v", err)
	}
}

func TestCanonicalSnapshot(t *testing.T) {
	w := newWorld()
	cfg := w.config(full)
	cfg.Kind = backend.KindHeap
	cfg.MaxSnapshotSize = 1 // a canonical snapshot is never capped
	b, err := Open(cfg)
	must(t, err)
	fill(t, b, 1)
	sp := memstore.New()
	p, err := b.CanonicalSnapshot(context.Background(), 9, sp, "savepoints/s1")
	must(t, err)
	h, err := p.Run(context.Background())
	must(t, err)
	if h.Backend != backend.KindFile || !strings.HasPrefix(h.Files[0].Path, "savepoints/s1/op-1/") {
		t.Fatalf("canonical handle %+v", h)
	}
	if _, err := b.CanonicalSnapshot(context.Background(), 9, sp, "../x"); err == nil {
		t.Fatal("bad dir accepted")
	}
	twin := w.open(t, full)
	fill(t, twin, 1)
	rcfg := w.config(full, h)
	rcfg.RestoreSource = func(*backend.Handle) ([]tiered.Store, string) { return []tiered.Store{sp}, "" }
	r, err := Open(rcfg)
	must(t, err)
	if a, b := dump(t, r), dump(t, twin); a != b {
		t.Fatalf("canonical restore\n%s\nwant\n%s", a, b)
	}
}

func TestDeclineOverCap(t *testing.T) {
	w := newWorld()
	cfg := w.config(full)
	cfg.MaxSnapshotSize = 200
	b, err := Open(cfg)
	must(t, err)
	fill(t, b, 1)
	p, err := b.Snapshot(context.Background(), 1)
	must(t, err)
	_, err = p.Run(context.Background())
	if !errors.Is(err, backend.ErrDeclined) || !strings.Contains(err.Error(), "200-byte cap") {
		t.Fatalf("over the cap: %v", err)
	}
	if w.store.Bytes() != 0 {
		t.Fatalf("declined snapshot stored %d bytes", w.store.Bytes())
	}
}

// MaxMemoryBytes: every kind of write that would grow the in-memory state
// past the bound fails with ErrResourceExhausted naming the instance, and
// changes nothing; shrinking writes still work and make room again; a
// restore of more state than the bound fails the same way.
func TestMemoryBound(t *testing.T) {
	w := newWorld()
	b := w.open(t, full)
	fill(t, b, 1)
	h := snap(t, b, 1)
	used := b.tree.Bytes()

	cfg := w.config(full)
	cfg.Options.MaxMemoryBytes = used + 64
	small, err := Open(cfg)
	must(t, err)
	defer small.Close()
	fill(t, small, 1)
	// (dump polls timers, which deletes them: compare the tree itself.)
	before := treeDump(small.tree)
	big := bytes.Repeat([]byte("x"), 200)
	writes := map[string]func() error{
		"put":        func() error { return small.Put("v", k(3, "k0"), big) },
		"list-add":   func() error { return small.ListAppend("l", k(3, "k0"), []byte("a"), big) },
		"map-put":    func() error { return small.MapPut("m", k(3, "k0"), []byte("new"), big) },
		"new-key":    func() error { return small.Put("v", k(4, string(big)), []byte("v")) },
		"timer-keys": func() error { return fillTimers(small, 100) },
	}
	for name, write := range writes {
		err := write()
		if !errors.Is(err, backend.ErrResourceExhausted) {
			t.Fatalf("%s past the bound: %v, want ErrResourceExhausted", name, err)
		}
		if !strings.Contains(err.Error(), task.String()) || !strings.Contains(err.Error(), fmt.Sprint(cfg.Options.MaxMemoryBytes)) {
			t.Fatalf("%s: error %q names neither the instance nor the limit", name, err)
		}
		if got := treeDump(small.tree); name != "timer-keys" && got != before { // timers up to the bound land
			t.Fatalf("a refused %s changed the state:\n%s\nwant\n%s", name, got, before)
		}
		before = treeDump(small.tree)
	}
	if small.tree.Bytes() > cfg.Options.MaxMemoryBytes {
		t.Fatalf("the tree holds %d bytes, over its bound %d", small.tree.Bytes(), cfg.Options.MaxMemoryBytes)
	}
	// Shrinking makes room.
	for kg := full.Start; kg <= full.End; kg++ {
		must(t, small.Delete("v", k(kg, "k0")))
	}
	must(t, small.Put("v", k(3, "k0"), big))

	// A restore of more than the bound is refused, clearly.
	cfg = w.config(full, h)
	cfg.Options.MaxMemoryBytes = used / 2
	if _, err := Open(cfg); !errors.Is(err, backend.ErrResourceExhausted) || !strings.Contains(err.Error(), "restore") {
		t.Fatalf("restore of %d bytes with a bound of %d: %v", used, used/2, err)
	}
}

// treeDump is every entry of tree.
func treeDump(tree *memkv.Tree) string {
	var sb strings.Builder
	_ = tree.Scan(nil, nil, func(k, v []byte) (bool, error) {
		fmt.Fprintf(&sb, "%x=%x\n", k, v)
		return true, nil
	})
	return sb.String()
}

// fillTimers registers n timers, stopping at the first error.
func fillTimers(b *Backend, n int) error {
	for i := 0; i < n; i++ {
		if err := b.RegisterTimer("t", backend.Timer{KeyGroup: 5, Key: []byte("tk"), Timestamp: int64(i)}); err != nil {
			return err
		}
	}
	return nil
}
