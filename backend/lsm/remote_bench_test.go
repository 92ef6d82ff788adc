package lsm

// Remote mode vs local mode (docs/lsm-remote.md, "Figures"), one state per
// size and mode, measured in this order:
//
//   - checkpoint-after-1pct: bytes sent to the store by a checkpoint after
//     1% of the keys changed;
//   - restore-first-get: time from Open (restore of the whole range) to the
//     first served get; restore-first-get-unchanged: the same from the
//     checkpoint before the change;
//   - get-cold, get-warm: get latency over random keys right after that
//     restore (small block cache, empty secondary cache), then the same
//     keys again;
//   - rescale-3to4: three instances own a third of the key groups each and
//     checkpoint; each of four new subtasks opens from the three handles;
//     the time to its first get, the largest and the sum;
//   - state-2x-cache (remote mode only): a restore whose secondary cache
//     holds half the state reads random keys and then every key back.
//
// Every value read is compared with the one written (derived from the key
// by a seeded generator), so a wrong value fails the run. Sizes come from
// STATED_BENCH_REMOTE_SIZES (default 64MiB,256MiB); the store is the S3
// server s3test names when STATED_TEST_S3_ENDPOINT is set, else a local
// directory. scripts/bench-lsm-remote.sh runs the large sizes against
// versitygw. Small run:
//
//	go test ./backend/lsm/ -run '^$' -bench BenchmarkRemote -benchtime 1x -timeout 30m

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/internal/kvstate"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/localfs"
	"github.com/statedhq/stated/tiered/metered"
	"github.com/statedhq/stated/tiered/s3store"
	"github.com/statedhq/stated/tiered/s3store/s3test"
)

const (
	benchValue = 1 << 10 // bytes per value, pseudo-random (incompressible)
	// envBenchSizes selects the state sizes, e.g. "1GiB,4GiB".
	envBenchSizes     = "STATED_BENCH_REMOTE_SIZES"
	defaultBenchSizes = "64MiB,256MiB"
	// benchSeed makes every value a function of its key index and version,
	// so a reader can check what it got without keeping the state.
	benchSeed = 0x5eed_0016
	// benchBlockCache is the block cache of every restored instance: small,
	// so that reads after a restore go to the secondary cache or the store
	// (remote mode) or to the local files (local mode).
	benchBlockCache = 8 << 20
	// benchColdReads random keys are read cold, then warm. A cold get
	// fetches index, filter and data blocks in 32 KiB units: 5,000 of
	// them fetched 260 MB at 1 GiB, which the default 256 MiB secondary
	// cache about holds (the warm pass is then served locally), and
	// 610 MB at 4 GiB, which it does not.
	benchColdReads = 5_000
	// benchSampleReads random keys are read by state-2x-cache before it
	// scans every key.
	benchSampleReads = 20_000
)

// benchSizes parses envBenchSizes: sizes with a MiB or GiB suffix.
func benchSizes(b *testing.B) []string {
	s := os.Getenv(envBenchSizes)
	if s == "" {
		s = defaultBenchSizes
	}
	names := strings.Split(s, ",")
	for _, n := range names {
		if _, err := parseBenchSize(n); err != nil {
			b.Fatalf("%s=%q: %v", envBenchSizes, s, err)
		}
	}
	return names
}

func parseBenchSize(s string) (int, error) {
	for suffix, unit := range map[string]int{"MiB": 1 << 20, "GiB": 1 << 30} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			v, err := strconv.Atoi(n)
			if err != nil || v <= 0 {
				return 0, fmt.Errorf("size %q is not a positive number of %s", s, suffix)
			}
			return v * unit, nil
		}
	}
	return 0, fmt.Errorf("size %q has no MiB or GiB suffix", s)
}

// benchKey is key index i: key group i%128, so consecutive indexes spread
// over every key group and a random index is a random key group.
func benchKey(i int) backend.Key { return key(i%128, fmt.Sprintf("k%09d", i)) }

