package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/internal/bytesize"
	"github.com/statedhq/stated/tiered/cost"
	"github.com/statedhq/stated/tiered/storeurl"
	"github.com/statedhq/stated/tools/bench/hist"
	"github.com/statedhq/stated/tools/bench/workload"
)

// Defaults of Params.
const (
	DefaultKeys     = 100_000
	DefaultTasks    = 1
	DefaultBatch    = client.DefaultMaxBatchOps
	DefaultInFlight = 4 * client.DefaultMaxBatchOps
	DefaultDuration = 10 * time.Second
	DefaultWarmup   = time.Second
	// MaxKeys bounds --keys: the ids are held in memory (8 bytes each).
	MaxKeys = 50_000_000
	// Baseline is the only --baseline there is.
	Baseline = "pebble"
	// embeddedHeapSnapshotCap replaces the daemon's default heap snapshot
	// cap (5 MiB) in the embedded daemon: a benchmark's state is larger,
	// and a declined checkpoint measures nothing.
	embeddedHeapSnapshotCap = 1 << 30
)

// Params are the parameters of "stated bench run". Zero values take the
// defaults (EnsureDefaults).
type Params struct {
	// Workload names the workload (workload.Names).
	Workload string `json:"workload"`
	// Workload's knobs; Effective holds them with the workload's defaults.
	WorkloadParams workload.Params `json:"workload_params"`
	Effective      workload.Params `json:"effective_workload_params"`
	// Tasks is the parallelism: instances of one job, each with its own
	// client connection (default 1).
	Tasks int `json:"tasks"`
	// Keys is the number of keys over all tasks (default DefaultKeys).
	Keys int `json:"keys"`
	// Batch is the client's operations per batch (default DefaultBatch).
	Batch int `json:"batch"`
	// InFlight bounds each task's operations issued and not answered
	// (default DefaultInFlight).
	InFlight int `json:"in_flight"`
	// Duration of the measured run phase (default DefaultDuration); unused
	// when Ops is set.
	Duration time.Duration `json:"duration_ns"`
	// Ops, when positive, is the run phase's operation count over all tasks.
	Ops int64 `json:"ops"`
	// Warmup runs the workload unmeasured before the run phase (default
	// DefaultWarmup; negative: none).
	Warmup time.Duration `json:"warmup_ns"`
	// Backends is the matrix's backends (default lsm).
	Backends []string `json:"backends"`
	// Changelog is the matrix's changelog settings (default off).
	Changelog []bool `json:"changelog"`
	// Repeat runs the matrix this many times, interleaved (default 1).
	Repeat int `json:"repeat"`
	// Baseline is "" or "pebble": raw in-process Pebble, same operations.
	Baseline string `json:"baseline,omitempty"`
	// RescaleTo is the parallelism of the rescale phase (default 2*Tasks,
	// at most MaxParallelism; negative: no rescale phase).
	RescaleTo int `json:"rescale_to"`
	// MaxParallelism of the job (default backend.DefaultMaxParallelism).
	MaxParallelism int `json:"max_parallelism"`
	// Socket, when set, is an external daemon's socket or host:port;
	// otherwise each run starts an embedded daemon in a temporary dir.
	Socket string `json:"socket,omitempty"`
	// Token is sent to an external daemon on TCP.
	Token string `json:"-"`
	// TLS, when set, is the TLS configuration of the connection to an
	// external daemon (client.Options.TLS).
	TLS *tls.Config `json:"-"`
	// Dir is where embedded daemons and baselines keep their temporary
	// data dirs (default os.TempDir()).
	Dir string `json:"dir,omitempty"`
	// CheckpointStore, when set, is the embedded daemons' checkpoint
	// store: file:///dir or s3://bucket/prefix (?endpoint=...; credentials
	// from the environment, as for "stated serve"). Each run gets a fresh
	// prefix under it, emptied when the run ends. Default: each daemon's
	// data dir.
	CheckpointStore string `json:"checkpoint_store,omitempty"`
	// Prices are the prices of the $/month figures (cost.ParsePrices's
	// form; default S3 Standard's list prices).
	Prices string `json:"prices,omitempty"`
	// Seed makes the operations reproducible (default 1).
	Seed uint64 `json:"seed"`
}

