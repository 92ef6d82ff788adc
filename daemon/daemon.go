package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/chanstate"
	"github.com/statedhq/stated/dstl/changelog"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/localfs"
)

// Defaults of Config.
const (
	DefaultMaxMemoryState        = 1 << 30
	DefaultMaxInstances          = 4096
	DefaultMaxStreamsPerInstance = 4
	DefaultCheckpointTimeout     = 10 * time.Minute
	DefaultIdleInstanceTimeout   = 10 * time.Minute
	// DefaultMaxChannelStateBytes: 1 GiB of in-flight data per task and
	// checkpoint is far beyond any engine's network buffers.
	DefaultMaxChannelStateBytes = 1 << 30
	// DefaultChannelStateObjectBytes: 64 MiB objects keep one checkpoint's
	// channel state in one or a few objects, and a restore's ranged reads
	// short.
	DefaultChannelStateObjectBytes = 64 << 20
	// DefaultChannelStateLinger: the tasks of a job snapshot within
	// milliseconds of each other under a barrier; longer means a task is
	// not taking part here.
	DefaultChannelStateLinger = 250 * time.Millisecond
	// DefaultPackFileBytes: a checkpoint's file-backend snapshot files up
	// to 64 GiB, in practice all, are packed (changelog manifests go into
	// the handles), so that a checkpoint of the file backend's tasks here is
	// one object (on S3 a multipart upload of one request per 16 MiB
	// part, where an object per file costs two more requests per file;
	// restores read each file with one ranged GET either way:
	// docs/performance.md).
	DefaultPackFileBytes = 64 << 30
	// DefaultGCPercent is the Go GC target "stated serve" runs with (GOGC
	// 100 is Go's default): batches allocate request and response buffers
	// at a high rate, and collecting four times less often buys about 20%
	// of batch throughput. Heap and file backends keep their state in the
	// Go heap; with much of it, lower it or set GOMEMLIMIT.
	DefaultGCPercent = 400
	// tombstoneLimit bounds the aborted checkpoints remembered so that a
	// late Snapshot of one is refused.
	tombstoneLimit = 4096
)

// InstancesDir is the directory under the data dir that holds the working
// state of open instances. New clears it.
const InstancesDir = "instances"

// OpenEnv is what an Opener gets besides the backend options.
type OpenEnv struct {
	// Dir is a working directory for this instance only, which need not
	// exist yet: an opener that needs it makes it. The daemon removes it
	// after Close (and on the next start after a crash).
	Dir string
	// LSM is the instance's choice of lsm mode (OpenParams.LSM).
	LSM LSMMode
	// ObjectPrefix, when set, is where the instance's checkpoint files go
	// in Store (lsm.Options.ObjectPrefix): an externally owned instance's
	// root, with a trailing slash.
	ObjectPrefix string
	// DataDir is the daemon's data directory (Config.DataDir). Openers may
	// keep resources that all instances share in a directory of their own
	// under it, other than InstancesDir (the lsm opener's restore-download
	// cache).
	DataDir string
}

// Opener opens a backend of one kind. The daemon fills opts completely
// (defaults applied) before calling it.
type Opener func(ctx context.Context, opts backend.Options, env OpenEnv) (backend.Backend, error)

