package rescale_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/rescale"
	"github.com/statedhq/stated/tiered/localfs"
)

// The ns/op of these benchmarks cover every round of every variant plus
// the spot checks and closes; the ms/... medians are the figures to
// compare.

// BenchmarkLSMRescale measures restoring an lsm job at a new parallelism
// (3->4 and 4->3) against, in the same run:
//
//   - plain: restoring the same job at its old parallelism (the same bytes
//     of state, no clipping, one handle per subtask);
//   - naive: for every new subtask, restoring every overlapping old handle
//     whole, scanning every key and re-inserting those of the new range
//     into a fresh Pebble store.
//
// The variants run interleaved, STATED_RESCALE_BENCH_ROUNDS rounds
// (default 7) per benchmark iteration, each round starting with the next
// variant, after one untimed warm-up restore of rescale and plain; the
// medians are reported (the machine is noisy). The dirty pages of a
// sample are synced before the next (untimed). With -v every sample logs
// its subtasks' steps. Rescale and plain restore the subtasks of one
// sample through a fresh lsm.DownloadCache, as a daemon's restores share
// one: the new subtasks of a rescale then download each old file once;
// nothing is cached from one sample to the next. Naive uses no cache.
//
// The rescale variant also reports lsm's clip step
// (lsm.Backend.RestoreStats: every Excise call of the restores, the
// extra handles' temporary stores included) in ms per GiB removed from
// downloaded tables, the bytes read from checkpoint storage and taken from
// the cache, and the time it spent adding the other handles' key groups.
//
// Every variant restores every subtask of the job, one after another, from
// checkpoints in a local-directory store (tiered/localfs). The total state
// is STATED_RESCALE_BENCH_BYTES bytes (default 64 MiB, 16 MiB with -short;
// the 1 GiB figures in the README come from
// STATED_RESCALE_BENCH_BYTES=1073741824 go test ./rescale -run '^$' -bench LSMRescale -benchtime 1x -timeout 60m).
func BenchmarkLSMRescale(b *testing.B) {
	total := int64(64 << 20)
	if testing.Short() {
		total = 16 << 20
	}
	if s := os.Getenv("STATED_RESCALE_BENCH_BYTES"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1<<20 {
			b.Fatalf("STATED_RESCALE_BENCH_BYTES=%q: want a byte count of at least 1 MiB", s)
		}
		total = n
	}
	rounds := 7
	if s := os.Getenv("STATED_RESCALE_BENCH_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("STATED_RESCALE_BENCH_ROUNDS=%q: want a positive count", s)
		}
		rounds = n
	}
	for _, c := range []struct{ oldP, newP int }{{3, 4}, {4, 3}} {
		bj := newBenchJob(b, total, c.oldP)
		name := fmt.Sprintf("%dto%d", c.oldP, c.newP)
		b.Run(name, func(b *testing.B) {
			b.SetBytes(bj.bytes)
			type variant struct {
				name string
				fn   func(b *testing.B) time.Duration
			}
			variants := []variant{
				{"rescale", func(b *testing.B) time.Duration { return bj.rescale(b, c.newP) }},
				{"plain", func(b *testing.B) time.Duration { return bj.plain(b) }},
				{"naive", func(b *testing.B) time.Duration { return bj.naive(b, c.newP) }},
			}
			times := map[string][]time.Duration{}
			read := map[string][]float64{} // MiB read from checkpoint storage
			var clips []lsm.RestoreStats   // the rescale samples' sums
			rereads := 0                   // objects a rescale sample read more than once
			// One untimed restore of each cheap variant first: the first
			// sample after writing the job is slow whatever it is.
			syncDisks()
			variants[0].fn(b)
			variants[1].fn(b)
			for i := 0; i < b.N; i++ {
				for r := 0; r < rounds; r++ {
					for k := range variants {
						v := variants[(k+r)%len(variants)]
						syncDisks()
						bj.store.read.Store(0)
						bj.store.reads()
						bj.stats = lsm.RestoreStats{}
						d := v.fn(b)
						times[v.name] = append(times[v.name], d)
						read[v.name] = append(read[v.name], float64(bj.store.read.Load())/(1<<20))
						if v.name == "rescale" {
							clips = append(clips, bj.stats)
							for _, n := range bj.store.reads() {
								if n > 1 {
									rereads++
								}
							}
						}
					}
				}
			}
			res := map[string]time.Duration{}
			for _, v := range variants {
				res[v.name] = medianDuration(times[v.name])
				b.ReportMetric(float64(res[v.name].Microseconds())/1000, "ms/"+v.name)
				b.ReportMetric(median(read[v.name]), "MiB-read/"+v.name)
			}
			ratio := float64(res["rescale"]) / float64(res["plain"])
			speedup := float64(res["naive"]) / float64(res["rescale"])
			b.ReportMetric(ratio, "rescale/plain")
			b.ReportMetric(speedup, "naive/rescale")
			var clipMs, clipMiB, perGiB, fromCache, skipped, copyMs []float64
			for _, rs := range clips {
				ms := float64(rs.Clip.Microseconds()) / 1000
				clipMs = append(clipMs, ms)
				clipMiB = append(clipMiB, float64(rs.BytesClipped)/(1<<20))
				if rs.BytesClipped > 0 {
					perGiB = append(perGiB, ms/(float64(rs.BytesClipped)/(1<<30)))
				}
				fromCache = append(fromCache, float64(rs.BytesFromCache)/(1<<20))
				skipped = append(skipped, float64(rs.BytesSkipped)/(1<<20))
				copyMs = append(copyMs, float64(rs.Copy.Microseconds())/1000)
			}
			b.ReportMetric(median(clipMs), "ms/clip")
			if len(perGiB) > 0 {
				b.ReportMetric(median(perGiB), "ms/GiB-removed")
			}
			b.ReportMetric(median(clipMiB), "MiB-clipped")
			b.ReportMetric(float64(clips[0].ClipSpans), "excises")
			b.ReportMetric(median(fromCache), "MiB-from-cache")
			b.ReportMetric(median(skipped), "MiB-skipped")
			b.ReportMetric(median(copyMs), "ms/copy")
			b.ReportMetric(float64(rereads), "objects-reread")
			perGiBText := "no bytes removed"
			if len(perGiB) > 0 {
				perGiBText = fmt.Sprintf("%.1f ms/GiB, target < 50", median(perGiB))
			}
			b.Logf("%s, %.0f MiB of state, medians of %d interleaved samples: rescale %v, plain restore %v (rescale/plain %.2fx, target <= 1.2x), "+
				"naive %v (naive/rescale %.1fx, target >= 5x), clip %.1f ms in %d excise(s) for %.3f GiB removed from downloaded tables (%s); "+
				"rescale read %.0f MiB from checkpoint storage (plain %.0f MiB), took %.0f MiB from the download cache, skipped %.0f MiB; "+
				"samples: rescale %v, plain %v, naive %v",
				name, float64(bj.bytes)/(1<<20), len(times["rescale"]), res["rescale"].Round(time.Millisecond), res["plain"].Round(time.Millisecond),
				ratio, res["naive"].Round(time.Millisecond), speedup, median(clipMs), clips[0].ClipSpans, median(clipMiB)/1024, perGiBText,
				median(read["rescale"]), median(read["plain"]), median(fromCache), median(skipped),
				roundAll(times["rescale"]), roundAll(times["plain"]), roundAll(times["naive"]))
		})
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func medianDuration(ds []time.Duration) time.Duration {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d)
	}
	return time.Duration(median(xs))
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// benchJob is an lsm job of about bytes bytes at parallelism len(handles),
// checkpointed into a local-directory store.
type benchJob struct {
	dir     string
	store   *countingStore // over a localfs.Store
	maxP    int
	bytes   int64
	perKG   int // keys per key group
	handles []*backend.Handle
	n       int
	// stats sums the RestoreStats of the instances timeRestores opened.
	stats lsm.RestoreStats
}