// benchVal fills buf with the value of key index i at version ver.
func benchVal(buf []byte, i, ver int) {
	var g rand.PCG
	g.Seed(benchSeed^uint64(i), uint64(ver))
	for o := 0; o+8 <= len(buf); o += 8 {
		binary.LittleEndian.PutUint64(buf[o:], g.Uint64())
	}
}

// benchRun is the state of one size and mode, shared by its phases.
type benchRun struct {
	remote bool
	size   int
	n      int // keys: indexes [0, n)
	store  *metered.Store
	root   string // parent of the instances' local directories
	dirs   int
	ver    int // version of the keys that change (i%100 == 0); others 0
	src    *Backend
	h      *backend.Handle // newest checkpoint of src
	first  *backend.Handle // checkpoint 1, right after the fill
	nextID uint64
	// restored is the instance restore-first-get opened, not read from
	// yet but by its first get; warm has been read by get-cold.
	restored, warm *Backend
	thirds         []*backend.Handle // rescale-3to4's old handles
}

// BenchmarkRemote runs the phases above for each size, local mode first.
func BenchmarkRemote(b *testing.B) {
	for _, size := range benchSizes(b) {
		for _, remote := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/%s", size, modeName(remote)), func(b *testing.B) {
				r := newBenchRun(b, remote, size)
				defer r.closeAll(b)
				b.Run("checkpoint-after-1pct", r.checkpointAfterChange)
				r.closeSource(b)
				b.Run("restore-first-get", r.restoreFirstGet)
				b.Run("get-cold", r.getCold)
				b.Run("get-warm", r.getWarm)
				r.closeRestored(b)
				b.Run("restore-first-get-unchanged", r.restoreUnchanged)
				b.Run("rescale-3to4", r.rescale)
				if remote {
					b.Run("state-2x-cache", r.overCache)
				}
			})
		}
	}
}

func modeName(remote bool) string {
	if remote {
		return "remote"
	}
	return "local"
}

// benchStore is the S3 server s3test names, else a local directory; the
// caller's cleanup empties and closes it.
func benchStore(b *testing.B) tiered.Store {
	if s3test.Real() {
		st, err := s3store.Open(context.Background(), s3test.RealOptions(b))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		return st
	}
	ls, err := localfs.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	return ls
}

// newBenchRun fills an instance of the whole range with size bytes of
// values and takes checkpoint 1.
func newBenchRun(b *testing.B, remote bool, size string) *benchRun {
	sz, _ := parseBenchSize(size)
	r := &benchRun{remote: remote, size: sz, n: sz / benchValue, store: metered.New(benchStore(b)),
		root: b.TempDir(), nextID: 1}
	r.src = r.open(b, full(), nil, 0)
	start := time.Now()
	r.fill(b)
	took := time.Since(start)
	b.Logf("%s %s: %d keys written in %s (%.0f MB/s), %d bytes sent to the store meanwhile",
		size, modeName(remote), r.n, took.Round(time.Millisecond), float64(r.size)/took.Seconds()/1e6, r.store.Counts().BytesUp)
	// Flushes of keys written in order make level-0 tables that do not
	// overlap, and Pebble leaves up to 500 of those in level 0 (its
	// compaction score counts sublevels); a remote-mode restore ingests
	// level-0 tables one at a time. A long-running instance holds most
	// of its state in the lower levels: move it there (moves, not
	// rewrites, as nothing overlaps).
	start, up := time.Now(), r.store.Counts().BytesUp
	if err := r.src.DB().Compact(context.Background(), []byte{0}, []byte{0xff, 0xff}, true); err != nil {
		b.Fatal(err)
	}
	b.Logf("%s %s: compacted in %s, %d bytes sent to the store meanwhile", size, modeName(remote),
		time.Since(start).Round(time.Millisecond), r.store.Counts().BytesUp-up)
	r.h = r.checkpoint(b, r.src)
	r.first = r.h
	return r
}