// Config configures a Daemon.
type Config struct {
	// DataDir holds the working state of instances. Required.
	DataDir string
	// Store is the checkpoint storage. Required.
	Store tiered.Store
	// Catalog records checkpoints and savepoints. Required. It takes no
	// callback into the daemon: open it first, then pass it here.
	Catalog Catalog
	// SharedCatalog says that other daemons report the handles of the
	// same jobs to Catalog (cluster mode): a completion checks the tasks
	// open here itself and leaves the rest of the tasks it names to the
	// catalog, and a completion of a checkpoint no task here snapshotted
	// goes to the catalog instead of failing.
	SharedCatalog bool
	// HeapSnapshots is where heap backends keep their snapshots: native
	// savepoints of heap instances copy from it, and a restore from a heap
	// checkpoint checks that its files are still there. Optional; when
	// set, Catalog must have been opened with it as Options.HeapStore, so
	// that the catalog deletes the snapshots of checkpoints that are no
	// longer retained, aborted or orphaned (otherwise daemon memory would
	// grow with every checkpoint).
	HeapSnapshots tiered.Store
	// Openers open backends by kind. Required (see DefaultOpeners).
	Openers map[backend.Kind]Opener
	// MaxValueSize bounds each key, namespace, value, list element and map
	// user key or value. Default backend.DefaultMaxValueSize (the daemon
	// and the backends share one default).
	MaxValueSize int
	// MaxMemoryState bounds the in-memory state (keys and values) of each
	// heap or file instance; a write past it fails with
	// backend.ErrResourceExhausted. Default DefaultMaxMemoryState.
	MaxMemoryState int64
	// MaxInstances bounds the open instances. Default DefaultMaxInstances.
	MaxInstances int
	// MaxStreamsPerInstance bounds the concurrent batch streams of one
	// instance (each has its own bounded queue). Default
	// DefaultMaxStreamsPerInstance.
	MaxStreamsPerInstance int
	// CheckpointTimeout aborts a checkpoint as expired when it has not
	// completed this long after its first snapshot: the daemon's timer is
	// the only expiry (the catalog never ends a checkpoint on its own). It
	// must be shorter than the catalog's GCGrace, or the sweep could
	// delete uploads of a running checkpoint. Default
	// DefaultCheckpointTimeout.
	CheckpointTimeout time.Duration
	// IdleInstanceTimeout closes an instance that has had no batch stream
	// (and no snapshot running) for this long: its task died without
	// closing it (a live client keeps its stream open from Open on), and
	// its memory and files would otherwise stay until the daemon restarts.
	// Default DefaultIdleInstanceTimeout; negative: never.
	IdleInstanceTimeout time.Duration
	// Logger receives structured logs. Default slog.Default().
	Logger *slog.Logger
	// Metrics receives the counters. Default NewMetrics().
	Metrics *Metrics
	// OnCorruption, when set, is called for every detected corruption
	// after it is counted (Metrics.Corruption) and logged, as Pebble's
	// EventListener.DataCorruption is. It runs on the goroutine of the
	// call that met it and must not call the daemon. Default nil.
	OnCorruption func(CorruptionEvent)
	// Fence, when set, fences tasks: each open takes a new token, and an
	// instance whose token is no longer its task's newest can no longer
	// report a snapshot's handle or complete a checkpoint (ErrFenced).
	// Cluster mode sets it; a daemon alone needs none (one open per task
	// is enforced here). Default nil.
	Fence Fencer
	// MaxChannelStateBytes bounds the stored channel state one task writes
	// for one checkpoint (ErrResourceExhausted past it): in-flight data is
	// bounded by the engine's network buffers, so more is a client bug
	// that would fill the spool. Default DefaultMaxChannelStateBytes.
	MaxChannelStateBytes int64
	// ChannelStateObjectBytes is the size past which a checkpoint's shared
	// channel state object is cut and a new one begun. Default
	// DefaultChannelStateObjectBytes.
	ChannelStateObjectBytes int64
	// ChannelStateLinger is how long a task's upload waits for the other
	// tasks of its job here to snapshot before it uploads the shared
	// channel state object without them (their state then goes into
	// another object); the same bound applies to a pack of small files
	// (pack.go) and to the changelog's barrier cut (barrier.go). Default
	// DefaultChannelStateLinger.
	ChannelStateLinger time.Duration
	// PackFileBytes: the private files of a checkpoint up to this size
	// that the daemon's file-backend instances write go into one object
	// per job and checkpoint shared by its tasks here (the channel
	// state's writer, chanstate), instead of an object each; their
	// handles say where (backend.FileRef.Pack). Changelog manifests
	// (at most backend.MaxInlineBytes) go into the handles themselves
	// (backend.FileRef.Inline). Default DefaultPackFileBytes; negative:
	// off, for both.
	PackFileBytes int64
	// Changelog makes changelog mode available. Optional: without it,
	// instances asking for the changelog and restores of checkpoints
	// written in it are refused (ErrUnsupported).
	Changelog *ChangelogConfig
	// Views bounds the read views of instances (view.go).
	Views ViewConfig
	// ExternalDir is the directory under which externally owned instances
	// (OpenParams.External, external.go) write their checkpoint files, at
	// roots their engine names: a directory the engine reaches too (a
	// shared mount), which the catalog never reads, sweeps or deletes in.
	// It must not be inside the checkpoint store's directory. Optional:
	// without it the externally owned mode is refused (ErrUnsupported).
	// With ExternalStore it is instead the URL under which the engine
	// reaches that store's objects (s3://bucket/prefix).
	ExternalDir string
	// ExternalStore, when set, is where externally owned instances write
	// (an S3 prefix, which an engine reaches through a file system of its
	// own, as Flink through its S3 plugin) instead of a local directory
	// at ExternalDir; the daemon neither closes nor empties it. Optional.
	ExternalStore tiered.Store
}

