package api_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/tiered/memstore"
)

// The benchmarks compare, in one run, the ways a task can reach lsm state:
//
//	BenchmarkEcho            a bare length-prefixed echo over a Unix socket:
//	                         the floor of one round trip
//	BenchmarkLSM/inprocess   the lsm backend called directly
//	BenchmarkLSM/client-1    through the client, one op per round trip
//	BenchmarkLSM/client-1000 through the client, 1000 ops per batch
//
// The daemon runs in the benchmark's process, serving a real Unix socket.
// Single-op benchmarks report the p50 round trip as p50-us; every one
// reports ops/s.
//
//	go test ./api -run '^$' -bench . -benchtime 2s

const benchValueSize = 100

func benchKey(i int) []byte { return fmt.Appendf(nil, "key-%08d", i) }

func reportLatency(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	b.ReportMetric(float64(d[len(d)/2].Nanoseconds())/1e3, "p50-us")
	b.ReportMetric(float64(d[len(d)*99/100].Nanoseconds())/1e3, "p99-us")
}

func reportRate(b *testing.B, ops int, start time.Time) {
	b.ReportMetric(float64(ops)/time.Since(start).Seconds(), "ops/s")
}

func BenchmarkEcho(b *testing.B) {
	sock := filepath.Join(b.TempDir(), "e.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 64<<10)
		for {
			if _, err := io.ReadFull(c, buf[:4]); err != nil {
				return
			}
			n := binary.LittleEndian.Uint32(buf)
			if _, err := io.ReadFull(c, buf[4:4+n]); err != nil {
				return
			}
			if _, err := c.Write(buf[:4+n]); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	// A message the size of a one-put request.
	msg := make([]byte, 4+benchValueSize+40)
	binary.LittleEndian.PutUint32(msg, uint32(len(msg)-4))
	in := make([]byte, len(msg))
	lat := make([]time.Duration, 0, b.N)
	start := time.Now()
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, in); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportRate(b, b.N, start)
	reportLatency(b, lat)
	c.Close()
	<-done
}

var benchStates = []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}

func BenchmarkLSM(b *testing.B) {
	val := make([]byte, benchValueSize)
	const keys = 100_000
	b.Run("inprocess", func(b *testing.B) {
		store := memstore.New()
		be, err := lsm.Open(backend.Options{Task: backend.TaskID{Job: "bench", Operator: "op"},
			KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, States: benchStates, Store: store},
			lsm.Options{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		defer be.Close()
		kg := func(k []byte) int { return backend.KeyGroupForHash(client.FNV1a32(k), 128) }
		for _, op := range []string{"put", "get"} {
			b.Run(op, func(b *testing.B) {
				start := time.Now()
				for i := 0; b.Loop(); i++ {
					k := benchKey(i % keys)
					key := backend.Key{KeyGroup: kg(k), Key: k}
					var err error
					if op == "put" {
						err = be.Put("v", key, val)
					} else {
						_, _, err = be.Get("v", key)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				reportRate(b, b.N, start)
			})
		}
	})
	for _, mode := range []string{"client-1", "client-1000-sync", "client-1000"} {
		b.Run(mode, func(b *testing.B) {
			h := startDaemon(b, harnessOpts{})
			batch := 1000
			if mode == "client-1" {
				batch = 1
			}
			// Batches go out when full (or on Wait); the delay never fires.
			c := h.dial(client.Options{MaxBatchOps: batch, FlushDelay: time.Minute})
			ctx := context.Background()
			in, err := c.Open(ctx, client.OpenSpec{Task: backend.TaskID{Job: "bench", Operator: "op"}, Parallelism: 1,
				Backend: backend.KindLSM, States: benchStates})
			if err != nil {
				b.Fatal(err)
			}
			defer in.Close(ctx)
			for _, op := range []string{"put", "get"} {
				b.Run(op, func(b *testing.B) {
					var lat []time.Duration
					start := time.Now()
					n := 0
					for i := 0; b.Loop(); i++ {
						k := benchKey(i % keys)
						var t0 time.Time
						if batch == 1 {
							t0 = time.Now()
						}
						var err error
						switch {
						case op == "put" && batch == 1:
							_, err = in.Put("v", k, nil, val).Wait(ctx)
						case batch == 1:
							_, err = in.Get("v", k, nil).Wait(ctx)
						case op == "put":
							in.Put("v", k, nil, val)
						default:
							in.Get("v", k, nil)
						}
						if err != nil {
							b.Fatal(err)
						}
						if batch == 1 {
							lat = append(lat, time.Since(t0))
						} else if mode == "client-1000-sync" && (i+1)%batch == 0 {
							// One batch per round trip: wait for it.
							if err := in.Sync(ctx); err != nil {
								b.Fatal(err)
							}
						}
						n++
					}
					if err := in.Sync(ctx); err != nil {
						b.Fatal(err)
					}
					if err := in.Err(); err != nil {
						b.Fatal(err)
					}
					reportRate(b, n, start)
					reportLatency(b, lat)
				})
			}
		})
	}
}
