package changelog_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/heap"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/dstl"
	"github.com/statedhq/stated/dstl/changelog"
	"github.com/statedhq/stated/tiered/localfs"
	"github.com/statedhq/stated/tiered/memstore"
)

func benchOpen(b *testing.B, changelogMode bool) (backend.Backend, *memstore.Store) {
	store := memstore.New()
	opts := backend.Options{
		Task: propTask, KeyGroups: backend.KeyGroupRange{Start: 0, End: propMaxP - 1}, MaxParallelism: propMaxP,
		States: propStates, Store: store,
	}
	if !changelogMode {
		be, err := heap.Open(opts, heap.Options{Snapshots: store})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = be.Close() })
		return be, store
	}
	ls := dstl.TieredLogStore{Store: memstore.New()}
	w, err := dstl.NewWriter(ls, dstl.Options{FlushDelay: 5 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = w.Close() })
	be, err := changelog.Open(opts, changelog.Options{
		OpenInner: func(o backend.Options) (backend.Backend, error) { return heap.Open(o, heap.Options{Snapshots: store}) },
		Writer:    w, Log: ls,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = be.Close() })
	return be, store
}

// BenchmarkPut is the cost changelog mode adds to a write (encode and
// append under the writer lock) over the plain heap backend.
func BenchmarkPut(b *testing.B) {
	for _, mode := range []bool{false, true} {
		b.Run(map[bool]string{false: "heap", true: "changelog-heap"}[mode], func(b *testing.B) {
			be, _ := benchOpen(b, mode)
			v := make([]byte, 100)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				k := backend.Key{KeyGroup: i % propMaxP, Key: []byte(fmt.Sprint(i % 10000))}
				if err := be.Put("v", k, v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCheckpointDelta: 10k entries of 100 bytes, then per checkpoint
// 100 updates. It reports the bytes a checkpoint writes: the heap
// backend's snapshot, or the changelog's manifest plus the log bytes the
// window grew by (the base is confirmed once, before the timer starts).
func BenchmarkCheckpointDelta(b *testing.B) {
	ctx := context.Background()
	for _, mode := range []bool{false, true} {
		b.Run(map[bool]string{false: "heap", true: "changelog-heap"}[mode], func(b *testing.B) {
			be, store := benchOpen(b, mode)
			v := make([]byte, 100)
			put := func(i int) {
				k := backend.Key{KeyGroup: i % propMaxP, Key: []byte(fmt.Sprint(i))}
				if err := be.Put("v", k, v); err != nil {
					b.Fatal(err)
				}
			}
			for i := 0; i < 10000; i++ {
				put(i)
			}
			id := uint64(0)
			cp := func() *backend.Handle {
				id++
				p, err := be.Snapshot(ctx, id)
				if err != nil {
					b.Fatal(err)
				}
				h, err := p.Run(ctx)
				if err != nil {
					b.Fatal(err)
				}
				be.NotifyCheckpointComplete(id)
				return h
			}
			cp()
			var written, prevLog int64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j := 0; j < 100; j++ {
					put(j * 97 % 10000)
				}
				h := cp()
				written += h.CheckpointedSize
				if mode {
					l, err := changelog.ReadLayout(ctx, store, h)
					if err != nil {
						b.Fatal(err)
					}
					if l.Log != nil {
						// The window grows from the base: this checkpoint
						// made durable only what it added.
						written += l.Log.Bytes() - prevLog
						prevLog = l.Log.Bytes()
					}
				}
			}
			b.ReportMetric(float64(written)/float64(b.N), "bytes/checkpoint")
		})
	}
}

// BenchmarkRestore restores 10k entries of 100 bytes, each written twice:
// from a heap snapshot, or from an empty changelog base plus a log of
// 20k changes (the worst case: nothing materialized since the start). It
// reports the log's bytes per state byte (space amplification).
func BenchmarkRestore(b *testing.B) {
	ctx := context.Background()
	for _, mode := range []bool{false, true} {
		b.Run(map[bool]string{false: "heap", true: "changelog-heap"}[mode], func(b *testing.B) {
			store := memstore.New()
			ls := dstl.TieredLogStore{Store: memstore.New()}
			w, err := dstl.NewWriter(ls, dstl.Options{FlushDelay: 5 * time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = w.Close() })
			open := func(restore ...*backend.Handle) backend.Backend {
				opts := backend.Options{
					Task: propTask, KeyGroups: backend.KeyGroupRange{Start: 0, End: propMaxP - 1}, MaxParallelism: propMaxP,
					States: propStates, Store: store, Restore: restore,
				}
				var be backend.Backend
				if mode {
					be, err = changelog.Open(opts, changelog.Options{
						OpenInner: func(o backend.Options) (backend.Backend, error) { return heap.Open(o, heap.Options{Snapshots: store}) },
						Writer:    w, Log: ls,
					})
				} else {
					be, err = heap.Open(opts, heap.Options{Snapshots: store})
				}
				if err != nil {
					b.Fatal(err)
				}
				return be
			}
			cp := func(be backend.Backend, id uint64) *backend.Handle {
				p, err := be.Snapshot(ctx, id)
				if err != nil {
					b.Fatal(err)
				}
				h, err := p.Run(ctx)
				if err != nil {
					b.Fatal(err)
				}
				be.NotifyCheckpointComplete(id)
				return h
			}
			be := open()
			defer be.Close()
			cp(be, 1)
			// Incompressible values: zstd would shrink zeros to nothing.
			rng := rand.New(rand.NewPCG(1, 2))
			v := make([]byte, 100)
			for r := 0; r < 2; r++ {
				for i := 0; i < 10000; i++ {
					for j := range v {
						v[j] = byte(rng.Uint32())
					}
					if err := be.Put("v", backend.Key{KeyGroup: i % propMaxP, Key: []byte(fmt.Sprintf("%05d", i))}, v); err != nil {
						b.Fatal(err)
					}
				}
			}
			h := cp(be, 2)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_ = open(h).Close()
			}
			b.StopTimer()
			if mode {
				l, err := changelog.ReadLayout(ctx, store, h)
				if err != nil || l.Log == nil {
					b.Fatalf("layout: %+v %v", l, err)
				}
				// ResetTimer drops reported metrics: report after the loop.
				b.ReportMetric(float64(l.Log.Bytes())/float64(10000*(100+5)), "log-bytes/state-byte")
			}
		})
	}
}

// BenchmarkGroupPut is the cost changelog mode adds to a batch of blind
// writes, the api batch path's shape: groups of 1000 puts of 100-byte
// random values, per put. Its allocs/op are per put.
func BenchmarkGroupPut(b *testing.B) {
	for _, mode := range []bool{false, true} {
		b.Run(map[bool]string{false: "heap", true: "changelog-heap"}[mode], func(b *testing.B) {
			be, _ := benchOpen(b, mode)
			g := be.(backend.Grouper)
			const group = 1000
			keys := make([][]byte, 10000)
			for i := range keys {
				keys[i] = fmt.Appendf(nil, "key-%08d", i)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			// Incompressible values, as the api benchmark has: a pool far larger
			// than a block, so zstd finds no repeats.
			pool := make([]byte, 8<<20)
			for i := range pool {
				pool[i] = byte(rng.Uint32())
			}
			b.ReportAllocs()
			b.ResetTimer()
			for n := 0; n < b.N; n += group {
				err := g.Group(func(w backend.GroupWriter) {
					for i := n; i < n+group && i < b.N; i++ {
						off := (i * 1031) % (len(pool) - 100)
						k := backend.Key{KeyGroup: i % propMaxP, Key: keys[i%len(keys)]}
						if err := w.Put("v", k, pool[off:off+100]); err != nil {
							b.Fatal(err)
						}
					}
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGroupPutLSMRatio is BenchmarkChangelogThroughput (api) without
// the client, gRPC and daemon: two lsm instances, one in changelog mode
// over a local-directory log store (fsync'd, the default writer options),
// take groups of 1000 puts of 100 random bytes in alternating slices of
// 20 groups, so both see the same load; it reports the on/off ratio of
// puts per second.
//
//	go test ./dstl/changelog -run '^$' -bench GroupPutLSMRatio -benchtime 20x -count 5
func BenchmarkGroupPutLSMRatio(b *testing.B) {
	open := func(on bool) backend.Grouper {
		opts := backend.Options{Task: propTask, KeyGroups: backend.KeyGroupRange{Start: 0, End: propMaxP - 1},
			MaxParallelism: propMaxP, States: propStates, Store: memstore.New()}
		inner := func(o backend.Options) (backend.Backend, error) { return lsm.Open(o, lsm.Options{Dir: b.TempDir()}) }
		var be backend.Backend
		var err error
		if on {
			store, err := localfs.Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { store.Close() })
			ls := dstl.TieredLogStore{Store: store}
			w, err := dstl.NewWriter(ls, dstl.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = w.Close() })
			be, err = changelog.Open(opts, changelog.Options{OpenInner: inner, Writer: w, Log: ls})
		} else {
			be, err = inner(opts)
		}
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = be.Close() })
		return be.(backend.Grouper)
	}
	ins := map[bool]backend.Grouper{false: open(false), true: open(true)}
	const group, groups, keys = 1000, 20, 100_000
	pool := make([]byte, 8<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range pool {
		pool[i] = byte(rng.Uint32())
	}
	key := make([]byte, 0, 16)
	var took [2]time.Duration
	n := 0
	for i := 0; b.Loop(); i++ {
		for _, on := range []bool{i%2 == 0, i%2 != 0} {
			t0 := time.Now()
			for g := 0; g < groups; g++ {
				base := (n*groups + g) * group
				err := ins[on].Group(func(w backend.GroupWriter) {
					for j := base; j < base+group; j++ {
						key = fmt.Appendf(key[:0], "key-%08d", j%keys)
						off := ((j+i*7919)*1031 + i) % (len(pool) - 100)
						if err := w.Put("v", backend.Key{KeyGroup: j % propMaxP, Key: key}, pool[off:off+100]); err != nil {
							b.Fatal(err)
						}
					}
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			took[map[bool]int{false: 0, true: 1}[on]] += time.Since(t0)
		}
		n++
	}
	off := float64(n*groups*group) / took[0].Seconds()
	on := float64(n*groups*group) / took[1].Seconds()
	b.ReportMetric(off, "off-ops/s")
	b.ReportMetric(on, "on-ops/s")
	b.ReportMetric(on/off, "on/off")
}