// fill writes every key in key order (key group, then index): flushes
// then produce tables that do not overlap, which Pebble moves down the
// levels instead of rewriting them, so the state is written about once.
func (r *benchRun) fill(b *testing.B) {
	const perBatch = 1024
	val := make([]byte, benchValue)
	for kg := range 128 {
		for i := kg; i < r.n; {
			var perr error
			err := r.src.Group(func(w backend.GroupWriter) {
				for j := 0; j < perBatch && i < r.n; j, i = j+1, i+128 {
					benchVal(val, i, 0)
					if perr = w.Put("v", benchKey(i), val); perr != nil {
						return
					}
				}
			})
			if err != nil || perr != nil {
				b.Fatalf("fill: %v %v", err, perr)
			}
		}
	}
}

// open starts an instance of kg restored from hs; cacheBytes is the
// secondary cache in remote mode (0: the default).
func (r *benchRun) open(b *testing.B, kg backend.KeyGroupRange, hs []*backend.Handle, cacheBytes int64) *Backend {
	b.Helper()
	r.dirs++
	opts := backend.Options{Task: testTask, KeyGroups: kg, States: testStates, Store: r.store, Restore: hs}
	lo := Options{Dir: fmt.Sprintf("%s/inst-%d", r.root, r.dirs)}
	if hs != nil {
		lo.CacheSize = benchBlockCache
	}
	if r.remote {
		lo.Remote = &RemoteOptions{Store: r.store, CacheBytes: cacheBytes, SpoolDir: r.root}
	}
	inst, err := Open(opts, lo)
	if err != nil {
		b.Fatal(err)
	}
	return inst
}

// close closes inst and removes its local directory: at 4 GiB a local-mode
// instance holds the whole state on disk.
func (r *benchRun) close(b *testing.B, inst *Backend) {
	b.Helper()
	if err := inst.Close(); err != nil {
		b.Fatal(err)
	}
	if err := os.RemoveAll(inst.lo.Dir); err != nil {
		b.Fatal(err)
	}
}

func (r *benchRun) checkpoint(b *testing.B, inst *Backend) *backend.Handle {
	b.Helper()
	id := r.nextID
	r.nextID++
	h := benchCheckpoint(b, inst, id)
	return h
}

