package host_test

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/cost"
	"github.com/statedhq/stated/tiered/metered"
	"github.com/statedhq/stated/tiered/s3store/s3test"
)

// BenchmarkRequestBudget is issue 39's request-budget benchmark: one
// daemon on an S3 bucket (the server STATED_TEST_S3_ENDPOINT names, as
// scripts/bench-request-budget.sh starts one; else an in-process fake),
// 16 file-backend tasks of one job holding STATED_BENCH_BUDGET_STATE of
// state in all (default 256MiB, 1 KiB values), updating
// STATED_BENCH_BUDGET_RATE keys per second each (default 200) for
// STATED_BENCH_BUDGET_SECONDS (default 30), with a checkpoint every
// second (every task snapshots when the trigger reaches it, as a
// barrier does, then the job completes it), with the changelog off and
// on. It reports the store's PUTs per checkpoint (trigger to completion),
// per second between checkpoints and per second overall, and the
// checkpoint's duration at p50 and p99; the log lists the PUTs by kind
// of object, the phases of the five slowest checkpoints and the median
// one (ckptPhases: the tasks' synchronous parts, every store call, how
// long this process did not run), and from which checkpoint the
// changelog manifests went into a pack. The first checkpoint (a full
// upload) is not counted.
// STATED_BENCH_BUDGET_INTERVAL sets the checkpoint interval (default 1s),
// STATED_BENCH_BUDGET_FLUSH_DELAY the changelog's --changelog-flush-delay
// (default: the store's), STATED_BENCH_BUDGET_PACK_FILE_BYTES the
// daemon's --pack-file-bytes (default: the daemon's; -1: off),
// STATED_BENCH_BUDGET_CHANGELOG the modes run ("off,on"). Besides the
// Put calls it reports the PUT requests S3 was sent per checkpoint
// (multipart uploads: one per part and two more), as s3store counts them.
//
//	scripts/bench-request-budget.sh                  # the figures
//	STATED_BENCH_BUDGET_STATE=4MiB STATED_BENCH_BUDGET_SECONDS=3 \
//	  go test ./host -run '^$' -bench RequestBudget -benchtime 1x   # a smoke run
func BenchmarkRequestBudget(b *testing.B) {
	state := envSize(b, "STATED_BENCH_BUDGET_STATE", 256<<20)
	rate := envInt(b, "STATED_BENCH_BUDGET_RATE", 200)
	secs := envInt(b, "STATED_BENCH_BUDGET_SECONDS", 30)
	interval := envDuration(b, "STATED_BENCH_BUDGET_INTERVAL", time.Second)
	delay := envDuration(b, "STATED_BENCH_BUDGET_FLUSH_DELAY", 0)
	var pack int64
	if v := os.Getenv("STATED_BENCH_BUDGET_PACK_FILE_BYTES"); v == "-1" {
		pack = -1
	} else if v != "" {
		pack = envSize(b, "STATED_BENCH_BUDGET_PACK_FILE_BYTES", 0)
	}
	modes := os.Getenv("STATED_BENCH_BUDGET_CHANGELOG")
	if modes == "" {
		modes = "off,on"
	}
	for _, m := range strings.Split(modes, ",") {
		if m != "off" && m != "on" {
			b.Fatalf("STATED_BENCH_BUDGET_CHANGELOG=%q: want off, on or off,on", modes)
		}
		cl := m == "on"
		b.Run(fmt.Sprintf("changelog=%v", cl), func(b *testing.B) {
			for b.Loop() {
				runBudget(b, budgetRun{changelog: cl, state: state, rate: rate, steady: time.Duration(secs) * time.Second,
					interval: interval, flushDelay: delay, packFileBytes: pack})
			}
		})
	}
}

// budgetRun is one run's settings.
type budgetRun struct {
	changelog            bool
	state                int64
	rate                 int
	steady               time.Duration
	interval, flushDelay time.Duration
	packFileBytes        int64
}

const (
	budgetTasks     = 16
	budgetValueSize = 1 << 10
)