// EnsureDefaults fills zero fields with their defaults.
func (c *Config) EnsureDefaults() {
	if c.MaxValueSize == 0 {
		c.MaxValueSize = backend.DefaultMaxValueSize
	}
	if c.MaxMemoryState == 0 {
		c.MaxMemoryState = DefaultMaxMemoryState
	}
	if c.MaxInstances == 0 {
		c.MaxInstances = DefaultMaxInstances
	}
	if c.MaxStreamsPerInstance == 0 {
		c.MaxStreamsPerInstance = DefaultMaxStreamsPerInstance
	}
	if c.CheckpointTimeout == 0 {
		c.CheckpointTimeout = DefaultCheckpointTimeout
	}
	if c.IdleInstanceTimeout == 0 {
		c.IdleInstanceTimeout = DefaultIdleInstanceTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
	if c.MaxChannelStateBytes == 0 {
		c.MaxChannelStateBytes = DefaultMaxChannelStateBytes
	}
	if c.ChannelStateObjectBytes == 0 {
		c.ChannelStateObjectBytes = DefaultChannelStateObjectBytes
	}
	if c.ChannelStateLinger == 0 {
		c.ChannelStateLinger = DefaultChannelStateLinger
	}
	if c.PackFileBytes == 0 {
		c.PackFileBytes = DefaultPackFileBytes
	}
	if c.Changelog != nil {
		c.Changelog.EnsureDefaults()
	}
	c.Views.ensureDefaults()
}

// Validate reports every problem of c at once.
func (c *Config) Validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("daemon: no data dir"))
	}
	if c.Store == nil {
		errs = append(errs, errors.New("daemon: no checkpoint store"))
	}
	if c.Catalog == nil {
		errs = append(errs, errors.New("daemon: no catalog"))
	} else if g := c.Catalog.GCGrace(); c.CheckpointTimeout >= g {
		errs = append(errs, fmt.Errorf("daemon: the checkpoint timeout %s must be shorter than the catalog's gc grace %s, or the sweep could delete uploads of a running checkpoint",
			c.CheckpointTimeout, g))
	}
	if c.Catalog != nil && c.HeapSnapshots != nil && c.Catalog.HeapStore() != c.HeapSnapshots {
		errs = append(errs, errors.New("daemon: the catalog manages another heap snapshot store than Config.HeapSnapshots "+
			"(open it with catalog.Options.HeapStore set to the same store, or heap snapshots are never deleted)"))
	}
	if len(c.Openers) == 0 {
		errs = append(errs, errors.New("daemon: no backend openers"))
	}
	if c.Changelog != nil {
		if err := c.Changelog.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	switch {
	case c.ExternalStore != nil && !strings.Contains(c.ExternalDir, "://"):
		errs = append(errs, fmt.Errorf("daemon: an external store needs the URL the engine reaches it by (ExternalDir, e.g. s3://bucket/prefix), not %q", c.ExternalDir))
	case c.ExternalStore == nil && c.ExternalDir != "" && !filepath.IsAbs(c.ExternalDir):
		errs = append(errs, fmt.Errorf("daemon: the external directory %q is not an absolute path", c.ExternalDir))
	}
	if c.MaxValueSize < 0 || c.MaxMemoryState < 0 || c.MaxInstances < 0 || c.MaxStreamsPerInstance < 0 || c.CheckpointTimeout < 0 ||
		c.MaxChannelStateBytes < 0 || c.ChannelStateObjectBytes < 0 || c.ChannelStateLinger < 0 {
		errs = append(errs, errors.New("daemon: negative limit"))
	}
	if err := c.Views.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Daemon holds the instances of every task on the host.
type Daemon struct {
	cfg Config
	log *slog.Logger
	m   *Metrics

	// baseCtx is cancelled by Shutdown when in-flight snapshots must stop.
	baseCtx   context.Context
	cancelAll context.CancelFunc
	// wg tracks asynchronous snapshot parts.
	wg sync.WaitGroup
	// closers tracks the background closes of instances' backends
	// (Instance.closeInBackground); Shutdown waits for them.
	closers sync.WaitGroup

	mu        sync.Mutex
	closing   bool
	instances map[string]*Instance // by string(id)
	byTask    map[backend.TaskID]*Instance
	opening   map[backend.TaskID]bool
	ckpts     map[ckptKey]*checkpoint
	// lastCompleted is the highest checkpoint id completed per job by this
	// process.
	lastCompleted map[string]uint64
	// wholeHere are the jobs whose last checkpoint completed through this
	// daemon listed only tasks open here: their snapshots' reports are
	// held for the completion's own log entry (holdReport).
	wholeHere map[string]bool
	// reaper runs reap (idle.go); nil when IdleInstanceTimeout < 0.
	reaper *time.Timer
	// keeper runs the changelog's chores (changelog.go); nil without
	// Config.Changelog.
	keeper *logKeeper
	// timing keeps the sync and async durations of recent completions.
	timing timings
	// chanName is the stem of this process's channel state objects: two
	// daemons (or two runs of one) never write the same name.
	chanName string
	// extStore is the store at Config.ExternalDir (nil without it).
	extStore tiered.Store
}

// New starts a daemon. It clears the instances directory under DataDir.
func New(cfg Config) (*Daemon, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	inst := filepath.Join(cfg.DataDir, InstancesDir)
	// Working state of a previous process is never reused: tasks restore
	// from their last completed checkpoint, which verifies every file.
	if err := os.RemoveAll(inst); err != nil {
		return nil, fmt.Errorf("daemon: clear %s: %w", inst, err)
	}
	if err := os.MkdirAll(inst, 0o700); err != nil {
		return nil, fmt.Errorf("daemon: create %s: %w", inst, err)
	}
	// Spools of channel state are as dead as the working state.
	spool := filepath.Join(cfg.DataDir, ChannelsDir)
	if err := os.RemoveAll(spool); err != nil {
		return nil, fmt.Errorf("daemon: clear %s: %w", spool, err)
	}
	if err := os.MkdirAll(spool, 0o700); err != nil {
		return nil, fmt.Errorf("daemon: create %s: %w", spool, err)
	}
	extStore := cfg.ExternalStore
	if extStore == nil && cfg.ExternalDir != "" {
		// Files only (no packs: Put never packs), so each file of an
		// externally owned snapshot is a file the engine can hold. A
		// restore links them into the instance instead of copying: the
		// engine's restores read every file of a handle (a failover's
		// critical path), and neither side writes a file in place.
		st, err := localfs.Open(cfg.ExternalDir)
		if err != nil {
			return nil, fmt.Errorf("daemon: external directory: %w", err)
		}
		extStore = localfs.Linkable(st)
	}
	nonce := make([]byte, 6)
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("daemon: channel state name: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Daemon{
		cfg: cfg, log: cfg.Logger, m: cfg.Metrics,
		baseCtx: ctx, cancelAll: cancel,
		instances:     map[string]*Instance{},
		byTask:        map[backend.TaskID]*Instance{},
		opening:       map[backend.TaskID]bool{},
		ckpts:         map[ckptKey]*checkpoint{},
		lastCompleted: map[string]uint64{},
		wholeHere:     map[string]bool{},
		chanName:      fmt.Sprintf("channels-%x", nonce),
		extStore:      extStore,
	}
	if cfg.IdleInstanceTimeout > 0 {
		d.reaper = time.AfterFunc(reapInterval(cfg.IdleInstanceTimeout), d.reap)
	}
	if cfg.Changelog != nil {
		d.keeper = newLogKeeper(d)
	}
	return d, nil
}

// Metrics returns the daemon's counters.
func (d *Daemon) Metrics() *Metrics { return d.m }

// Config returns the daemon's configuration with defaults applied.
func (d *Daemon) Config() Config { return d.cfg }

// LSMMode is an lsm instance's choice, at open, of where its SSTs live.
type LSMMode int

const (
	// LSMDefault leaves it to the opener (the daemon's --lsm-remote).
	LSMDefault LSMMode = iota
	// LSMLocal keeps the SSTs on local disk, uploaded at checkpoints.
	LSMLocal
	// LSMRemote creates them in the checkpoint store from the start.
	LSMRemote
)

// OpenParams describe an instance to open.
type OpenParams struct {
	Task           backend.TaskID
	KeyGroups      backend.KeyGroupRange
	MaxParallelism int // 0: backend.DefaultMaxParallelism
	// Parallelism is the operator's number of subtasks (0: unknown). When
	// set, KeyGroups must be the range backend.KeyGroupRangeForOperator
	// gives subtask Task.Subtask. A restore from state written at another
	// parallelism (a rescale) needs it, unless KeyGroups fits exactly one
	// parallelism.
	Parallelism int
	Kind        backend.Kind
	States      []backend.StateDescriptor
	Restore     *RestoreSpec
	// Replace closes an instance already open for the task once the new
	// one is open; an Open that fails leaves it untouched.
	Replace bool
	// Changelog chooses changelog mode for this instance (default: the
	// daemon's ChangelogConfig.Default). A restore of a checkpoint written
	// in changelog mode works either way.
	Changelog ChangelogMode
	// LSM chooses where an lsm instance keeps its SSTs (default: the
	// opener's own choice, the daemon's --lsm-remote). Only for KindLSM.
	LSM LSMMode
	// VerifyKeyGroups: the client declared the specified key hash, and the
	// API checks every operation's key group against its key.
	VerifyKeyGroups bool
	// External opens the instance in the externally owned mode
	// (external.go): its engine owns its checkpoint files. Nil: the
	// daemon's own mode.
	External *ExternalParams
}

func (p *OpenParams) validate(openers map[backend.Kind]Opener, cl *ChangelogConfig) error {
	var errs []error
	if err := p.Task.Validate(); err != nil {
		errs = append(errs, err)
	}
	if p.MaxParallelism == 0 {
		p.MaxParallelism = backend.DefaultMaxParallelism
	}
	if err := backend.ValidateMaxParallelism(p.MaxParallelism); err != nil {
		errs = append(errs, err)
	} else if err := p.KeyGroups.Validate(p.MaxParallelism); err != nil {
		errs = append(errs, err)
	} else if p.Parallelism != 0 {
		if err := backend.ValidateParallelism(p.MaxParallelism, p.Parallelism); err != nil {
			errs = append(errs, err)
		} else if p.Task.Subtask >= p.Parallelism {
			errs = append(errs, fmt.Errorf("%w: subtask %d of parallelism %d", backend.ErrInvalidArgument, p.Task.Subtask, p.Parallelism))
		} else if want := backend.KeyGroupRangeForOperator(p.MaxParallelism, p.Parallelism, p.Task.Subtask); want != p.KeyGroups {
			errs = append(errs, fmt.Errorf("%w: key groups %s, but subtask %d of parallelism %d (maxParallelism %d) owns %s",
				backend.ErrInvalidArgument, p.KeyGroups, p.Task.Subtask, p.Parallelism, p.MaxParallelism, want))
		}
	}
	if _, err := backend.ParseKind(string(p.Kind)); err != nil {
		errs = append(errs, err)
	} else if openers[p.Kind] == nil {
		errs = append(errs, fmt.Errorf("%w: backend %s is not available in this daemon", ErrUnsupported, p.Kind))
	}
	switch p.LSM {
	case LSMDefault:
	case LSMLocal, LSMRemote:
		if p.Kind != backend.KindLSM {
			errs = append(errs, fmt.Errorf("%w: an lsm mode for a %s instance (only lsm instances have one)", backend.ErrInvalidArgument, p.Kind))
		}
	default:
		errs = append(errs, fmt.Errorf("%w: lsm mode %d", backend.ErrInvalidArgument, p.LSM))
	}
	switch p.Changelog {
	case ChangelogDefault, ChangelogOff:
	case ChangelogOn:
		if cl == nil {
			errs = append(errs, fmt.Errorf("%w: changelog mode is not available in this daemon (start it with --changelog-store or --changelog)", ErrUnsupported))
		}
	default:
		errs = append(errs, fmt.Errorf("%w: changelog mode %d", backend.ErrInvalidArgument, p.Changelog))
	}
	seen := map[string]bool{}
	for _, s := range p.States {
		if err := s.Validate(); err != nil {
			errs = append(errs, err)
		}
		if seen[s.Name] {
			errs = append(errs, fmt.Errorf("%w: state %q listed twice", backend.ErrInvalidArgument, s.Name))
		}
		seen[s.Name] = true
	}
	if r := p.Restore; r != nil {
		n := 0
		if r.Latest {
			n++
		}
		if r.CheckpointID != 0 {
			n++
		}
		if r.Savepoint != "" {
			n++
		}
		if n != 1 {
			errs = append(errs, fmt.Errorf("%w: a restore source names exactly one of latest, a checkpoint id or a savepoint", backend.ErrInvalidArgument))
		}
		if r.Claim && r.NoClaim {
			errs = append(errs, fmt.Errorf("%w: a restore is either claim or no-claim, not both", backend.ErrInvalidArgument))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("daemon: open %s: %w", p.Task, err)
	}
	return nil
}

// Open creates an instance for a task, restoring it when p.Restore is set.
func (d *Daemon) Open(ctx context.Context, p OpenParams) (*Instance, error) {
	err := p.validate(d.cfg.Openers, d.cfg.Changelog)
	if err == nil && p.External != nil {
		if err = d.validateExternal(&p); err != nil {
			err = fmt.Errorf("daemon: open %s: %w", p.Task, err)
		}
	}
	if err != nil {
		d.m.OpenFailures.Add(1)
		return nil, err
	}
	start := time.Now()
	inst, err := d.open(ctx, p)
	if err != nil {
		d.m.OpenFailures.Add(1)
		d.log.Warn("open failed", "task", p.Task.String(), "backend", string(p.Kind), "err", err)
		return nil, err
	}
	d.m.Opens.Add(1)
	attrs := []any{"task", p.Task.String(), "backend", string(p.Kind),
		"keyGroups", p.KeyGroups.String(), "instance", inst.IDString(), "restoredFrom", inst.RestoredFrom,
		"took", time.Since(start)}
	if r, ok := inst.Backend.(backend.RestoreReporter); ok && inst.RestoredFrom != 0 {
		attrs = append(attrs, "restore", r.RestoreReport())
	}
	d.log.Info("instance opened", attrs...)
	return inst, nil
}

func (d *Daemon) open(ctx context.Context, p OpenParams) (*Instance, error) {
	task := p.Task
	d.mu.Lock()
	if d.closing {
		d.mu.Unlock()
		return nil, fmt.Errorf("daemon: open %s: %w", task, ErrShuttingDown)
	}
	if d.opening[task] {
		d.mu.Unlock()
		return nil, fmt.Errorf("daemon: open %s: %w (another open of it is in progress)", task, ErrAlreadyOpen)
	}
	old := d.byTask[task]
	if old != nil && !p.Replace {
		d.mu.Unlock()
		return nil, fmt.Errorf("daemon: open %s: %w as instance %s (close it, or open with replace)", task, ErrAlreadyOpen, old.IDString())
	}
	n := len(d.instances) + len(d.opening)
	if old != nil {
		n--
	}
	if n >= d.cfg.MaxInstances {
		d.mu.Unlock()
		return nil, fmt.Errorf("daemon: open %s: %w: %d instances open (max %d)", task, ErrLimit, n, d.cfg.MaxInstances)
	}
	// The instance a replace is for stays open and working until the new
	// one is ready: an open that fails (a restore of another max
	// parallelism, a missing checkpoint, a damaged file) leaves the task
	// running as it was (issue 37: it used to be closed first, and the
	// task's next operation got "backend closed"). Both exist meanwhile.
	d.opening[task] = true
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.opening, task)
		d.mu.Unlock()
	}()

	opts := backend.Options{
		Task:           task,
		KeyGroups:      p.KeyGroups,
		MaxParallelism: p.MaxParallelism,
		States:         p.States,
		Store:          d.packingStore(task.Job, p.Kind),
		MaxValueSize:   d.cfg.MaxValueSize,
		MaxMemoryBytes: d.cfg.MaxMemoryState,
	}
	var restoredFrom uint64
	var source string // the checkpoint or savepoint restored from
	var opState []backend.OperatorList
	var rplan *restorePlan
	if p.Restore != nil {
		r, err := d.resolveRestore(ctx, p)
		if err != nil {
			return nil, d.corruption(CorruptionEvent{Site: CorruptionCatalog, Job: task.Job, Task: task, Err: err})
		}
		source = restoreSource(r)
		rplan = r
		opts.Restore = r.Handles
		opts.RestoreStore = backend.PackedStore(r.src.Store, append(slices.Clone(r.Handles), r.All...))
		opts.NoClaim = r.src.NoClaim
		if !r.src.NoClaim {
			opts.RestoreHeld = stillRetained(r.src)
		}
		opState = r.OperatorState
		restoredFrom = r.src.Manifest.CheckpointID
		if r.Rescaled {
			d.log.Info("rescaling restore", "task", task.String(), "keyGroups", p.KeyGroups.String(),
				"handles", len(r.Handles), "base", r.Handles[0].Task.String())
		}
	}
	var ext *external
	if e := p.External; e != nil {
		ext = &external{root: e.Root, snaps: map[uint64]*extSnap{}}
		opts.Store = d.extStore
		if len(e.Restore) > 0 {
			in, err := d.planExternal(ctx, p)
			if err != nil {
				return nil, fmt.Errorf("daemon: open %s: restore from the handles given: %w", task, err)
			}
			// RestoreStore stays nil: the restored files are in the
			// store the instance writes to, so its snapshots may
			// reference them (the engine keeps them while they do).
			opts.Restore = in.Handles
			restoredFrom = in.Handles[0].CheckpointID
			ext.restored = restoredFrom
			source = fmt.Sprintf("the handles given (checkpoint %d of %s first)", restoredFrom, in.Handles[0].Task)
		}
	}
	opts.EnsureDefaults()

	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return nil, fmt.Errorf("daemon: open %s: instance id: %w", task, err)
	}
	// The opener makes the directory if and when it needs it: an idle
	// lsm instance never does, and a directory made for every open
	// (two inodes with the job's) was most of what opening thousands of
	// instances cost on ext4.
	dir := filepath.Join(d.cfg.DataDir, InstancesDir, task.Job, fmt.Sprintf("%s-%x", task.Dir(), id[:6]))
	env := OpenEnv{Dir: dir, DataDir: d.cfg.DataDir, LSM: p.LSM}
	if ext != nil {
		env.LSM = LSMLocal
		env.ObjectPrefix = ext.root + "/"
	}
	opener := func(o backend.Options) (backend.Backend, error) { return d.cfg.Openers[p.Kind](ctx, o, env) }
	wantCL := d.wantChangelog(p.Changelog)
	restoreCL := slices.ContainsFunc(opts.Restore, (*backend.Handle).IsChangelog)
	var b backend.Backend
	var cb *changelog.Backend
	var err error
	switch {
	case (wantCL || restoreCL) && d.cfg.Changelog == nil:
		err = fmt.Errorf("%w: the checkpoint was written in changelog mode, which this daemon does not have (start it with --changelog-store or --changelog)", ErrUnsupported)
	case wantCL || restoreCL:
		b, cb, err = d.openChangelog(opts, wantCL, opener)
	default:
		b, err = opener(opts)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		err = fmt.Errorf("daemon: open %s (%s backend): %w", task, p.Kind, err)
		if ext != nil && len(opts.Restore) > 0 {
			err = fmt.Errorf("restore from %s: %w", source, err)
		}
		if p.Restore != nil {
			err = missingIsCorrupt(err, source)
			err = backend.NamePacks(err, append(slices.Clone(rplan.Handles), rplan.All...))
			err = d.corruption(CorruptionEvent{Site: CorruptionRestore, Job: task.Job, Task: task, Source: source, Err: err})
		}
		return nil, err
	}
	var chans *chanstate.Restored
	if p.Restore != nil {
		chans, err = d.restoreChannels(ctx, p, rplan)
		if err != nil {
			_ = b.Close()
			_ = os.RemoveAll(dir)
			err = fmt.Errorf("daemon: open %s: %w", task, err)
			return nil, d.corruption(CorruptionEvent{Site: CorruptionRestore, Job: task.Job, Task: task, Source: source, Err: err})
		}
	}
	// The fencing token last: taking it fences the instance being
	// replaced, which must keep working if anything before fails.
	fence, err := d.acquireFence(ctx, task)
	if err != nil {
		_ = b.Close()
		if chans != nil {
			_ = chans.Close()
		}
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if p.Restore != nil {
		d.m.Restores.Add(1)
	}
	inst := newInstance(d, id, task, p.Kind, b, dir, restoredFrom, opState)
	inst.chans = chans
	inst.fence = fence
	inst.VerifyKeyGroups = p.VerifyKeyGroups
	inst.ext = ext
	if cb != nil {
		inst.cl = &clState{b: cb, next: d.nextMaterialization(time.Now())}
		if p.Restore != nil {
			d.m.ReplayDuration.Observe(cb.Stats().ReplayDuration)
		}
	}
	d.mu.Lock()
	if d.closing {
		d.mu.Unlock()
		inst.close()
		return nil, fmt.Errorf("daemon: open %s: %w", task, ErrShuttingDown)
	}
	// The old instance may have been closed meanwhile (CloseInstance, the
	// idle timeout); no other open of the task ran (opening).
	replaced := old != nil && d.instances[string(old.ID)] == old
	if replaced {
		d.removeLocked(old)
	}
	d.instances[string(id)] = inst
	d.byTask[task] = inst
	d.m.OpenInstances[BackendIndex(p.Kind)].Add(1)
	d.mu.Unlock()
	if replaced {
		d.log.Info("instance replaced", "task", task.String(), "instance", old.IDString(), "by", inst.IDString())
		old.closeInBackground()
	}
	return inst, nil
}