// EnsureDefaults fills zero fields with their defaults.
func (p *Params) EnsureDefaults() {
	if p.Tasks == 0 {
		p.Tasks = DefaultTasks
	}
	if p.Keys == 0 {
		p.Keys = DefaultKeys
	}
	if p.Batch == 0 {
		p.Batch = DefaultBatch
	}
	if p.InFlight == 0 {
		p.InFlight = DefaultInFlight
	}
	if p.Duration == 0 {
		p.Duration = DefaultDuration
	}
	if p.Warmup == 0 {
		p.Warmup = DefaultWarmup
	}
	if len(p.Backends) == 0 {
		p.Backends = []string{string(backend.KindLSM)}
	}
	if len(p.Changelog) == 0 {
		p.Changelog = []bool{false}
	}
	if p.Repeat == 0 {
		p.Repeat = 1
	}
	if p.MaxParallelism == 0 {
		p.MaxParallelism = backend.DefaultMaxParallelism
	}
	if p.RescaleTo == 0 {
		p.RescaleTo = min(2*p.Tasks, p.MaxParallelism)
	}
	if p.Seed == 0 {
		p.Seed = 1
	}
	if p.Dir == "" {
		p.Dir = os.TempDir()
	}
}

// Validate reports every problem of p at once; call EnsureDefaults first.
func (p *Params) Validate() error {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	spec, err := workload.Lookup(p.Workload)
	if err != nil {
		bad("%s", strings.TrimPrefix(err.Error(), "workload: "))
	} else if err := spec.Effective(p.WorkloadParams).Validate(); err != nil {
		bad("%s", strings.TrimPrefix(err.Error(), "workload: "))
	}
	if err := backend.ValidateMaxParallelism(p.MaxParallelism); err != nil {
		bad("max parallelism: %v", err)
	}
	if p.Tasks < 1 || p.Tasks > p.MaxParallelism {
		bad("tasks %d is outside [1, %d] (max parallelism)", p.Tasks, p.MaxParallelism)
	}
	if p.RescaleTo > p.MaxParallelism {
		bad("rescale-to %d is above the max parallelism %d", p.RescaleTo, p.MaxParallelism)
	}
	if p.Keys < p.Tasks || p.Keys > MaxKeys {
		bad("keys %d is outside [tasks=%d, %d]", p.Keys, p.Tasks, MaxKeys)
	}
	if p.Batch < 1 {
		bad("batch %d is below 1", p.Batch)
	}
	if p.InFlight < 1 || p.InFlight > 1<<20 {
		bad("in-flight %d is outside [1, %d]", p.InFlight, 1<<20)
	}
	if p.Duration < 0 {
		bad("duration %s is negative", p.Duration)
	}
	if p.Ops < 0 {
		bad("ops %d is negative", p.Ops)
	}
	if p.Repeat < 1 || p.Repeat > 1000 {
		bad("repeat %d is outside [1, 1000]", p.Repeat)
	}
	seen := map[string]bool{}
	for _, b := range p.Backends {
		if _, err := backend.ParseKind(b); err != nil {
			bad("backend %q is not heap, file or lsm", b)
		} else if seen[b] {
			bad("backend %s is listed twice", b)
		}
		seen[b] = true
	}
	if len(p.Changelog) > 2 || len(p.Changelog) == 2 && p.Changelog[0] == p.Changelog[1] {
		bad("changelog settings %v: give off, on or both once", p.Changelog)
	}
	if p.Baseline != "" && p.Baseline != Baseline {
		bad("baseline %q is not %q", p.Baseline, Baseline)
	}
	if _, err := cost.ParsePrices(p.Prices, cost.S3Standard); err != nil {
		bad("%s", strings.TrimPrefix(err.Error(), "cost: "))
	}
	if p.CheckpointStore != "" {
		if p.Socket != "" {
			bad("checkpoint store with socket: an external daemon has its own")
		} else if _, err := storeurl.Parse(p.CheckpointStore); err != nil {
			bad("checkpoint store: %s", strings.TrimPrefix(err.Error(), "storeurl: "))
		}
	}
	if p.Token != "" && p.Socket == "" {
		bad("token without socket: the embedded daemon needs none")
	}
	if len(errs) > 0 {
		return fmt.Errorf("bench: %s", strings.Join(errs, "; "))
	}
	return nil
}