func runBudget(b *testing.B, r budgetRun) {
	changelog, state, rate, steady := r.changelog, r.state, r.rate, r.steady
	ctx := context.Background()
	meter := metered.New(s3test.Store(b))
	store := &putCounter{Store: meter}
	putReqs := func() uint64 { return meter.Requests().Requests[cost.Put] }
	nd, err := host.Open(ctx, host.Options{DataDir: filepath.Join(b.TempDir(), "d"), Logger: quiet(), Store: store, Changelog: changelog,
		ChangelogFlushDelay: r.flushDelay, PackFileBytes: r.packFileBytes})
	if err != nil {
		b.Fatal(err)
	}
	defer nd.Close()
	c, err := client.Dial(nd.Socket(), client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	keys := int(state / budgetValueSize / budgetTasks)
	ins := make([]*client.Instance, budgetTasks)
	// taskKeys are keys of each task's own key groups (a key of another
	// task's range would be refused).
	taskKeys := make([][][]byte, budgetTasks)
	var wg sync.WaitGroup
	errs := make(chan error, budgetTasks)
	for i := range budgetTasks {
		in, err := c.Open(ctx, client.OpenSpec{Task: backend.TaskID{Job: "j", Operator: "op", Subtask: i},
			KeyGroups: backend.KeyGroupRangeForOperator(128, budgetTasks, i), MaxParallelism: 128, Parallelism: budgetTasks,
			Backend: backend.KindFile, States: valueState})
		if err != nil {
			b.Fatal(err)
		}
		ins[i] = in
		kgs := backend.KeyGroupRangeForOperator(128, budgetTasks, i)
		for n := 0; len(taskKeys[i]) < keys; n++ {
			k := fmt.Appendf(nil, "k%d", n)
			if g := in.KeyGroup(k); g >= kgs.Start && g <= kgs.End {
				taskKeys[i] = append(taskKeys[i], k)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 2))
			val := make([]byte, budgetValueSize)
			for k := range keys {
				binaryRand(r, val)
				in.Put("v", taskKeys[i][k], nil, val)
				if k%1024 == 1023 {
					if err := in.Sync(ctx); err != nil {
						errs <- err
						return
					}
				}
			}
			errs <- in.Sync(ctx)
		}()
	}
	wg.Wait()
	for range budgetTasks {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	// Checkpoint 1 uploads everything (and, with the changelog, the first
	// materialization): not part of the steady state measured.
	id := uint64(1)
	if err := budgetCheckpoint(ctx, c, ins, id); err != nil {
		b.Fatal(err)
	}

	// Each task updates rate keys a second, in steps of 10 ms, and takes
	// its snapshot when the trigger reaches it, in its own goroutine as a
	// task takes it when the barrier arrives.
	type trigger struct {
		id   uint64
		done chan<- snapDone
	}
	stop := make(chan struct{})
	trig := make([]chan trigger, budgetTasks)
	for i, in := range ins {
		trig[i] = make(chan trigger, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 1))
			val := make([]byte, budgetValueSize)
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			owed := 0.0
			for {
				select {
				case <-stop:
					return
				case t := <-trig[i]:
					t0 := time.Now()
					_, err := in.Snapshot(ctx, t.id, false)
					t.done <- snapDone{err: err, at: time.Now(), took: time.Since(t0)}
				case <-tick.C:
					owed += float64(rate) / 100
					for ; owed >= 1; owed-- {
						binaryRand(r, val)
						in.Put("v", taskKeys[i][r.IntN(keys)], nil, val)
					}
				}
			}
		}()
	}
	// A probe of this process's own stalls (a sleep of 1 ms that takes
	// much longer: the process got no CPU, or the runtime paused it), to
	// tell a slow store call whose server stalled from one whose caller
	// did not run.
	var stalls stallProbe
	go stalls.run(stop)
	var lat []time.Duration
	var fullSize int64 // of the last checkpoint, as the catalog counts it
	var perCkpt []putCounts
	var between putCounts
	var betweenTime time.Duration
	var ckptReqs uint64 // PUT requests sent during checkpoints
	var phases []ckptPhases
	t0 := time.Now()
	c0 := store.counts()
	next := time.Now().Add(r.interval)
	for time.Since(t0) < steady {
		idle := time.Now()
		time.Sleep(time.Until(next))
		next = next.Add(r.interval)
		start := time.Now()
		cs := store.counts()
		r0 := putReqs()
		between = between.add(cs.sub(c0))
		betweenTime += start.Sub(idle)
		id++
		ph := ckptPhases{start: start, runq: runQueueWait()}
		done := make(chan snapDone, budgetTasks)
		for i := range ins {
			trig[i] <- trigger{id: id, done: done}
		}
		for range ins {
			sd := <-done
			if sd.err != nil {
				b.Fatal(sd.err)
			}
			ph.firstSync = min(cmp.Or(ph.firstSync, time.Hour), sd.at.Sub(start))
			ph.lastSync = max(ph.lastSync, sd.at.Sub(start))
			ph.maxSyncCall = max(ph.maxSyncCall, sd.took)
		}
		ph.complete = time.Since(start)
		info, err := c.CompleteCheckpoint(ctx, "j", id)
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		ph.end = lat[len(lat)-1]
		if ct, ok := nd.Daemon().CheckpointTiming("j", id); ok {
			ph.daemonSync, ph.daemonAsync = ct.Sync, ct.Async
		}
		ph.puts = store.since(start)
		ph.stallMax, ph.stallSum = stalls.within(start, start.Add(ph.end))
		ph.runq = runQueueWait() - ph.runq
		phases = append(phases, ph)
		fullSize = info.GetFullSize()
		c0 = store.counts()
		ckptReqs += putReqs() - r0
		perCkpt = append(perCkpt, c0.sub(cs))
	}
	total := time.Since(t0)
	close(stop)
	wg.Wait()
	var all putCounts
	for _, p := range perCkpt {
		all = all.add(p)
	}
	all = all.add(between)
	n := float64(len(perCkpt))
	// The slowest checkpoints with what they wrote: the tail that p99
	// reports, to tell a slow upload from a late task.
	order := make([]int, len(lat))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(lat[b], lat[a]) })
	var slow []string
	for _, i := range order[:min(3, len(order))] {
		slow = append(slow, fmt.Sprintf("%v (%s)", lat[i].Round(time.Millisecond), perCkpt[i].per(1)))
	}
	b.Logf("slowest checkpoints: %s", strings.Join(slow, "; "))
	// A changelog manifest names one range per segment since its base, so
	// it grows with every checkpoint until the next materialization; past
	// backend.MaxInlineBytes it no longer rides in the handle and the
	// checkpoint writes a pack (one PUT more, and the catalog's check and
	// later delete of it).
	// (Without the changelog every checkpoint's files are a pack.)
	if first := slices.IndexFunc(perCkpt, func(p putCounts) bool { return p[putPack] > 0 }); changelog && first >= 0 {
		packed := 0
		for _, p := range perCkpt[first:] {
			if p[putPack] > 0 {
				packed++
			}
		}
		b.Logf("packs: from checkpoint %d of %d (%.0f s into the run), in %d of the %d from there", first+1, len(perCkpt),
			phases[first].start.Sub(t0).Seconds(), packed, len(perCkpt)-first)
	}
	// Where the slowest spent their time, and the median one for scale.
	for _, i := range order[:min(5, len(order))] {
		b.Logf("phases of a slow checkpoint: %s", phases[i])
	}
	if len(order) > 0 {
		b.Logf("phases of the median checkpoint: %s", phases[order[len(order)/2]])
	}
	slices.Sort(lat)
	b.ReportMetric(float64(all.total()-between.total())/n, "PUTs/ckpt")
	if meter.RequestsMeasured() {
		b.ReportMetric(float64(ckptReqs)/n, "PUT-requests/ckpt")
	}
	b.ReportMetric(float64(between.total())/betweenTime.Seconds(), "PUTs/s-between")
	b.ReportMetric(float64(all.total())/total.Seconds(), "PUTs/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1e3, "ckpt-p50-ms")
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds())/1e3, "ckpt-p99-ms")
	b.ReportMetric(float64(fullSize)/(1<<20), "full-MiB")
	var sum putCounts
	for _, p := range perCkpt {
		sum = sum.add(p)
	}
	b.Logf("changelog=%v flush delay=%v interval=%v state=%d B tasks=%d rate=%d/s/task checkpoints=%d: per checkpoint %s; between checkpoints per second %s",
		changelog, nd.ChangelogWriter().Options().FlushDelay, r.interval, state, budgetTasks, rate, len(perCkpt), sum.per(n), between.per(betweenTime.Seconds()))
}