// Lookup returns the open instance with id if it belongs to job.
func (d *Daemon) Lookup(id []byte, job string) (*Instance, error) {
	if len(id) == 0 {
		return nil, fmt.Errorf("daemon: %w: no instance id", backend.ErrInvalidArgument)
	}
	d.mu.Lock()
	inst := d.instances[string(id)]
	d.mu.Unlock()
	if inst == nil {
		return nil, fmt.Errorf("daemon: %w %s (job %q): never opened, closed, or opened before a daemon restart",
			ErrUnknownInstance, hex.EncodeToString(id), job)
	}
	if inst.Task.Job != job {
		// Do not say whose it is.
		return nil, fmt.Errorf("daemon: %w: instance %s does not belong to job %q", ErrPermissionDenied, inst.IDString(), job)
	}
	return inst, nil
}

// CloseInstance closes the instance with id of job.
func (d *Daemon) CloseInstance(id []byte, job string) error {
	inst, err := d.Lookup(id, job)
	if err != nil {
		return err
	}
	d.mu.Lock()
	if d.instances[string(id)] != inst {
		d.mu.Unlock()
		return fmt.Errorf("daemon: %w %s: closed concurrently", ErrUnknownInstance, inst.IDString())
	}
	d.removeLocked(inst)
	d.mu.Unlock()
	d.log.Info("instance closed", "task", inst.Task.String(), "instance", inst.IDString())
	inst.closeInBackground()
	// Its held reports go before its token does: a report under a
	// released token is refused.
	d.flushInstance(inst)
	d.releaseFence(inst)
	return nil
}

