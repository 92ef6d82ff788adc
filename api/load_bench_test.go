package api_test

import (
	"fmt"
	"math/rand"
	"sort"
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
// until all are applied; it reports entries/s. The ratio of the two is the
// figure docs/protocol.md quotes.
//
//	go test ./api -run '^$' -bench BenchmarkRestore -benchtime 3x
func BenchmarkRestore(b *testing.B) {
	const restoreEntries = 200_000
	h := startDaemon(b, harnessOpts{})
	c := h.dial(client.Options{})
	ctx := ctxT(b)
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
				var took time.Duration
				for i := 0; i < b.N; i++ {
					in := open(b, kind)
					start := time.Now()
					for _, e := range order.entries {
						in.Put("v", e.key, nil, value)
					}
					if err := in.Sync(ctx); err != nil {
						b.Fatal(err)
					}
					took += time.Since(start)
					if err := in.Err(); err != nil {
						b.Fatal(err)
					}
					_ = in.Close(ctx)
				}
				b.ReportMetric(float64(restoreEntries*b.N)/took.Seconds(), "entries/s")
			})
			b.Run(fmt.Sprintf("%s/%s/load", kind, order.name), func(b *testing.B) {
				var took time.Duration
				batch := make([]backend.LoadEntry, 0, 5000)
				for i := 0; i < b.N; i++ {
					in := open(b, kind)
					start := time.Now()
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
					took += time.Since(start)
					if err != nil || loaded != restoreEntries {
						b.Fatalf("load: %d, %v", loaded, err)
					}
					_ = in.Close(ctx)
				}
				b.ReportMetric(float64(restoreEntries*b.N)/took.Seconds(), "entries/s")
			})
		}
	}
}
