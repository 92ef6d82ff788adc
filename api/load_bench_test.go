//go:build unix

package api_test

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
)

// BenchmarkRestore compares the two ways an engine restores an instance
// from its own snapshot, through a daemon serving a Unix socket: batched
// PUTs on the batch stream (the Go client's batches of 1000) against the
// bulk Load RPC (requests of 5000 entries). Each iteration fills a fresh
// instance with restoreEntries value entries of 16-byte keys and 100-byte
// values, in key order (as a snapshot holds them) or shuffled, and waits
// until all are applied; it reports entries/s and the process's CPU time
// per entry (client and daemon run in it), which on a busy machine
// measures the work where wall time measures waiting for a core. The
// ratios of the two paths are the figures docs/protocol.md quotes.
//
//	go test ./api -run '^$' -bench BenchmarkRestore -benchtime 3x
func BenchmarkRestore(b *testing.B) {
	const restoreEntries = 500_000
	h := startDaemon(b, harnessOpts{})
	c := h.dial(client.Options{})
	// Longer than ctxT's 30 s: a run does several restores of 500k entries.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	kg := backend.KeyGroupRange{Start: 0, End: 127}
	type entry struct {
		kg  int
		key []byte
	}
	// The client computes key groups from keys (the Go client's hash), so
	// both paths store every entry in the same key group; "sorted" is the
	// order of stored keys (key group, then key), as a snapshot holds them.
	sorted := make([]entry, restoreEntries)
	for i := range sorted {
		k := fmt.Appendf(nil, "key-%012d", i)
		sorted[i] = entry{kg: backend.KeyGroupForHash(client.FNV1a32(k), backend.DefaultMaxParallelism), key: k}
	}
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].kg != sorted[j].kg {
			return sorted[i].kg < sorted[j].kg
		}
		return string(sorted[i].key) < string(sorted[j].key)
	})
	shuffled := append([]entry(nil), sorted...)
	rand.New(rand.NewSource(1)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	value := make([]byte, 100)
	n := 0
	open := func(b *testing.B, kind backend.Kind) *client.Instance {
		n++
		in, err := c.Open(ctx, client.OpenSpec{Task: task("restore", fmt.Sprintf("op%d", n), 0), KeyGroups: kg,
			Backend: kind, States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}})
		if err != nil {
			b.Fatal(err)
		}
		return in
	}
	for _, kind := range []backend.Kind{backend.KindLSM, backend.KindHeap} {
		for _, order := range []struct {
			name    string
			entries []entry
		}{{"sorted", sorted}, {"shuffled", shuffled}} {
			b.Run(fmt.Sprintf("%s/%s/puts", kind, order.name), func(b *testing.B) {
				var took, cpu time.Duration
				for i := 0; i < b.N; i++ {
					in := open(b, kind)
					start, cpu0 := time.Now(), processCPU()
					for _, e := range order.entries {
						in.Put("v", e.key, nil, value)
					}
					if err := in.Sync(ctx); err != nil {
						b.Fatal(err)
					}
					took, cpu = took+time.Since(start), cpu+processCPU()-cpu0
					if err := in.Err(); err != nil {
						b.Fatal(err)
					}
					_ = in.Close(ctx)
				}
				b.ReportMetric(float64(restoreEntries*b.N)/took.Seconds(), "entries/s")
				b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(restoreEntries*b.N), "cpu-us/entry")
			})
			b.Run(fmt.Sprintf("%s/%s/load", kind, order.name), func(b *testing.B) {
				var took, cpu time.Duration
				batch := make([]backend.LoadEntry, 0, 5000)
				for i := 0; i < b.N; i++ {
					in := open(b, kind)
					start, cpu0 := time.Now(), processCPU()
					rest := order.entries
					loaded, _, err := in.Load(ctx, func() []backend.LoadEntry {
						if len(rest) == 0 {
							return nil
						}
						batch = batch[:0]
						for _, e := range rest[:min(len(rest), cap(batch))] {
							batch = append(batch, backend.LoadEntry{KeyGroup: e.kg, State: "v", Key: e.key, Value: value})
						}
						rest = rest[len(batch):]
						return batch
					})
					took, cpu = took+time.Since(start), cpu+processCPU()-cpu0
					if err != nil || loaded != restoreEntries {
						b.Fatalf("load: %d, %v", loaded, err)
					}
					_ = in.Close(ctx)
				}
				b.ReportMetric(float64(restoreEntries*b.N)/took.Seconds(), "entries/s")
				b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(restoreEntries*b.N), "cpu-us/entry")
			})
		}
	}
}

// processCPU is the CPU time (user + system) the process has used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
