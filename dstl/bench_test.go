package dstl

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/localfs"
	"github.com/statedhq/stated/tiered/metered"
	"github.com/statedhq/stated/tiered/s3store"
	"github.com/statedhq/stated/tiered/s3store/s3test"
)

func openLocal(b testing.TB) tiered.Store {
	s, err := localfs.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(math.Ceil(p*float64(len(sorted))))-1)]
}

// reportLatencies reports the p50, p99 and p99.9 of lat (sorting it).
func reportLatencies(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(percentile(lat, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(percentile(lat, 0.999).Microseconds())/1000, "p99.9-ms")
}

// BenchmarkFlushLatency measures what a checkpoint waits for: Append a
// 1 KiB change, then Persist it (which cuts a segment at once and waits
// until it is durable) against a local-directory store (segments appended
// into a preallocated pack file, written in place with fdatasync). In the "loaded" case
// 16 other writers append 1 KiB every millisecond each (~16 MB/s)
// meanwhile, so segments also carry their changes; "paced" persists once
// per flush delay instead of back to back. It reports exact
// p50/p99/p99.9 of the Persist latencies, and p99.9 of the Writer's own
// flush-latency histogram (a bucket bound).
//
// The "s3-server" cases write to the S3 server STATED_TEST_S3_ENDPOINT
// names (scripts/s3-server.sh starts versitygw), "s3-gofakes3" to an
// in-process fake when none is set.
func BenchmarkFlushLatency(b *testing.B) {
	s3opts, real := s3test.Options(b)
	s3name := "s3-gofakes3"
	if real {
		s3name = "s3-server"
	}
	stores := []struct {
		name string
		open func(b *testing.B) tiered.Store
	}{{"local", func(b *testing.B) tiered.Store { return openLocal(b) }}, {s3name, func(b *testing.B) tiered.Store {
		s, err := s3store.Open(context.Background(), s3opts)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}}}
	for _, st := range stores {
		for _, loaded := range []bool{false, true} {
			b.Run(fmt.Sprintf("store=%s/loaded=%v", st.name, loaded), func(b *testing.B) {
				flushLatency(b, st.open(b), loaded, 0)
			})
		}
		b.Run(fmt.Sprintf("store=%s/paced", st.name), func(b *testing.B) {
			flushLatency(b, st.open(b), false, DefaultFlushDelay)
		})
	}
}

// flushLatency times b.N Persists of a 1 KiB change each, back to back
// (every = 0) or one every "every" (paced: a daemon's writer cuts at most
// one segment per flush delay while changes stream in, and a checkpoint's
// Persist comes on top of that rhythm, not back to back).
func flushLatency(b *testing.B, store tiered.Store, loaded bool, every time.Duration) {
	ctx := context.Background()
	w, err := NewWriter(TieredLogStore{Store: store}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if loaded {
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t := time.NewTicker(time.Millisecond)
				defer t.Stop()
				for {
					select {
					case <-stop:
						return
					case <-t.C:
						w.Append(ctx, fmt.Sprint("bg/", g), g, make([]byte, 1024))
					}
				}
			}()
		}
	}
	change := make([]byte, 1024)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	next := time.Now()
	for i := 0; i < b.N; i++ {
		if every > 0 {
			time.Sleep(time.Until(next))
			next = next.Add(every)
		}
		seq, err := w.Append(ctx, "fg", 1, change)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if _, err := w.Persist(ctx, "fg", seq); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	reportLatencies(b, lat)
	h := w.Metrics().FlushLatency
	b.ReportMetric(float64(histPercentile(h, 0.999).Microseconds())/1000, "hist-p99.9-ms")
}

// BenchmarkLocalPutLatency is the floor under BenchmarkFlushLatency: one
// Put of a 1 KiB object to the same kind of store, nothing else.
func BenchmarkLocalPutLatency(b *testing.B) {
	ctx := context.Background()
	s := openLocal(b)
	data := make([]byte, 1024)
	lat := make([]time.Duration, 0, b.N)
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := tiered.PutBytes(ctx, s, fmt.Sprintf("o/%d", i), data); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportLatencies(b, lat)
}

// histPercentile is the upper bound of the bucket holding quantile q.
func histPercentile(h Histogram, q float64) time.Duration {
	want := uint64(math.Ceil(q * float64(h.Count)))
	var n uint64
	for i, c := range h.Counts {
		n += c
		if n >= want && c > 0 {
			if i < len(h.Bounds) {
				return h.Bounds[i]
			}
			return time.Duration(math.MaxInt64)
		}
	}
	return 0
}

// BenchmarkObjectsPerSecond has W writers (backend instances) append
// 256-byte changes (random bytes: zstd cannot shrink them), b.N in all,
// with the default options, against a local-directory store counted by
// tiered/metered. "paced" spreads a total of 20,000 changes/s (5 MB/s)
// over the writers, as a daemon's instances between checkpoints; "flat-out"
// appends as fast as the writers can. Objects written per second must be
// bounded by the flush rate (one per FlushDelay, plus one per FlushSize of
// data), not by W.
func BenchmarkObjectsPerSecond(b *testing.B) {
	for _, paced := range []bool{true, false} {
		for _, writers := range []int{10, 100} {
			name := fmt.Sprintf("flat-out/writers=%d", writers)
			if paced {
				name = fmt.Sprintf("paced/writers=%d", writers)
			}
			b.Run(name, func(b *testing.B) { benchObjects(b, writers, paced) })
		}
	}
}

func benchObjects(b *testing.B, writers int, paced bool) {
	ctx := context.Background()
	ms := metered.New(openLocal(b))
	w, err := NewWriter(TieredLogStore{Store: ms}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	const rate = 20000 // changes per second, all writers together (paced)
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("job/op/%d", g)
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			change := make([]byte, 256)
			var tick <-chan time.Time
			if paced {
				t := time.NewTicker(time.Duration(writers) * time.Second / rate)
				defer t.Stop()
				tick = t.C
			}
			for left.Add(-1) >= 0 {
				if tick != nil {
					<-tick
				}
				for j := 0; j < len(change); j += 8 {
					binary.LittleEndian.PutUint64(change[j:], rng.Uint64())
				}
				if _, err := w.Append(ctx, id, g%128, change); err != nil {
					b.Error(err)
					return
				}
			}
			if _, err := w.Persist(ctx, id, math.MaxUint64); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	w.Close()
	puts := ms.Counts().Calls[tiered.OpPut]
	m := w.Metrics()
	b.ReportMetric(float64(puts)/elapsed.Seconds(), "objects/s")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "appends/s")
	b.ReportMetric(float64(m.SegmentBytesWritten)/float64(max(m.SegmentsWritten, 1))/1024, "KiB/segment")
	b.ReportMetric(float64(m.BackPressureTime.Milliseconds())/elapsed.Seconds(), "backpressure-ms/s")
	// the flush-rate bound: one segment per FlushDelay, one per FlushSize
	// of changes, one per writer's final Persist (which the run's end
	// forces), and speculative or retried attempts.
	bound := elapsed.Seconds()/DefaultFlushDelay.Seconds() + float64(m.BytesAppended+16*m.RecordsAppended)/DefaultFlushSize +
		float64(writers) + float64(m.UploadAttempts-m.SegmentsWritten) + 1
	if float64(puts) > bound {
		b.Fatalf("%d objects in %v with %d writers: above the flush-rate bound %.0f", puts, elapsed, writers, bound)
	}
}