// snapDone is a task's answer to a trigger: when its Snapshot call (the
// synchronous part) returned and how long the call took.
type snapDone struct {
	err  error
	at   time.Time
	took time.Duration
}

// ckptPhases is one checkpoint's time from its trigger, by phase: when
// the first and the last task's synchronous part returned (and the
// longest call), when CompleteCheckpoint was called and returned, the
// daemon's slowest synchronous and asynchronous part (CheckpointTiming),
// and every PUT made from the trigger to the completion with its start
// and end.
type ckptPhases struct {
	start                   time.Time
	firstSync, lastSync     time.Duration
	maxSyncCall             time.Duration
	complete, end           time.Duration
	daemonSync, daemonAsync time.Duration
	puts                    []putEvent
	stallMax, stallSum      time.Duration
	// runq is how long this process's threads waited for a CPU while
	// runnable (the kernel's schedstat, summed over threads; 0 where
	// there is none).
	runq time.Duration
}

func (p ckptPhases) String() string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Microseconds())/1e3) }
	var puts []string
	for _, e := range p.puts {
		if e.op != "" {
			puts = append(puts, fmt.Sprintf("%s %s-%s (%d)", e.op, ms(e.start.Sub(p.start)), ms(e.end.Sub(p.start)), e.size))
			continue
		}
		puts = append(puts, fmt.Sprintf("%s %s-%s (%d KiB)", putKindNames[e.kind], ms(e.start.Sub(p.start)), ms(e.end.Sub(p.start)), e.size>>10))
	}
	return fmt.Sprintf("total %s ms: syncs returned %s-%s (longest call %s), complete called %s; daemon's slowest sync %s async %s; "+
		"this process stalled %s ms at most, %s in all, its threads waited %s ms for a CPU; store calls [%s]",
		ms(p.end), ms(p.firstSync), ms(p.lastSync), ms(p.maxSyncCall), ms(p.complete), ms(p.daemonSync), ms(p.daemonAsync),
		ms(p.stallMax), ms(p.stallSum), ms(p.runq), strings.Join(puts, ", "))
}

