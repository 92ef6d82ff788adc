package api_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/host"
)

// The changelog benchmarks compare, in one run and through the real
// client, lsm instances with the changelog on and off:
//
//	BenchmarkChangelogThroughput  batched puts (1000 per batch), the two
//	                              modes interleaved in slices; reports the
//	                              on/off ratio (target >= 0.85)
//	BenchmarkChangelogCheckpoint  checkpoint duration (snapshot through
//	                              completion) after 1% of the keys changed
//	                              over a 0.5 s interval (10 slices 50 ms
//	                              apart, as a steady stream would), per
//	                              state size (STATED_BENCH_STATE_MIB,
//	                              default 64; e.g. "64,1024")
//	BenchmarkChangelogRestore     restore time of the same state with and
//	                              without the changelog
//
//	go test ./api -run '^$' -bench Changelog -benchtime 5x
//	STATED_BENCH_STATE_MIB=64,1024 go test ./api -run '^$' -bench ChangelogCheckpoint -benchtime 5x -timeout 60m

// clValueSize is the value size of the state-size benchmarks: 1 KiB, so
// that a MiB of state is about 1000 keys.
const clValueSize = 1024

// clBench is one daemon with an lsm instance per mode.
type clBench struct {
	h   *harness
	c   *client.Client
	ins map[bool]*client.Instance // by changelog mode
}

func newCLBench(b *testing.B, mod func(*host.Options)) *clBench {
	daemonGC(b)
	h := startDaemon(b, harnessOpts{node: mod})
	cb := &clBench{h: h, c: h.dial(client.Options{MaxBatchOps: 1000, FlushDelay: time.Minute}), ins: map[bool]*client.Instance{}}
	for _, on := range []bool{false, true} {
		cb.ins[on] = cb.open(b, on, nil)
	}
	return cb
}

func clTask(on bool) backend.TaskID {
	return backend.TaskID{Job: fmt.Sprintf("changelog-%v", on), Operator: "op"}
}

func (cb *clBench) open(b *testing.B, on bool, restore *client.Restore) *client.Instance {
	mode := client.ChangelogOff
	if on {
		mode = client.ChangelogOn
	}
	in, err := cb.c.Open(context.Background(), client.OpenSpec{Task: clTask(on), Parallelism: 1, Backend: backend.KindLSM,
		States: benchStates, Changelog: mode, Restore: restore, Replace: true})
	if err != nil {
		b.Fatal(err)
	}
	if in.Changelog() != on {
		b.Fatalf("changelog mode %v, asked for %v", in.Changelog(), on)
	}
	return in
}

// randomPool holds incompressible bytes that values are cut from, so that
// neither the log's nor Pebble's compression shrinks the state.
var randomPool = func() []byte {
	p := make([]byte, 8<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i+8 <= len(p); i += 8 {
		binary.LittleEndian.PutUint64(p[i:], r.Uint64())
	}
	return p
}()

// put writes keys [from, to) with values of size random bytes (a different
// cut of the pool per key and round), then waits.
func put(b *testing.B, in *client.Instance, from, to, round int, size int) {
	ctx := context.Background()
	for i := from; i < to; i++ {
		off := ((i+round*7919)*1031 + round) % (len(randomPool) - size)
		in.Put("v", benchKey(i), nil, randomPool[off:off+size])
	}
	if err := in.Sync(ctx); err != nil {
		b.Fatal(err)
	}
}

// checkpoint snapshots in and completes the checkpoint, and returns how
// long that took and its size: what it uploaded without the changelog
// (new SSTs and the lsm metadata), the log window since the base with it
// (what a restore replays).
func (cb *clBench) checkpoint(b *testing.B, in *client.Instance, id uint64) (time.Duration, int64) {
	ctx := context.Background()
	t0 := time.Now()
	if _, err := in.Snapshot(ctx, id, false); err != nil {
		b.Fatal(err)
	}
	info, err := cb.c.CompleteCheckpoint(ctx, in.Task().Job, id)
	if err != nil {
		b.Fatal(err)
	}
	if info.GetChangelogSize() > 0 {
		return time.Since(t0), info.GetChangelogSize()
	}
	return time.Since(t0), info.GetCheckpointedSize()
}

func BenchmarkChangelogThroughput(b *testing.B) {
	cb := newCLBench(b, nil)
	const slice, keys = 20000, 100_000
	var took [2]time.Duration
	n := 0
	for i := 0; b.Loop(); i++ {
		// Alternate which mode goes first, so both see the same load.
		for k, on := range []bool{i%2 == 0, i%2 != 0} {
			_ = k
			t0 := time.Now()
			from := (n * slice) % keys
			put(b, cb.ins[on], from, from+slice, i, benchValueSize)
			took[map[bool]int{false: 0, true: 1}[on]] += time.Since(t0)
		}
		n++
	}
	off := float64(n*slice) / took[0].Seconds()
	on := float64(n*slice) / took[1].Seconds()
	b.ReportMetric(off, "off-ops/s")
	b.ReportMetric(on, "on-ops/s")
	b.ReportMetric(on/off, "on/off")
}

// stateSizes are the state sizes in MiB of the checkpoint and restore
// benchmarks.
func stateSizes(b *testing.B) []int {
	v := os.Getenv("STATED_BENCH_STATE_MIB")
	if v == "" {
		return []int{64}
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("STATED_BENCH_STATE_MIB=%q: %q is not a size in MiB", v, f)
		}
		out = append(out, n)
	}
	return out
}