const benchValue = 1024

func (j *benchJob) options(st int, r backend.KeyGroupRange) backend.Options {
	return backend.Options{Task: backend.TaskID{Job: "bench", Operator: "op", Subtask: st}, KeyGroups: r,
		MaxParallelism: j.maxP, States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}, Store: j.store}
}

func (j *benchJob) open(b *testing.B, o backend.Options) *lsm.Backend {
	b.Helper()
	return j.openCached(b, o, nil)
}

// openCached opens an instance whose restore goes through cache (nil: none).
func (j *benchJob) openCached(b *testing.B, o backend.Options, cache *lsm.DownloadCache) *lsm.Backend {
	b.Helper()
	j.n++
	inst, err := lsm.Open(o, lsm.Options{Dir: filepath.Join(j.dir, "inst", strconv.Itoa(j.n)), DownloadCache: cache})
	if err != nil {
		b.Fatalf("open %s from %d handle(s): %v", o.KeyGroups, len(o.Restore), err)
	}
	return inst
}

func benchKey(kg, i int) backend.Key {
	return backend.Key{KeyGroup: kg, Key: binary.BigEndian.AppendUint64(nil, uint64(i))}
}

// newBenchJob writes the job with incompressible values spread evenly over
// the key groups and checkpoints each subtask.
func newBenchJob(b *testing.B, total int64, p int) *benchJob {
	b.Helper()
	dir := b.TempDir()
	fs, err := localfs.Open(filepath.Join(dir, "store"))
	if err != nil {
		b.Fatal(err)
	}
	j := &benchJob{dir: dir, store: &countingStore{Store: fs}, maxP: backend.DefaultMaxParallelism}
	j.perKG = max(1, int(total/int64(benchValue*j.maxP)))
	j.bytes = int64(j.perKG) * int64(j.maxP) * benchValue
	start := time.Now()
	rng := rand.New(rand.NewPCG(uint64(p), 7))
	v := make([]byte, benchValue)
	for i := 0; i < p; i++ {
		r := backend.KeyGroupRangeForOperator(j.maxP, p, i)
		inst := j.open(b, j.options(i, r))
		for n := 0; n < j.perKG; n++ {
			for kg := r.Start; kg <= r.End; kg++ {
				for k := 0; k < len(v); k += 8 {
					binary.LittleEndian.PutUint64(v[k:], rng.Uint64())
				}
				if err := inst.Put("v", benchKey(kg, n), v); err != nil {
					b.Fatal(err)
				}
			}
		}
		snap, err := inst.Snapshot(ctx, 1)
		if err != nil {
			b.Fatal(err)
		}
		h, err := snap.Run(ctx)
		if err != nil {
			b.Fatal(err)
		}
		j.handles = append(j.handles, h)
		if err := inst.Close(); err != nil {
			b.Fatal(err)
		}
	}
	var full int64
	for _, h := range j.handles {
		full += h.FullSize
	}
	b.Logf("wrote %d MiB of values at parallelism %d (%d MiB of SSTs) in %v",
		j.bytes>>20, p, full>>20, time.Since(start).Round(time.Millisecond))
	return j
}