// runQueueWait is the time this process's threads spent runnable but not
// running, summed over its threads (Linux's /proc/self/task/*/schedstat,
// second field; 0 elsewhere): the machine's load, as this process felt it.
func runQueueWait() time.Duration {
	dirs, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0
	}
	var sum int64
	for _, d := range dirs {
		data, err := os.ReadFile(filepath.Join("/proc/self/task", d.Name(), "schedstat"))
		if err != nil {
			continue // the thread exited
		}
		if f := strings.Fields(string(data)); len(f) >= 2 {
			if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				sum += n
			}
		}
	}
	return time.Duration(sum)
}

// stallProbe sleeps 1 ms at a time and keeps each sleep that overran by
// more than 5 ms: when this process did not run.
type stallProbe struct {
	mu     sync.Mutex
	stalls []putEvent // start and end of each overrun
}

func (s *stallProbe) run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		t := time.Now()
		time.Sleep(time.Millisecond)
		if e := time.Now(); e.Sub(t) > 6*time.Millisecond {
			s.mu.Lock()
			s.stalls = append(s.stalls, putEvent{start: t.Add(time.Millisecond), end: e})
			s.mu.Unlock()
		}
	}
}

// within returns the longest stall and the sum of the stalls that overlap
// from..to (their parts inside it).
func (s *stallProbe) within(from, to time.Time) (longest, sum time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.stalls {
		a, b := max(e.start.UnixNano(), from.UnixNano()), min(e.end.UnixNano(), to.UnixNano())
		if b > a {
			d := time.Duration(b - a)
			longest, sum = max(longest, d), sum+d
		}
	}
	return longest, sum
}

// budgetCheckpoint snapshots every instance at once and completes id.
func budgetCheckpoint(ctx context.Context, c *client.Client, ins []*client.Instance, id uint64) error {
	errs := make(chan error, len(ins))
	for _, in := range ins {
		go func() {
			_, err := in.Snapshot(ctx, id, false)
			errs <- err
		}()
	}
	for range ins {
		if err := <-errs; err != nil {
			return err
		}
	}
	_, err := c.CompleteCheckpoint(ctx, "j", id)
	return err
}

func binaryRand(r *rand.Rand, p []byte) {
	for i := 0; i+8 <= len(p); i += 8 {
		v := r.Uint64()
		for j := range 8 {
			p[i+j] = byte(v >> (8 * j))
		}
	}
}

// Kinds of object a PUT writes, by name.
const (
	putSegment = iota // a changelog segment (_changelog/...)
	putCatalog        // the catalog's manifest and job file
	putShared         // shared files (changelog bases, lsm SSTs)
	putCLManif        // a changelog instance's manifest in chk-N
	putPack           // a pack of small private files (chk-N/packed-...)
	putPrivate        // the other private files of a checkpoint
	numPutKinds
)

var putKindNames = [numPutKinds]string{"segments", "catalog", "shared", "changelog manifests", "packs", "private files"}

type putCounts [numPutKinds]uint64

func (p putCounts) add(q putCounts) putCounts {
	for i := range p {
		p[i] += q[i]
	}
	return p
}