func BenchmarkChangelogCheckpoint(b *testing.B) {
	for _, mib := range stateSizes(b) {
		b.Run(fmt.Sprintf("state=%dMiB", mib), func(b *testing.B) {
			// No background materialization: every timed checkpoint is the
			// log since the first checkpoint's base (the worst case of a
			// materialization interval).
			cb := newCLBench(b, func(o *host.Options) { o.MaterializeInterval = time.Hour })
			keys := mib << 20 / clValueSize
			changed := max(keys/100, 1)
			for _, on := range []bool{false, true} {
				put(b, cb.ins[on], 0, keys, 0, clValueSize)
				cb.checkpoint(b, cb.ins[on], 1) // the full one, not timed
			}
			var took [2]time.Duration
			var uploaded [2]int64
			id := uint64(2)
			round := 0
			for b.Loop() {
				round++
				for _, on := range []bool{round%2 == 0, round%2 != 0} {
					from := (round * changed * 7) % (keys - changed + 1)
					// The changes of one checkpoint interval arrive over
					// it, not all at its end: in changelog mode most are
					// durable by the time the checkpoint comes.
					const slices = 10
					for s := range slices {
						lo, hi := from+changed*s/slices, from+changed*(s+1)/slices
						put(b, cb.ins[on], lo, hi, round, clValueSize)
						time.Sleep(50 * time.Millisecond)
					}
					d, n := cb.checkpoint(b, cb.ins[on], id)
					took[map[bool]int{false: 0, true: 1}[on]] += d
					uploaded[map[bool]int{false: 0, true: 1}[on]] += n
				}
				id++
			}
			b.ReportMetric(float64(uploaded[0])/float64(round)/(1<<20), "off-uploaded-MiB")
			b.ReportMetric(float64(uploaded[1])/float64(round)/(1<<20), "on-window-MiB")
			off := took[0].Seconds() * 1e3 / float64(round)
			on := took[1].Seconds() * 1e3 / float64(round)
			b.ReportMetric(off, "off-ms/ckpt")
			b.ReportMetric(on, "on-ms/ckpt")
			b.ReportMetric(off/on, "off/on")
		})
	}
}

func BenchmarkChangelogRestore(b *testing.B) {
	for _, mib := range stateSizes(b) {
		b.Run(fmt.Sprintf("state=%dMiB", mib), func(b *testing.B) {
			cb := newCLBench(b, func(o *host.Options) { o.MaterializeInterval = time.Hour })
			keys := mib << 20 / clValueSize
			changed := max(keys/100, 1)
			for _, on := range []bool{false, true} {
				put(b, cb.ins[on], 0, keys, 0, clValueSize)
				cb.checkpoint(b, cb.ins[on], 1)
				// Ten checkpoints of 1% changes each: the changelog's restore
				// replays 10% of the state's keys after its base.
				for id := uint64(2); id <= 11; id++ {
					from := (int(id) * changed * 7) % (keys - changed + 1)
					put(b, cb.ins[on], from, from+changed, int(id), clValueSize)
					cb.checkpoint(b, cb.ins[on], id)
				}
			}
			var took [2]time.Duration
			round := 0
			for b.Loop() {
				round++
				for _, on := range []bool{round%2 == 0, round%2 != 0} {
					// The old task is gone before its successor restores
					// (closing it is not part of the restore).
					if err := cb.ins[on].Close(context.Background()); err != nil {
						b.Fatal(err)
					}
					t0 := time.Now()
					cb.ins[on] = cb.open(b, on, &client.Restore{Latest: true})
					took[map[bool]int{false: 0, true: 1}[on]] += time.Since(t0)
				}
			}
			off := took[0].Seconds() * 1e3 / float64(round)
			on := took[1].Seconds() * 1e3 / float64(round)
			b.ReportMetric(off, "off-ms")
			b.ReportMetric(on, "on-ms")
			b.ReportMetric(on/off, "on/off")
		})
	}
}