func benchCheckpoint(b *testing.B, inst *Backend, id uint64) *backend.Handle {
	b.Helper()
	p, err := inst.Snapshot(context.Background(), id)
	if err != nil {
		b.Fatal(err)
	}
	h, err := p.Run(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	inst.NotifyCheckpointComplete(id)
	return h
}

// versionOf is the version of key index i when the keys that change
// (i%100 == 0) are at version ver.
func versionOf(i, ver int) int {
	if i%100 == 0 {
		return ver
	}
	return 0
}

// check fails b unless inst serves key index i with its value at version
// ver.
func (r *benchRun) check(b *testing.B, inst *Backend, i, ver int, want []byte) {
	got, ok, err := inst.Get("v", benchKey(i))
	if err != nil || !ok {
		b.Fatalf("get of key %d: present %v, %v", i, ok, err)
	}
	benchVal(want, i, ver)
	if !bytes.Equal(got, want) {
		b.Fatalf("get of key %d: wrong value (%d bytes)", i, len(got))
	}
}

// checkpointAfterChange: 1% of the keys change; reported are the bytes
// sent by the checkpoint (snapshot call and upload) and by everything
// since the previous one (in remote mode flushes and compactions write
// their SSTs to the store as they happen).
func (r *benchRun) checkpointAfterChange(b *testing.B) {
	val := make([]byte, benchValue)
	retries := r.src.HandOffRetries()
	for range b.N {
		b.StopTimer()
		before := r.store.Counts().BytesUp
		r.ver++
		for i := 0; i < r.n; i += 100 {
			benchVal(val, i, r.ver)
			if err := r.src.Put("v", benchKey(i), val); err != nil {
				b.Fatal(err)
			}
		}
		atChk := r.store.Counts().BytesUp
		b.StartTimer()
		r.h = r.checkpoint(b, r.src)
		b.StopTimer()
		after := r.store.Counts().BytesUp
		b.ReportMetric(float64(after-atChk), "B-at-checkpoint")
		b.ReportMetric(float64(after-before), "B-since-last")
	}
	b.ReportMetric(float64(r.h.FullSize), "B-state")
	b.ReportMetric(float64(len(r.h.Files)), "files")
	// Remote mode: hand-off attempts that met a compaction removing a
	// table, each a round of store calls per table (remotesnap.go).
	b.ReportMetric(float64(r.src.HandOffRetries()-retries)/float64(b.N), "handoff-retries")
}

func (r *benchRun) closeSource(b *testing.B) {
	if r.src != nil {
		r.close(b, r.src)
		r.src = nil
	}
}

// restoreFirstGet: Open with a restore of the whole state to the first
// get it serves; bytes read are counted up to that get. The instance
// stays open for get-cold.
func (r *benchRun) restoreFirstGet(b *testing.B) {
	r.restoreTimed(b, r.h, r.ver, true)
}

// restoreUnchanged is restoreFirstGet from checkpoint 1, taken right
// after the fill: its tables hold disjoint key ranges. The change of 1%
// adds level-0 tables that span every key group, which the first get
// reads too (their filter and index blocks); the difference between the
// two is that cost.
func (r *benchRun) restoreUnchanged(b *testing.B) {
	r.restoreTimed(b, r.first, 0, false)
}

// restoreRounds is how many restores each iteration of a restore
// benchmark times: single restores of a few tens of milliseconds spread
// widely on a shared machine, so the time to first get is reported as the
// median (and the slowest) of these; the other figures are means.
const restoreRounds = 5

// restoreTimed times restores of h (whose changed keys have version ver)
// to their first get; keep leaves the last one open as r.restored.
func (r *benchRun) restoreTimed(b *testing.B, h *backend.Handle, ver int, keep bool) {
	rng := rand.New(rand.NewPCG(benchSeed, 1))
	val := make([]byte, benchValue)
	var total, check, ingest time.Duration
	var read, calls, ranged uint64
	var each []time.Duration
	for n := range b.N * restoreRounds {
		b.StopTimer()
		r.closeRestored(b)
		i := rng.IntN(r.n)
		before := r.store.Counts()
		b.StartTimer()
		start := time.Now()
		inst := r.open(b, full(), []*backend.Handle{h}, 0)
		r.check(b, inst, i, versionOf(i, ver), val)
		took := time.Since(start)
		total += took
		each = append(each, took)
		b.StopTimer()
		st := inst.RestoreStats()
		check, ingest = check+st.Check, ingest+st.Ingest
		after := r.store.Counts()
		read += after.BytesDown - before.BytesDown
		calls += storeCalls(after) - storeCalls(before)
		ranged += after.Calls[tiered.OpGetRange] - before.Calls[tiered.OpGetRange]
		if keep && n == b.N*restoreRounds-1 {
			r.restored = inst
		} else {
			r.close(b, inst)
		}
	}
	runs := float64(b.N * restoreRounds)
	slices.Sort(each)
	b.ReportMetric(float64(each[len(each)/2].Microseconds())/1e3, "ms-to-first-get")
	b.ReportMetric(float64(each[len(each)-1].Microseconds())/1e3, "ms-to-first-get-max")
	if r.remote {
		b.ReportMetric(float64(check.Microseconds())/1e3/runs, "ms-check")
		b.ReportMetric(float64(ingest.Microseconds())/1e3/runs, "ms-ingest")
	}
	b.ReportMetric(float64(read)/runs, "B-read")
	b.ReportMetric(float64(calls)/runs, "store-calls")
	// Ranged reads up to the first get: in remote mode the get's own (the
	// filter, index and data blocks of a table per level and per level-0
	// table), as the ingestion reads nothing.
	b.ReportMetric(float64(ranged)/runs, "ranged-reads")
	b.ReportMetric(float64(len(h.Files)), "files")
	b.ReportMetric(float64(l0Files(h)), "l0-files")
	b.ReportMetric(float64(h.FullSize), "B-state")
}

// l0Files counts the tables of h at level 0 (remote-mode handles say).
func l0Files(h *backend.Handle) int {
	n := 0
	for _, f := range h.Files {
		if f.Table != nil && f.Table.Level == 0 {
			n++
		}
	}
	return n
}

// storeCalls is the number of store requests c counts: what a restore
// costs beyond the bytes it reads.
func storeCalls(c metered.Counts) uint64 {
	var n uint64
	for _, k := range c.Calls {
		n += k
	}
	return n
}

// reads gets the keys of idx from inst, checking each value, and returns
// the sorted latencies and the bytes read from the store meanwhile.
func (r *benchRun) reads(b *testing.B, inst *Backend, idx []int) ([]time.Duration, uint64) {
	val := make([]byte, benchValue)
	lat := make([]time.Duration, 0, len(idx))
	down := r.store.Counts().BytesDown
	for _, i := range idx {
		start := time.Now()
		got, ok, err := inst.Get("v", benchKey(i))
		lat = append(lat, time.Since(start))
		if err != nil || !ok {
			b.Fatalf("get of key %d: present %v, %v", i, ok, err)
		}
		benchVal(val, i, versionOf(i, r.ver))
		if !bytes.Equal(got, val) {
			b.Fatalf("get of key %d: wrong value (%d bytes)", i, len(got))
		}
	}
	slices.Sort(lat)
	return lat, r.store.Counts().BytesDown - down
}

func reportLatency(b *testing.B, lat []time.Duration, read uint64) {
	at := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) / 1e3 }
	b.ReportMetric(at(0.50), "p50-us")
	b.ReportMetric(at(0.99), "p99-us")
	b.ReportMetric(float64(len(lat)), "gets")
	b.ReportMetric(float64(read), "B-read")
}