func (p putCounts) sub(q putCounts) putCounts {
	for i := range p {
		p[i] -= q[i]
	}
	return p
}

func (p putCounts) total() (n uint64) {
	for _, v := range p {
		n += v
	}
	return n
}

func (p putCounts) per(d float64) string {
	var parts []string
	for i, v := range p {
		parts = append(parts, fmt.Sprintf("%s %.2f", putKindNames[i], float64(v)/d))
	}
	return fmt.Sprintf("%.2f PUTs (%s)", float64(p.total())/d, strings.Join(parts, ", "))
}

// putCounter counts the PUTs of the store it wraps by kind of object and
// keeps each one's start and end (since).
type putCounter struct {
	tiered.Store
	mu  sync.Mutex
	n   putCounts
	evs []putEvent
}

// putEvent is one store call: a PUT's kind of object and size, or
// another call's name (op), with its start and end.
type putEvent struct {
	kind       int
	op         string
	size       int64
	start, end time.Time
}

// since returns the PUTs that ended after t, in the order they started.
func (s *putCounter) since(t time.Time) []putEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []putEvent
	for _, e := range s.evs {
		if e.end.After(t) {
			out = append(out, e)
		}
	}
	// Forget what no later checkpoint asks for.
	s.evs = slices.DeleteFunc(s.evs, func(e putEvent) bool { return !e.end.After(t) })
	slices.SortFunc(out, func(a, b putEvent) int { return a.start.Compare(b.start) })
	return out
}

func (s *putCounter) record(name string, size int64, start time.Time) {
	s.recordOp(putEvent{kind: putKind(name), size: size, start: start})
}

func (s *putCounter) recordOp(e putEvent) {
	e.end = time.Now()
	s.mu.Lock()
	s.evs = append(s.evs, e)
	s.mu.Unlock()
}

// The other calls are traced, not counted.

func (s *putCounter) Stat(ctx context.Context, name string) (tiered.ObjectInfo, error) {
	defer s.recordOp(putEvent{op: "stat", start: time.Now()})
	return s.Store.Stat(ctx, name)
}

func (s *putCounter) List(ctx context.Context, prefix, startAfter string, limit int) (tiered.ListPage, error) {
	defer s.recordOp(putEvent{op: "list", start: time.Now()})
	return s.Store.List(ctx, prefix, startAfter, limit)
}

func (s *putCounter) Delete(ctx context.Context, name string) error {
	defer s.recordOp(putEvent{op: "delete", size: 1, start: time.Now()})
	return s.Store.Delete(ctx, name)
}

func (s *putCounter) DeleteBatch(ctx context.Context, names []string) error {
	defer s.recordOp(putEvent{op: "delete", size: int64(len(names)), start: time.Now()})
	return s.Store.DeleteBatch(ctx, names)
}

func (s *putCounter) Unwrap() tiered.Store { return s.Store }

func (s *putCounter) count(name string) {
	k := putKind(name)
	s.mu.Lock()
	s.n[k]++
	s.mu.Unlock()
}

// putKind is the kind of object name is.
func putKind(name string) int {
	k := putPrivate
	base := path.Base(name)
	switch {
	case strings.HasPrefix(name, "_changelog/"):
		k = putSegment
	case base == "_metadata" || base == "_catalog":
		k = putCatalog
	case strings.Contains(name, "/shared/"):
		k = putShared
	case base == "_changelog":
		k = putCLManif
	case strings.HasPrefix(base, "packed-"):
		k = putPack
	}
	return k
}

func (s *putCounter) counts() putCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func (s *putCounter) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	s.count(name)
	t := time.Now()
	defer s.record(name, size, t)
	return s.Store.Put(ctx, name, r, size)
}

func (s *putCounter) PutIfAbsent(ctx context.Context, name string, r io.Reader, size int64) error {
	s.count(name)
	t := time.Now()
	defer s.record(name, size, t)
	return s.Store.PutIfAbsent(ctx, name, r, size)
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func envDuration(b *testing.B, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		b.Fatalf("%s=%q: want a duration (e.g. 1s)", name, v)
	}
	return d
}

// envSize reads a size like 256MiB, 4KiB or 1000.
func envSize(b *testing.B, name string, def int64) int64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	mult := int64(1)
	for _, u := range []struct {
		s string
		m int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if s, ok := strings.CutSuffix(v, u.s); ok {
			v, mult = s, u.m
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive size (e.g. 256MiB)", name, os.Getenv(name))
	}
	return n * mult
}