// verify spot-checks a restored subtask: keys of its first, middle and
// last key group are there, and nothing outside its range is readable.
func (j *benchJob) verify(b *testing.B, inst backend.Backend) {
	b.Helper()
	r := inst.Info().KeyGroups
	for _, kg := range []int{r.Start, (r.Start + r.End) / 2, r.End} {
		for _, n := range []int{0, j.perKG - 1} {
			if v, ok, err := inst.Get("v", benchKey(kg, n)); err != nil || !ok || len(v) != benchValue {
				b.Fatalf("restored %s: key %d of key group %d: ok=%v err=%v", r, n, kg, ok, err)
			}
		}
	}
}

// timeRestores opens every subtask of opts, one after another, through one
// fresh download cache (as a daemon's restores share one), and returns
// the time the opens took (verification, close and the cache's setup and
// removal are not timed).
func (j *benchJob) timeRestores(b *testing.B, opts []backend.Options) time.Duration {
	b.Helper()
	j.n++
	cacheDir := filepath.Join(j.dir, "download-cache", strconv.Itoa(j.n))
	cache, err := lsm.OpenDownloadCache(nil, cacheDir, lsm.DefaultDownloadCacheSize)
	if err != nil {
		b.Fatal(err)
	}
	var sum time.Duration
	var each []string
	for _, o := range opts {
		start := time.Now()
		inst := j.openCached(b, o, cache)
		d := time.Since(start)
		sum += d
		rs := inst.RestoreStats()
		j.addStats(rs)
		each = append(each, fmt.Sprintf("%s from %d handle(s) %v (download %v+%v, open %v, %d excise(s) %v, copy %v, graft %v; %d MiB fetched, %d from the cache, %d skipped)",
			o.KeyGroups, len(o.Restore), d.Round(time.Millisecond), rs.Download.Round(time.Millisecond),
			rs.DownloadExtra.Round(time.Millisecond), rs.Open.Round(time.Millisecond), rs.ClipSpans,
			rs.Clip.Round(time.Microsecond*100), rs.Copy.Round(time.Millisecond), rs.Graft.Round(time.Millisecond),
			rs.BytesDownloaded>>20, rs.BytesFromCache>>20, rs.BytesSkipped>>20))
		j.verify(b, inst)
		if err := inst.Close(); err != nil {
			b.Fatal(err)
		}
	}
	if err := cache.Close(); err != nil {
		b.Fatal(err)
	}
	if err := os.RemoveAll(cacheDir); err != nil {
		b.Fatal(err)
	}
	if testing.Verbose() {
		b.Logf("per subtask: %s", strings.Join(each, ", "))
	}
	return sum
}