// removeLocked unregisters inst; the caller closes it.
func (d *Daemon) removeLocked(inst *Instance) {
	delete(d.instances, string(inst.ID))
	if d.byTask[inst.Task] == inst {
		delete(d.byTask, inst.Task)
	}
	d.m.OpenInstances[BackendIndex(inst.Kind)].Add(-1)
}

// Instances lists the open instances, sorted by task.
func (d *Daemon) Instances() []*Instance {
	d.mu.Lock()
	out := make([]*Instance, 0, len(d.instances))
	for _, in := range d.instances {
		out = append(out, in)
	}
	d.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Task.String() < out[j].Task.String() })
	return out
}

// Shutdown stops the daemon: it refuses new work, waits until ctx is done
// for in-flight asynchronous snapshots, then aborts those still running
// (their checkpoints are aborted in the catalog), and closes every
// instance. The catalog and store are the caller's to close.
func (d *Daemon) Shutdown(ctx context.Context) error {
	d.mu.Lock()
	if d.closing {
		d.mu.Unlock()
		return nil
	}
	d.closing = true
	if d.reaper != nil {
		d.reaper.Stop()
	}
	d.mu.Unlock()

	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		d.log.Warn("shutdown: aborting in-flight snapshots")
		d.cancelAll()
		<-done
	}
	// Every asynchronous part has finished. Abort what did not complete so
	// the catalog discards its uploads.
	d.mu.Lock()
	var pending []*checkpoint
	for _, c := range d.ckpts {
		c.timer.Stop()
		if c.status == statusInProgress {
			pending = append(pending, c)
		}
	}
	insts := make([]*Instance, 0, len(d.instances))
	for _, in := range d.instances {
		insts = append(insts, in)
		d.removeLocked(in)
	}
	d.mu.Unlock()
	var errs []error
	actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range pending {
		d.closeChannels(c)
		d.closePack(c)
		if err := d.cfg.Catalog.Abort(actx, c.key.job, c.key.id, FailureAborted.Status(), "daemon shutting down"); err != nil {
			errs = append(errs, err)
		}
		d.m.CheckpointFailures[FailureAborted].Add(1)
	}
	for _, in := range insts {
		if err := in.close(); err != nil {
			errs = append(errs, err)
		}
	}
	d.closers.Wait()
	if d.keeper != nil {
		// The instances let go of their logs: delete what no retained
		// checkpoint references (the sweep would, later).
		d.keeper.close(actx)
	}
	d.cancelAll()
	return errors.Join(errs...)
}