// randomKeys returns n random key indexes (with repeats) of a fixed seed.
func (r *benchRun) randomKeys(n int, stream uint64) []int {
	rng := rand.New(rand.NewPCG(benchSeed, stream))
	idx := make([]int, n)
	for j := range idx {
		idx[j] = rng.IntN(r.n)
	}
	return idx
}

// getCold reads random keys from an instance that has just been restored
// and served a single get.
func (r *benchRun) getCold(b *testing.B) {
	idx := r.randomKeys(benchColdReads, 2)
	for range b.N {
		b.StopTimer()
		inst := r.restored
		r.restored = nil
		if inst == nil {
			inst = r.open(b, full(), []*backend.Handle{r.h}, 0)
		}
		if r.warm != nil {
			r.close(b, r.warm)
		}
		r.warm = inst
		b.StartTimer()
		lat, read := r.reads(b, inst, idx)
		b.StopTimer()
		reportLatency(b, lat, read)
	}
}

// getWarm reads getCold's keys again from the same instance.
func (r *benchRun) getWarm(b *testing.B) {
	idx := r.randomKeys(benchColdReads, 2)
	b.StopTimer()
	if r.warm == nil {
		r.warm = r.open(b, full(), []*backend.Handle{r.h}, 0)
		r.reads(b, r.warm, idx)
	}
	for range b.N {
		b.StartTimer()
		lat, read := r.reads(b, r.warm, idx)
		b.StopTimer()
		reportLatency(b, lat, read)
	}
}

func (r *benchRun) closeRestored(b *testing.B) {
	for _, p := range []**Backend{&r.restored, &r.warm} {
		if *p != nil {
			r.close(b, *p)
			*p = nil
		}
	}
}