func (j *benchJob) plan(b *testing.B, newP int) *rescale.Plan {
	b.Helper()
	plan, err := rescale.PlanOperator(j.handles, j.maxP, newP)
	if err != nil {
		b.Fatal(err)
	}
	return plan
}

func (j *benchJob) rescale(b *testing.B, newP int) time.Duration {
	plan := j.plan(b, newP)
	var opts []backend.Options
	for _, st := range plan.Subtasks {
		opts = append(opts, plan.Options(st, j.options(0, st.KeyGroups)))
	}
	return j.timeRestores(b, opts)
}

func (j *benchJob) plain(b *testing.B) time.Duration {
	var opts []backend.Options
	for i, h := range j.handles {
		o := j.options(i, h.KeyGroups)
		o.Restore = []*backend.Handle{h}
		opts = append(opts, o)
	}
	return j.timeRestores(b, opts)
}

// naive restores every overlapping old handle whole, scans all its keys
// and writes those of the new range into a fresh Pebble store.
func (j *benchJob) naive(b *testing.B, newP int) time.Duration {
	plan := j.plan(b, newP)
	var sum time.Duration
	for _, st := range plan.Subtasks {
		j.n++
		dst := filepath.Join(j.dir, "naive", strconv.Itoa(j.n))
		lo := binary.BigEndian.AppendUint16(nil, uint16(st.KeyGroups.Start))
		hi := binary.BigEndian.AppendUint16(nil, uint16(st.KeyGroups.End+1))
		start := time.Now()
		db, err := pebble.Open(dst, &pebble.Options{DisableWAL: true, FormatMajorVersion: pebble.FormatNewest,
			MemTableSize: lsm.DefaultMemTableSize, Logger: quiet{}})
		if err != nil {
			b.Fatal(err)
		}
		kept := 0
		for _, src := range st.Sources {
			o := j.options(src.Handle.Task.Subtask, src.Handle.KeyGroups)
			o.Restore = []*backend.Handle{src.Handle}
			inst := j.open(b, o)
			it, err := inst.DB().NewIter(nil)
			if err != nil {
				b.Fatal(err)
			}
			batch := db.NewBatch()
			for ok := it.First(); ok; ok = it.Next() {
				k := it.Key()
				if string(k) < string(lo) || string(k) >= string(hi) {
					continue
				}
				kept++
				if err := batch.Set(k, it.Value(), nil); err != nil {
					b.Fatal(err)
				}
				if batch.Len() >= 4<<20 {
					if err := db.Apply(batch, pebble.NoSync); err != nil {
						b.Fatal(err)
					}
					batch = db.NewBatch()
				}
			}
			if err := db.Apply(batch, pebble.NoSync); err != nil {
				b.Fatal(err)
			}
			if err := it.Close(); err != nil {
				b.Fatal(err)
			}
			if err := inst.Close(); err != nil {
				b.Fatal(err)
			}
		}
		sum += time.Since(start)
		if want := st.KeyGroups.Len() * j.perKG; kept != want {
			b.Fatalf("naive restore of %s kept %d keys, want %d", st.KeyGroups, kept, want)
		}
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
		if err := os.RemoveAll(dst); err != nil {
			b.Fatal(err)
		}
	}
	return sum
}

// addStats adds one restore's figures to j.stats.
func (j *benchJob) addStats(rs lsm.RestoreStats) {
	t := &j.stats
	t.FilesDownloaded += rs.FilesDownloaded
	t.FilesSkipped += rs.FilesSkipped
	t.BytesDownloaded += rs.BytesDownloaded
	t.BytesSkipped += rs.BytesSkipped
	t.FilesFromCache += rs.FilesFromCache
	t.BytesFromCache += rs.BytesFromCache
	t.Download += rs.Download
	t.DownloadExtra += rs.DownloadExtra
	t.Open += rs.Open
	t.Clip += rs.Clip
	t.ClipSpans += rs.ClipSpans
	t.BytesClipped += rs.BytesClipped
	t.Copy += rs.Copy
	t.BytesCopied += rs.BytesCopied
	t.Graft += rs.Graft
	t.Rewrite += rs.Rewrite
	t.Total += rs.Total
}

// quiet drops Pebble's informational log lines.
type quiet struct{}

func (quiet) Infof(string, ...any)              {}
func (quiet) Errorf(format string, args ...any) { pebble.DefaultLogger.Errorf(format, args...) }
func (quiet) Fatalf(format string, args ...any) { pebble.DefaultLogger.Fatalf(format, args...) }