// Config is one cell of the matrix.
type Config struct {
	Backend   string
	Changelog bool
	// Baseline: raw Pebble instead of a daemon (Backend unused).
	Baseline bool
}

// Name is the configuration's label in tables and reports: the backend,
// "+changelog" when on, or the baseline's name.
func (c Config) Name() string {
	if c.Baseline {
		return Baseline
	}
	if c.Changelog {
		return c.Backend + "+changelog"
	}
	return c.Backend
}

// Matrix lists the configurations p runs, each repeat in this order.
func (p *Params) Matrix() []Config {
	var out []Config
	for _, cl := range p.Changelog {
		for _, b := range p.Backends {
			out = append(out, Config{Backend: b, Changelog: cl})
		}
	}
	if p.Baseline != "" {
		out = append(out, Config{Baseline: true})
	}
	return out
}

// Runner runs the matrix. Progress and phase lines go to Progress.
type Runner struct {
	Params Params
	// Progress receives a progress bar (when Terminal) or plain lines.
	Progress io.Writer
	Terminal bool
	// Logger receives the embedded daemon's logs (default: warnings and
	// errors to stderr).
	Logger *slog.Logger
}

// Run runs every configuration Repeat times, interleaved (each repeat runs
// the whole matrix once, so that slow drifts of the machine touch every
// configuration alike), and returns the report.
func (r *Runner) Run(ctx context.Context) (*Report, error) {
	p := r.Params
	p.EnsureDefaults()
	if err := p.Validate(); err != nil {
		return nil, err
	}
	spec, _ := workload.Lookup(p.Workload)
	p.Effective = spec.Effective(p.WorkloadParams)
	if r.Logger == nil {
		r.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if r.Progress == nil {
		r.Progress = io.Discard
	}
	rep := &Report{Version: ReportVersion, Started: time.Now().UTC(), Params: p, Machine: machineInfo(), Git: gitInfo(ctx)}
	matrix := p.Matrix()
	keys := assignKeys(spec, p)
	var names []string
	for _, c := range matrix {
		names = append(names, c.Name())
	}
	for rep_i := 0; rep_i < p.Repeat; rep_i++ {
		for _, c := range matrix {
			pr := newProgress(r.Progress, r.Terminal, fmt.Sprintf("%s #%d", c.Name(), rep_i+1))
			figs, err := r.runOne(ctx, c, spec, keys, rep_i, pr)
			if err != nil {
				return nil, fmt.Errorf("bench: %s, repeat %d: %w", c.Name(), rep_i+1, err)
			}
			rep.Runs = append(rep.Runs, Run{Config: c.Name(), Repeat: rep_i + 1, Figures: figs})
		}
	}
	rep.Summary = summarize(names, rep.Runs)
	if p.Baseline != "" {
		rep.Ratios = ratios(rep.Summary, p.Baseline)
	}
	return rep, nil
}

// taskKeys is the key ids each task owns, and who owns a new id.
type taskKeys struct {
	ids      [][]uint64
	owner    func(id uint64) int
	firstNew uint64
}

// assignKeys splits ids [0, Keys) over the tasks as an engine routes
// records: by the key group of the key's hash.
func assignKeys(spec *workload.Spec, p Params) taskKeys {
	owner := func(id uint64) int {
		kg := backend.KeyGroupForHash(client.FNV1a32(spec.KeyOf(id)), p.MaxParallelism)
		return backend.OperatorForKeyGroup(p.MaxParallelism, p.Tasks, kg)
	}
	ids := make([][]uint64, p.Tasks)
	for id := uint64(0); id < uint64(p.Keys); id++ {
		o := owner(id)
		ids[o] = append(ids[o], id)
	}
	return taskKeys{ids: ids, owner: owner, firstNew: uint64(p.Keys)}
}

// runOne runs the phases of one configuration.
func (r *Runner) runOne(ctx context.Context, c Config, spec *workload.Spec, keys taskKeys, repeat int, pr *progress) (map[string]float64, error) {
	p := r.Params
	p.EnsureDefaults()
	figs := map[string]float64{}
	gens := make([]*workload.Gen, p.Tasks)
	for i := range gens {
		owns := func(id uint64) bool { return keys.owner(id) == i }
		g, err := workload.NewGen(spec, p.WorkloadParams, keys.ids[i], owns, keys.firstNew, p.Seed+uint64(i)*1_000_003+uint64(repeat))
		if err != nil {
			return nil, err
		}
		gens[i] = g
	}
	if c.Baseline {
		return figs, r.runBaseline(ctx, gens, figs, pr)
	}
	var socket string
	// requests reads the embedded daemon's store request counts (nil with
	// an external daemon).
	var requests func() (cost.Counts, bool)
	if p.Socket != "" {
		socket = p.Socket
	} else {
		dir, err := os.MkdirTemp(p.Dir, "stated-bench-")
		if err != nil {
			return nil, fmt.Errorf("temporary data dir: %w", err)
		}
		defer os.RemoveAll(dir)
		o := host.Options{DataDir: dir, Logger: r.Logger, HeapSnapshotCap: embeddedHeapSnapshotCap, S3Prices: p.Prices}
		if p.CheckpointStore != "" {
			store, err := runStore(p.CheckpointStore, filepath.Base(dir))
			if err != nil {
				return nil, err
			}
			o.CheckpointStore = store
			defer emptyStore(context.WithoutCancel(ctx), store, r.Progress)
		}
		n, err := host.Open(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("start embedded daemon: %w", err)
		}
		defer n.Close()
		socket = n.Socket()
		requests = n.Requests
	}
	s := &session{p: p, spec: spec, socket: socket, kind: backend.Kind(c.Backend), changelog: c.Changelog,
		job: fmt.Sprintf("bench-%d-%s-%d", time.Now().UnixNano(), c.Backend, repeat)}
	defer s.close()
	if err := s.open(ctx, p.Tasks, nil); err != nil {
		return nil, err
	}
	targets := make([]target, p.Tasks)
	for i, in := range s.ins {
		targets[i] = clientTarget{in}
	}
	if err := load(ctx, p, gens, targets, figs, pr); err != nil {
		return nil, err
	}
	m := newRequestMeter(requests, p.Prices)
	m.start()
	if err := s.checkpoint(ctx, 1, "checkpoint1", figs, pr); err != nil {
		return nil, err
	}
	m.checkpoint("checkpoint1", figs, pr)
	if err := runPhase(ctx, p, spec, gens, targets, figs, pr); err != nil {
		return nil, err
	}
	m.run("run", figs, pr)
	if err := s.checkpoint(ctx, 2, "checkpoint2", figs, pr); err != nil {
		return nil, err
	}
	m.checkpoint("checkpoint2", figs, pr)
	m.cost(figs, pr)
	if err := s.reopen(ctx, p.Tasks, 2, "restore", figs, pr); err != nil {
		return nil, err
	}
	if p.RescaleTo > 0 {
		if err := s.reopen(ctx, p.RescaleTo, 2, "rescale", figs, pr); err != nil {
			return nil, err
		}
	}
	return figs, nil
}

// runBaseline runs load and run phases on raw Pebble, one store per task
// (as the lsm backend keeps one per instance) sharing one block cache.
func (r *Runner) runBaseline(ctx context.Context, gens []*workload.Gen, figs map[string]float64, pr *progress) error {
	p := r.Params
	p.EnsureDefaults()
	spec, _ := workload.Lookup(p.Workload)
	dir, err := os.MkdirTemp(p.Dir, "stated-bench-pebble-")
	if err != nil {
		return fmt.Errorf("temporary dir: %w", err)
	}
	defer os.RemoveAll(dir)
	// The lsm backend's block cache: 128 MiB, plus room for two memtables
	// per instance, since Pebble reserves memtables in it (the lsm
	// backend's cacheHold).
	cache := pebble.NewCache(128<<20 + int64(len(gens))*2*lsm.DefaultMemTableSize)
	defer cache.Unref()
	targets := make([]target, len(gens))
	for i := range gens {
		t, err := openPebble(filepath.Join(dir, fmt.Sprint(i)), cache, p.MaxParallelism)
		if err != nil {
			return err
		}
		defer t.close()
		targets[i] = t
	}
	if err := load(ctx, p, gens, targets, figs, pr); err != nil {
		return err
	}
	return runPhase(ctx, p, spec, gens, targets, figs, pr)
}

// load writes every task's keys, tasks in parallel.
func load(ctx context.Context, p Params, gens []*workload.Gen, targets []target, figs map[string]float64, pr *progress) error {
	var total int64
	for _, g := range gens {
		total += int64(g.LoadOps())
	}
	var done atomic.Int64
	stop := pr.phase("load", total, func() int64 { return done.Load() })
	start := time.Now()
	err := parallel(len(gens), func(i int) error {
		_, err := drive(ctx, targets[i], p.InFlight, func() *workload.Op {
			op := gens[i].NextLoad()
			if op != nil {
				done.Add(1)
			}
			return op
		}, nil)
		return err
	})
	elapsed := time.Since(start)
	stop()
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	figs["load.ops"] = float64(total)
	figs["load.s"] = elapsed.Seconds()
	figs["load.ops_per_sec"] = float64(total) / elapsed.Seconds()
	pr.line("load: %d operations in %s (%.0f ops/s)", total, elapsed.Round(time.Millisecond), figs["load.ops_per_sec"])
	return nil
}

// runPhase runs the warm-up, then the measured run.
func runPhase(ctx context.Context, p Params, spec *workload.Spec, gens []*workload.Gen, targets []target, figs map[string]float64, pr *progress) error {
	if p.Warmup > 0 {
		var done atomic.Int64
		wstart := time.Now()
		stop := pr.phase("warm-up", p.Warmup.Milliseconds(), func() int64 { return time.Since(wstart).Milliseconds() })
		err := timedRun(ctx, p.Warmup, 0, p.InFlight, gens, targets, nil, &done)
		stop()
		if err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	hists := make([][]*hist.Histogram, len(gens))
	for i := range hists {
		hists[i] = make([]*hist.Histogram, len(workload.Kinds()))
		for _, k := range spec.Kinds() {
			hists[i][k] = &hist.Histogram{}
		}
	}
	var done atomic.Int64
	total := p.Duration.Milliseconds()
	if p.Ops > 0 {
		total = p.Ops
	}
	var stop func()
	cpu0 := processCPU()
	start := time.Now()
	if p.Ops > 0 {
		stop = pr.phase("run", total, func() int64 { return done.Load() })
	} else {
		stop = pr.phase("run", total, func() int64 { return time.Since(start).Milliseconds() })
	}
	err := timedRun(ctx, p.Duration, p.Ops, p.InFlight, gens, targets, hists, &done)
	elapsed := time.Since(start)
	cpu := processCPU() - cpu0
	stop()
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	var all hist.Histogram
	for _, k := range spec.Kinds() {
		var h hist.Histogram
		for i := range hists {
			h.Merge(hists[i][k])
		}
		all.Merge(&h)
		name := "run." + k.String()
		figs[name+".ops"] = float64(h.Count())
		figs[name+".ops_per_sec"] = float64(h.Count()) / elapsed.Seconds()
		figs[name+".p50_us"] = float64(h.Quantile(0.5)) / 1e3
		figs[name+".p99_us"] = float64(h.Quantile(0.99)) / 1e3
		figs[name+".p999_us"] = float64(h.Quantile(0.999)) / 1e3
	}
	figs["run.ops"] = float64(all.Count())
	figs["run.s"] = elapsed.Seconds()
	figs["run.ops_per_sec"] = float64(all.Count()) / elapsed.Seconds()
	if all.Count() > 0 && cpu > 0 {
		figs["run.cpu_us_per_op"] = cpu.Seconds() * 1e6 / float64(all.Count())
	}
	pr.line("run: %d operations in %s (%.0f ops/s, p99 %.0f µs)", all.Count(), elapsed.Round(time.Millisecond),
		figs["run.ops_per_sec"], float64(all.Quantile(0.99))/1e3)
	return nil
}

// timedRun drives every task until d has passed (ops == 0) or ops
// operations were issued in all.
func timedRun(ctx context.Context, d time.Duration, ops int64, inflight int, gens []*workload.Gen, targets []target, hists [][]*hist.Histogram, done *atomic.Int64) error {
	var stopFlag atomic.Bool
	if ops == 0 {
		t := time.AfterFunc(d, func() { stopFlag.Store(true) })
		defer t.Stop()
	}
	var issued atomic.Int64
	return parallel(len(gens), func(i int) error {
		var record func(workload.Kind, time.Duration)
		if hists != nil {
			hs := hists[i]
			record = func(k workload.Kind, lat time.Duration) { hs[k].Record(int64(lat)) }
		}
		_, err := drive(ctx, targets[i], inflight, func() *workload.Op {
			if stopFlag.Load() {
				return nil
			}
			if ops > 0 && issued.Add(1) > ops {
				return nil
			}
			done.Add(1)
			return gens[i].Next()
		}, record)
		return err
	})
}

// processCPU is the process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// session is one job's instances in a daemon, one client connection per
// task (as separate task processes would have).
type session struct {
	p      Params
	spec   *workload.Spec
	socket string
	kind   backend.Kind
	job    string
	// changelog opens every instance in changelog mode (OpenSpec, so it
	// works on an external daemon too).
	changelog bool
	cs        []*client.Client
	ins       []*client.Instance
}

func (s *session) open(ctx context.Context, parallelism int, restore *client.Restore) error {
	s.cs = make([]*client.Client, parallelism)
	for i := range s.cs {
		c, err := client.Dial(s.socket, client.Options{Token: s.p.Token, TLS: s.p.TLS, MaxBatchOps: s.p.Batch})
		if err != nil {
			return err
		}
		s.cs[i] = c
	}
	s.ins = make([]*client.Instance, parallelism)
	return parallel(parallelism, func(i int) error {
		in, err := s.cs[i].Open(ctx, client.OpenSpec{
			Task:           backend.TaskID{Job: s.job, Operator: "bench", Subtask: i},
			MaxParallelism: s.p.MaxParallelism, Parallelism: parallelism,
			Backend: s.kind, States: s.spec.Descriptors(), Restore: restore, Changelog: changelogChoice(s.changelog),
		})
		if err != nil {
			return fmt.Errorf("open subtask %d of %d: %w", i, parallelism, err)
		}
		if in.Changelog() != s.changelog {
			return fmt.Errorf("subtask %d: changelog mode %v, asked for %v", i, in.Changelog(), s.changelog)
		}
		if restore != nil && in.RestoredCheckpoint() != restore.CheckpointID {
			return fmt.Errorf("subtask %d restored checkpoint %d, not %d", i, in.RestoredCheckpoint(), restore.CheckpointID)
		}
		s.ins[i] = in
		return nil
	})
}

// close closes every instance and connection; errors are dropped (the
// phases already reported theirs).
func (s *session) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s.closeInstances(ctx)
	for _, c := range s.cs {
		if c != nil {
			c.Close()
		}
	}
	s.cs = nil
}

func (s *session) closeInstances(ctx context.Context) error {
	var mu sync.Mutex
	var errs []error
	_ = parallel(len(s.ins), func(i int) error {
		if in := s.ins[i]; in != nil {
			if err := in.Close(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}
		return nil
	})
	s.ins = nil
	return errors.Join(errs...)
}

// checkpoint takes checkpoint id of every task at once and completes it,
// as a job's coordinator would.
func (s *session) checkpoint(ctx context.Context, id uint64, name string, figs map[string]float64, pr *progress) error {
	stop := pr.phase(name, 0, nil)
	var syncMax, asyncMax atomic.Int64
	start := time.Now()
	err := parallel(len(s.ins), func(i int) error {
		resp, err := s.ins[i].Snapshot(ctx, id, true)
		if err != nil {
			return err
		}
		maxInto(&syncMax, resp.SyncMicros)
		maxInto(&asyncMax, resp.AsyncMicros)
		return nil
	})
	snapped := time.Now()
	if err != nil {
		stop()
		return fmt.Errorf("%s: snapshot: %w", name, err)
	}
	info, err := s.cs[0].CompleteCheckpoint(ctx, s.job, id)
	end := time.Now()
	stop()
	if err != nil {
		return fmt.Errorf("%s: complete: %w", name, err)
	}
	figs[name+".sync_ms"] = float64(syncMax.Load()) / 1e3
	figs[name+".async_ms"] = float64(asyncMax.Load()) / 1e3
	figs[name+".complete_ms"] = float64(end.Sub(snapped).Microseconds()) / 1e3
	figs[name+".total_ms"] = float64(end.Sub(start).Microseconds()) / 1e3
	figs[name+".checkpointed_bytes"] = float64(info.GetCheckpointedSize())
	figs[name+".full_bytes"] = float64(info.GetFullSize())
	pr.line("%s: sync %.1f ms, async %.1f ms, complete %.1f ms; %s checkpointed of %s", name,
		figs[name+".sync_ms"], figs[name+".async_ms"], figs[name+".complete_ms"],
		bytesize.Format(info.GetCheckpointedSize()), bytesize.Format(info.GetFullSize()))
	return nil
}

func maxInto(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

// reopen closes every instance and opens parallelism new ones restored
// from checkpoint id, timing the opens (all tasks at once, as a job's
// restart or rescale opens them).
func (s *session) reopen(ctx context.Context, parallelism int, id uint64, name string, figs map[string]float64, pr *progress) error {
	// Closing is timed apart: a job's restart waits for its old
	// instances to go too, and an lsm close flushes and may take seconds.
	closeStart := time.Now()
	if err := s.closeInstances(ctx); err != nil {
		return fmt.Errorf("%s: close: %w", name, err)
	}
	figs[name+".close_ms"] = float64(time.Since(closeStart).Microseconds()) / 1e3
	for _, c := range s.cs {
		c.Close()
	}
	stop := pr.phase(name, 0, nil)
	start := time.Now()
	err := s.open(ctx, parallelism, &client.Restore{CheckpointID: id})
	elapsed := time.Since(start)
	stop()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	figs[name+".ms"] = float64(elapsed.Microseconds()) / 1e3
	if name == "rescale" {
		figs["rescale.parallelism"] = float64(parallelism)
	}
	pr.line("%s: %d subtasks restored from checkpoint %d in %s", name, parallelism, id, elapsed.Round(time.Millisecond))
	return nil
}

// changelogChoice is the client's changelog choice for on.
func changelogChoice(on bool) client.Changelog {
	if on {
		return client.ChangelogOn
	}
	return client.ChangelogOff
}