// rescale: the state split by three instances that each own a third of
// the key groups (restored from the checkpoint, then checkpointed: not
// timed) goes to four new subtasks, each opened from the three handles
// and timed to its first get (bytes read are counted up to it, summed
// over the four). After the timing each reads a sample of its keys back,
// and a key outside its range must be refused.
func (r *benchRun) rescale(b *testing.B) {
	b.StopTimer()
	if r.thirds == nil {
		for i := range 3 {
			inst := r.open(b, subtaskRange(i, 3), []*backend.Handle{r.h}, 0)
			r.thirds = append(r.thirds, r.checkpoint(b, inst))
			r.close(b, inst)
		}
	}
	val := make([]byte, benchValue)
	rng := rand.New(rand.NewPCG(benchSeed, 3))
	for range b.N {
		var sum, longest time.Duration
		var read, calls uint64
		for p := range 4 {
			kg := subtaskRange(p, 4)
			i := randomIn(rng, r.n, kg)
			before := r.store.Counts()
			b.StartTimer()
			start := time.Now()
			inst := r.open(b, kg, r.thirds, 0)
			r.check(b, inst, i, versionOf(i, r.ver), val)
			took := time.Since(start)
			b.StopTimer()
			after := r.store.Counts()
			read += after.BytesDown - before.BytesDown
			calls += storeCalls(after) - storeCalls(before)
			sum += took
			longest = max(longest, took)
			for range 200 {
				j := randomIn(rng, r.n, kg)
				r.check(b, inst, j, versionOf(j, r.ver), val)
			}
			if _, _, err := inst.Get("v", benchKey(randomIn(rng, r.n, subtaskRange((p+1)%4, 4)))); err == nil {
				b.Fatalf("subtask %d of 4 served a key outside %s", p, kg)
			}
			r.close(b, inst)
		}
		b.ReportMetric(float64(longest.Microseconds())/1e3, "max-ms")
		b.ReportMetric(float64(sum.Microseconds())/1e3, "sum-ms")
		b.ReportMetric(float64(read), "B-read")
		b.ReportMetric(float64(calls), "store-calls")
	}
}

// randomIn returns a random key index of [0, n) in key-group range kg.
func randomIn(rng *rand.Rand, n int, kg backend.KeyGroupRange) int {
	for {
		if i := rng.IntN(n); kg.Contains(i % 128) {
			return i
		}
	}
}

// overCache (remote mode): a restore whose secondary cache holds half the
// state reads random keys (latency and bytes read reported), then scans
// every key in order, so the cache has to evict; every value is checked
// and the scan must find exactly the keys written.
func (r *benchRun) overCache(b *testing.B) {
	idx := r.randomKeys(benchSampleReads, 4)
	for range b.N {
		b.StopTimer()
		inst := r.open(b, full(), []*backend.Handle{r.h}, int64(r.size/2))
		b.StartTimer()
		lat, read := r.reads(b, inst, idx)
		b.StopTimer()
		reportLatency(b, lat, read)
		down := r.store.Counts().BytesDown
		start := time.Now()
		r.scanAll(b, inst)
		took := time.Since(start)
		b.ReportMetric(took.Seconds(), "scan-s")
		b.ReportMetric(float64(r.store.Counts().BytesDown-down), "B-read-scan")
		b.ReportMetric(float64(r.size/2), "B-cache")
		r.close(b, inst)
	}
}

// scanAll iterates over the stored entries of every key group and checks
// that they are the keys written, in fill's order, with their values.
func (r *benchRun) scanAll(b *testing.B, inst *Backend) {
	lo, hi := kvstate.KeyGroupPrefix(0), kvstate.KeyGroupPrefix(128)
	it, err := inst.DB().NewIter(nil)
	if err != nil {
		b.Fatal(err)
	}
	defer it.Close()
	val := make([]byte, benchValue)
	ok := it.SeekGE(lo)
	seen := 0
	for kg := range 128 {
		for i := kg; i < r.n; i += 128 {
			if !ok || bytes.Compare(it.Key(), hi) >= 0 {
				b.Fatalf("scan ended after %d of %d keys", seen, r.n)
			}
			if want := storedKey(benchKey(i)); string(it.Key()) != want {
				b.Fatalf("scan: entry %d is %x, want key %d (%x)", seen, it.Key(), i, want)
			}
			benchVal(val, i, versionOf(i, r.ver))
			v, err := it.ValueAndErr()
			if err != nil || len(v) < benchValue || !bytes.Equal(v[len(v)-benchValue:], val) {
				b.Fatalf("scan: key %d: wrong value (%d bytes, %v)", i, len(v), err)
			}
			seen++
			ok = it.Next()
		}
	}
	if ok && bytes.Compare(it.Key(), hi) < 0 {
		b.Fatalf("scan: entry %x after the %d keys written", it.Key(), r.n)
	}
	if err := it.Error(); err != nil {
		b.Fatal(err)
	}
}

// closeAll closes what a failed or filtered run left open.
func (r *benchRun) closeAll(b *testing.B) {
	r.closeSource(b)
	r.closeRestored(b)
}
