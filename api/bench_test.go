package api_test

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"runtime/debug"
	"sort"
	"testing"
	"time"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/daemon"
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
// The daemon runs in the benchmark's process, serving a real Unix socket,
// with the GC target "stated serve" sets (daemon.DefaultGCPercent), which
// the in-process runs share. Single-op benchmarks report the p50 round trip
// as p50-us; every one reports ops/s. The client takes the daemon's batch
// socket, as by default; -bench.grpc keeps its batch streams on gRPC.
//
//	go test ./api -run '^$' -bench . -benchtime 2s [-args -bench.grpc]

const benchValueSize = 100

var benchGRPC = flag.Bool("bench.grpc", false, "benchmarks: the client's batch streams on gRPC, not the batch socket")

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

// daemonGC runs the benchmark with the daemon's GC target.
func daemonGC(b *testing.B) {
	old := debug.SetGCPercent(daemon.DefaultGCPercent)
	b.Cleanup(func() { debug.SetGCPercent(old) })
}

func BenchmarkLSM(b *testing.B) {
	daemonGC(b)
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
			c := h.dial(client.Options{MaxBatchOps: batch, FlushDelay: time.Minute, NoBatchSocket: *benchGRPC})
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

// echoServer is the bare length-prefixed echo over a Unix socket.
type echoServer struct {
	ln   net.Listener
	c    net.Conn
	done chan struct{}
	msg  []byte
	in   []byte
}

func newEchoServer(b *testing.B) *echoServer {
	sock := filepath.Join(b.TempDir(), "e.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	e := &echoServer{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(e.done)
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
	if e.c, err = net.Dial("unix", sock); err != nil {
		b.Fatal(err)
	}
	e.msg = make([]byte, 4+benchValueSize+40)
	binary.LittleEndian.PutUint32(e.msg, uint32(len(e.msg)-4))
	e.in = make([]byte, len(e.msg))
	return e
}

func (e *echoServer) roundTrip(b *testing.B) {
	if _, err := e.c.Write(e.msg); err != nil {
		b.Fatal(err)
	}
	if _, err := io.ReadFull(e.c, e.in); err != nil {
		b.Fatal(err)
	}
}

func (e *echoServer) close() {
	e.c.Close()
	e.ln.Close()
	<-e.done
}

func p50(d []time.Duration) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

// BenchmarkInterleaved measures the ratios the targets are about, with the
// compared paths interleaved in short slices so that they see the same
// machine load: client throughput with 1000-op batches over in-process
// throughput (target >= 0.8), and the p50 of a one-op round trip through
// the client over the p50 of a bare socket echo (target <= 3). Each
// iteration is one slice of every path.
func BenchmarkInterleaved(b *testing.B) {
	daemonGC(b)
	const slice = 20000
	val := make([]byte, benchValueSize)
	ctx := context.Background()
	be, err := lsm.Open(backend.Options{Task: backend.TaskID{Job: "bench", Operator: "op"},
		KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, States: benchStates, Store: memstore.New()},
		lsm.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	h := startDaemon(b, harnessOpts{})
	open := func(batch int, sub int) *client.Instance {
		c := h.dial(client.Options{MaxBatchOps: batch, FlushDelay: time.Minute, NoBatchSocket: *benchGRPC})
		in, err := c.Open(ctx, client.OpenSpec{Task: backend.TaskID{Job: "bench", Operator: "op", Subtask: sub},
			KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, Backend: backend.KindLSM, States: benchStates})
		if err != nil {
			b.Fatal(err)
		}
		return in
	}
	batched, single := open(1000, 0), open(1, 1)
	defer batched.Close(ctx)
	defer single.Close(ctx)
	echo := newEchoServer(b)
	defer echo.close()
	kg := func(k []byte) int { return backend.KeyGroupForHash(client.FNV1a32(k), 128) }

	var inproc, viaClient [2]time.Duration // put, get
	var echoLat, putLat, getLat []time.Duration
	key := 0
	b.ResetTimer()
	for range b.N {
		for op := range 2 {
			start := time.Now()
			for i := range slice {
				k := benchKey((key + i) % 100_000)
				bk := backend.Key{KeyGroup: kg(k), Key: k}
				if op == 0 {
					err = be.Put("v", bk, val)
				} else {
					_, _, err = be.Get("v", bk)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			inproc[op] += time.Since(start)
			start = time.Now()
			for i := range slice {
				k := benchKey((key + i) % 100_000)
				if op == 0 {
					batched.Put("v", k, nil, val)
				} else {
					batched.Get("v", k, nil)
				}
			}
			if err := batched.Sync(ctx); err != nil {
				b.Fatal(err)
			}
			viaClient[op] += time.Since(start)
		}
		for i := range 300 {
			t0 := time.Now()
			echo.roundTrip(b)
			echoLat = append(echoLat, time.Since(t0))
			k := benchKey((key + i) % 100_000)
			t0 = time.Now()
			if _, err := single.Put("v", k, nil, val).Wait(ctx); err != nil {
				b.Fatal(err)
			}
			putLat = append(putLat, time.Since(t0))
			t0 = time.Now()
			if _, err := single.Get("v", k, nil).Wait(ctx); err != nil {
				b.Fatal(err)
			}
			getLat = append(getLat, time.Since(t0))
		}
		key += slice
	}
	b.StopTimer()
	if err := batched.Err(); err != nil {
		b.Fatal(err)
	}
	n := float64(b.N * slice)
	b.ReportMetric(n/inproc[0].Seconds(), "inproc-put-ops/s")
	b.ReportMetric(n/viaClient[0].Seconds(), "client-put-ops/s")
	b.ReportMetric(n/inproc[1].Seconds(), "inproc-get-ops/s")
	b.ReportMetric(n/viaClient[1].Seconds(), "client-get-ops/s")
	b.ReportMetric(inproc[0].Seconds()/viaClient[0].Seconds(), "put-batched/inproc")
	b.ReportMetric(inproc[1].Seconds()/viaClient[1].Seconds(), "get-batched/inproc")
	e := p50(echoLat)
	b.ReportMetric(float64(e.Nanoseconds())/1e3, "echo-p50-us")
	b.ReportMetric(float64(p50(putLat).Nanoseconds())/1e3, "put1-p50-us")
	b.ReportMetric(float64(p50(getLat).Nanoseconds())/1e3, "get1-p50-us")
	b.ReportMetric(float64(p50(putLat))/float64(e), "put1/echo")
	b.ReportMetric(float64(p50(getLat))/float64(e), "get1/echo")
}
