package catalog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/refcount"
	"github.com/statedhq/stated/tiered"
)

// Defaults of Options.
const (
	DefaultRetain            = 3
	DefaultGCGrace           = time.Hour
	DefaultSweepInterval     = 10 * time.Minute
	DefaultCheckpointTimeout = 10 * time.Minute
	DefaultDeleteBatch       = 1000
	DefaultDeleteParallelism = 4
	DefaultMaxHistory        = 100
	defaultDeleteAttempts    = 3
)

// retryBackoff is the first pause between delete attempts; it grows
// quadratically. A variable so that crash tests do not sleep.
var retryBackoff = 20 * time.Millisecond

// Options configure a Catalog.
type Options struct {
	// Store is the checkpoint root. Required.
	Store tiered.Store
	// Retain is how many completed checkpoints each job keeps (pinned ones
	// not counted). Default DefaultRetain.
	Retain int
	// GCGrace is how old an unreferenced object must be before the orphan
	// sweep deletes it; it must exceed CheckpointTimeout so that uploads of
	// a running checkpoint are never orphans. Default DefaultGCGrace.
	GCGrace time.Duration
	// SweepInterval is the period of the background sweep (Start).
	// Default DefaultSweepInterval.
	SweepInterval time.Duration
	// CheckpointTimeout is how long a checkpoint may stay in flight; the
	// sweep aborts older ones with StatusExpired. Negative: never.
	// Default DefaultCheckpointTimeout.
	CheckpointTimeout time.Duration
	// OnExpire, if set, is called (without catalog locks held) for every
	// checkpoint the sweep expired, so the caller can tell its backends
	// (NotifyCheckpointAborted).
	OnExpire func(job string, id uint64)
	// DeleteBatch is the most names one DeleteBatch call carries (S3 allows
	// 1000). Default DefaultDeleteBatch.
	DeleteBatch int
	// DeleteParallelism bounds concurrent DeleteBatch calls, and concurrent
	// Stat, Get and copy calls. Default DefaultDeleteParallelism.
	DeleteParallelism int
	// MaxHistory bounds the history records kept per job.
	// Default DefaultMaxHistory.
	MaxHistory int
	// Clock gives the time for history records and the grace period.
	// Default time.Now.
	Clock func() time.Time
	// Logf receives problems that do not fail the call that met them (a
	// delete that the sweep will retry). Default: discarded.
	Logf func(format string, args ...any)
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.Retain == 0 {
		o.Retain = DefaultRetain
	}
	if o.GCGrace == 0 {
		o.GCGrace = DefaultGCGrace
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = DefaultSweepInterval
	}
	if o.CheckpointTimeout == 0 {
		o.CheckpointTimeout = DefaultCheckpointTimeout
	}
	if o.DeleteBatch == 0 {
		o.DeleteBatch = DefaultDeleteBatch
	}
	if o.DeleteParallelism == 0 {
		o.DeleteParallelism = DefaultDeleteParallelism
	}
	if o.MaxHistory == 0 {
		o.MaxHistory = DefaultMaxHistory
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
}

// Validate reports every problem of o at once. Call EnsureDefaults first.
func (o *Options) Validate() error {
	var errs []error
	if o.Store == nil {
		errs = append(errs, fmt.Errorf("%w: no store", ErrInvalidArgument))
	}
	if o.Retain < 1 {
		errs = append(errs, fmt.Errorf("%w: retain %d must be at least 1", ErrInvalidArgument, o.Retain))
	}
	if o.GCGrace < 0 {
		errs = append(errs, fmt.Errorf("%w: gc grace %s is negative", ErrInvalidArgument, o.GCGrace))
	}
	if o.SweepInterval <= 0 {
		errs = append(errs, fmt.Errorf("%w: sweep interval %s must be positive", ErrInvalidArgument, o.SweepInterval))
	}
	if o.CheckpointTimeout > 0 && o.GCGrace <= o.CheckpointTimeout {
		errs = append(errs, fmt.Errorf("%w: gc grace %s must exceed the checkpoint timeout %s, or the sweep could delete uploads of a running checkpoint",
			ErrInvalidArgument, o.GCGrace, o.CheckpointTimeout))
	}
	if o.DeleteBatch < 1 || o.DeleteBatch > 1000 {
		errs = append(errs, fmt.Errorf("%w: delete batch %d is outside [1,1000]", ErrInvalidArgument, o.DeleteBatch))
	}
	if o.DeleteParallelism < 1 {
		errs = append(errs, fmt.Errorf("%w: delete parallelism %d must be at least 1", ErrInvalidArgument, o.DeleteParallelism))
	}
	if o.MaxHistory < 1 {
		errs = append(errs, fmt.Errorf("%w: max history %d must be at least 1", ErrInvalidArgument, o.MaxHistory))
	}
	return errors.Join(errs...)
}

// ref names a checkpoint.
type ref struct {
	job string
	id  uint64
}

func (r ref) dir() string      { return CheckpointDir(r.job, r.id) }
func (r ref) manifest() string { return CheckpointManifest(r.job, r.id) }
func (r ref) String() string   { return r.dir() }

// entry is a completed checkpoint whose manifest exists.
type entry struct {
	ref ref
	m   *Manifest
	enc []byte // the manifest as stored
	// owner is the job that may delete it: ref.job, or the job that
	// restored it in claim mode (adoption).
	owner     string
	adoptedAt time.Time
	// pinned: the owner restored it in no-claim mode, so retention never
	// deletes it (only DeleteCheckpoint does).
	pinned bool
	// discarding: retention or DeleteCheckpoint dropped it and its manifest
	// is being deleted (or deleting it failed and the sweep retries). It
	// still protects its files until the manifest is gone.
	discarding bool
}

// inflight is a checkpoint between BeginCheckpoint and Complete or Abort.
type inflight struct {
	started    time.Time
	handles    []*backend.Handle
	completing bool
}

// jobState is what the catalog knows of one job besides its checkpoints.
type jobState struct {
	name     string
	inflight map[uint64]*inflight
	history  []Record // sorted by ID
	// noClaim are the files of the checkpoint the job last restored in
	// no-claim mode: its new checkpoints must reference none of them.
	noClaim     map[string]string // path -> checkpoint dir
	noClaimFrom string
	// degraded: the job file could not be read. Retention is off (a pin may
	// be lost) and the file is left as it is for a human to look at.
	degraded bool
	saveMu   sync.Mutex // orders writes of the job file
}

// Catalog is the per-store registry of completed checkpoints and
// savepoints. See the package documentation.
type Catalog struct {
	opts  Options
	store tiered.Store

	mu          sync.Mutex
	closed      bool
	reg         *refcount.Registry
	entries     map[ref]*entry
	savepoints  map[string]*spEntry
	spInflight  map[string]bool
	jobs        map[string]*jobState
	protect     map[string]int  // paths of pending handles and completions in progress
	deleting    map[string]bool // paths a delete is under way for
	protectDirs map[string]string
	problems    []string

	gcMu        sync.Mutex // one GC pass at a time
	sweepCancel context.CancelFunc
	sweepDone   chan struct{}
}

// spEntry is a completed savepoint.
type spEntry struct {
	m   *Manifest
	enc []byte
}

// Open reads the catalog back from the store: every checkpoint and
// savepoint manifest, every job file, and rebuilds the shared-file registry
// from them. It only reads: retention beyond Retain, orphans and
// interrupted deletions are dealt with by the next Complete and sweep.
// Damaged manifests and job files do not fail Open: they are reported by
// Problems, and nothing in their directories is ever deleted.
func Open(ctx context.Context, opts Options) (*Catalog, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	c := &Catalog{
		opts: opts, store: opts.Store,
		reg:         refcount.New(),
		entries:     map[ref]*entry{},
		savepoints:  map[string]*spEntry{},
		spInflight:  map[string]bool{},
		jobs:        map[string]*jobState{},
		protect:     map[string]int{},
		deleting:    map[string]bool{},
		protectDirs: map[string]string{},
	}
	var manifests, jobFiles []string
	err := tiered.Walk(ctx, c.store, "", func(o tiered.ObjectInfo) error {
		switch classify(o.Name).kind {
		case objCheckpointManifest, objSavepointManifest:
			manifests = append(manifests, o.Name)
		case objJobFile:
			jobFiles = append(jobFiles, o.Name)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("catalog: list the checkpoint root: %w", err)
	}
	type claim struct {
		owner string
		at    time.Time
	}
	adopted := map[ref]claim{}
	pinned := map[ref]bool{}
	for _, name := range jobFiles {
		n := classify(name)
		j := c.job(n.job)
		data, err := tiered.ReadAll(ctx, c.store, name, maxMetaSize)
		if err != nil && !tiered.IsNotFound(err) {
			return nil, fmt.Errorf("catalog: read job file %s: %w", name, err)
		}
		if err != nil {
			continue
		}
		f, err := decodeJobFile(data)
		if err == nil && f.Job != n.job {
			err = fmt.Errorf("%w: job file %s names job %q", ErrCorrupt, name, f.Job)
		}
		if err != nil {
			j.degraded = true
			c.problems = append(c.problems, fmt.Sprintf("job file %s: %v (retention of job %s is off until it is repaired)", name, err, n.job))
			continue
		}
		j.history = f.History
		for _, id := range f.Pinned {
			pinned[ref{n.job, id}] = true
		}
		for _, a := range f.Adopted {
			r := ref{a.Job, a.ID}
			if old, ok := adopted[r]; !ok || a.At.After(old.at) || (a.At.Equal(old.at) && n.job > old.owner) {
				adopted[r] = claim{n.job, a.At}
			}
		}
	}
	for _, name := range manifests {
		data, err := tiered.ReadAll(ctx, c.store, name, maxMetaSize)
		if tiered.IsNotFound(err) {
			continue // deleted while listing
		}
		if err != nil {
			return nil, fmt.Errorf("catalog: read manifest %s: %w", name, err)
		}
		n := classify(name)
		m, err := DecodeManifest(data)
		if err == nil {
			err = checkManifestPlace(n, m)
		}
		if err != nil {
			c.protectDirs[n.dir()] = err.Error()
			c.problems = append(c.problems, fmt.Sprintf("manifest %s: %v (its directory is kept as it is)", name, err))
			continue
		}
		if n.kind == objSavepointManifest {
			c.savepoints[n.sp] = &spEntry{m: m, enc: data}
			if err := c.reg.Register(spOwner(n.sp), savepointObjects(m, data)); err != nil {
				c.protectDirs[n.dir()] = err.Error()
				c.problems = append(c.problems, fmt.Sprintf("savepoint %s: %v", n.sp, err))
			}
			continue
		}
		r := ref{n.job, n.id}
		e := &entry{ref: r, m: m, enc: data, owner: r.job}
		if a, ok := adopted[r]; ok {
			e.owner, e.adoptedAt = a.owner, a.at
		} else {
			e.pinned = pinned[r]
		}
		c.entries[r] = e
		c.job(r.job)
		c.job(e.owner)
		if err := c.reg.Register(r.dir(), checkpointObjects(m, data)); err != nil {
			// The store holds two different objects under one name: keep
			// everything this checkpoint lists, and say so.
			for _, o := range checkpointObjects(m, data) {
				c.protect[o.Path]++
			}
			c.problems = append(c.problems, fmt.Sprintf("checkpoint %s: %v", r, err))
		}
	}
	return c, nil
}

// checkManifestPlace checks that a manifest sits where its content says.
func checkManifestPlace(n objName, m *Manifest) error {
	switch n.kind {
	case objCheckpointManifest:
		if m.Kind != KindCheckpoint || m.Job != n.job || m.CheckpointID != n.id {
			return fmt.Errorf("%w: manifest of %s %s/%d stored at %s", ErrCorrupt, m.Kind, m.Job, m.CheckpointID, CheckpointManifest(n.job, n.id))
		}
	case objSavepointManifest:
		if m.Kind != KindSavepoint || m.SavepointID != n.sp {
			return fmt.Errorf("%w: manifest of %s %q stored in savepoint %s", ErrCorrupt, m.Kind, m.SavepointID, n.sp)
		}
	}
	return nil
}

func spOwner(id string) string { return SavepointDir(id) }

// managed reports whether the catalog manages h's files in its store. Heap
// snapshots live in the heap backend's own in-memory store: the catalog
// neither checks, counts nor deletes them.
func managed(h *backend.Handle) bool { return h.Backend != backend.KindHeap }

// checkpointObjects are the objects a checkpoint references: its manifest
// and the files of its managed handles.
func checkpointObjects(m *Manifest, enc []byte) []refcount.Object {
	objs := []refcount.Object{{Path: CheckpointManifest(m.Job, m.CheckpointID), Size: int64(len(enc)), CRC32C: frame.Checksum(enc)}}
	for _, h := range m.Tasks {
		if !managed(h) {
			continue
		}
		for _, f := range h.Files {
			objs = append(objs, refcount.Object{Path: f.Path, Size: f.Size, CRC32C: f.CRC32C})
		}
	}
	return objs
}

// savepointObjects are the objects of a savepoint, by full name.
func savepointObjects(m *Manifest, enc []byte) []refcount.Object {
	dir := SavepointDir(m.SavepointID) + "/"
	objs := []refcount.Object{{Path: dir + ManifestName, Size: int64(len(enc)), CRC32C: frame.Checksum(enc)}}
	for _, h := range m.Tasks {
		for _, f := range h.Files {
			objs = append(objs, refcount.Object{Path: dir + f.Path, Size: f.Size, CRC32C: f.CRC32C})
		}
	}
	return objs
}

func (c *Catalog) job(name string) *jobState {
	j, ok := c.jobs[name]
	if !ok {
		j = &jobState{name: name, inflight: map[uint64]*inflight{}}
		c.jobs[name] = j
	}
	return j
}

// Problems lists what Open and the sweeps found damaged: manifests and job
// files that do not decode, and objects registered twice with different
// sizes. Their directories are never deleted.
func (c *Catalog) Problems() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.problems)
}

// Store is the checkpoint root the catalog manages.
func (c *Catalog) Store() tiered.Store { return c.store }

// Jobs lists the jobs with a history, a checkpoint or one in flight, sorted.
func (c *Catalog) Jobs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for name := range c.jobs {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// BeginCheckpoint marks checkpoint id of job in flight: until it completes
// or aborts (or expires), nothing under its directory is deleted by the
// sweep. Calling it again for the same in-flight checkpoint is a no-op (every
// task of the job may call it); an id that already completed is ErrExists.
func (c *Catalog) BeginCheckpoint(job string, id uint64) error {
	if err := ValidateJob(job); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	if _, ok := c.entries[ref{job, id}]; ok {
		return fmt.Errorf("%w: checkpoint %s completed already", ErrExists, CheckpointDir(job, id))
	}
	j := c.job(job)
	if _, ok := j.inflight[id]; !ok {
		j.inflight[id] = &inflight{started: c.opts.Clock()}
	}
	return nil
}

// InFlight lists the in-flight checkpoints of job, sorted.
func (c *Catalog) InFlight(job string) []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []uint64
	if j, ok := c.jobs[job]; ok {
		for id := range j.inflight {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// checkHandleLocked checks that h may be part of checkpoint id of job:
// valid, of the job and checkpoint, and every file inside the layout:
// private files under the checkpoint's directory, shared files under some
// job's "shared/" directory, none inside a savepoint, none of a checkpoint
// the job restored in no-claim mode, none being deleted.
func (c *Catalog) checkHandleLocked(j *jobState, id uint64, h *backend.Handle) error {
	if h == nil {
		return fmt.Errorf("%w: nil handle for %s", ErrInvalidArgument, CheckpointDir(j.name, id))
	}
	if err := h.Validate(); err != nil {
		return fmt.Errorf("catalog: checkpoint %s: %w", CheckpointDir(j.name, id), err)
	}
	if h.Task.Job != j.name {
		return fmt.Errorf("%w: handle of task %s offered to checkpoint %s of another job", ErrInvalidArgument, h.Task, CheckpointDir(j.name, id))
	}
	if h.CheckpointID != id {
		return fmt.Errorf("%w: handle of task %s is for checkpoint %d, not %d", ErrInvalidArgument, h.Task, h.CheckpointID, id)
	}
	private := CheckpointDir(j.name, id) + "/"
	for _, f := range h.Files {
		n := classify(f.Path)
		switch {
		case f.Shared && n.kind != objShared:
			return fmt.Errorf("%w: task %s: shared file %s is not under <job>/%s/", ErrInvalidArgument, h.Task, f.Path, sharedDir)
		case !f.Shared && (!strings.HasPrefix(f.Path, private) || n.kind != objCheckpoint):
			return fmt.Errorf("%w: task %s: private file %s is not under %s", ErrInvalidArgument, h.Task, f.Path, private)
		}
		if !managed(h) {
			continue
		}
		if src, ok := j.noClaim[f.Path]; ok {
			return fmt.Errorf("%w: task %s references %s of checkpoint %s, which the job restored in no-claim mode (the first checkpoint after such a restore must be full)",
				ErrInvalidArgument, h.Task, f.Path, src)
		}
		if c.deleting[f.Path] {
			return fmt.Errorf("%w: task %s references %s, which is being deleted as unreferenced (an upload of an aborted checkpoint?)",
				ErrNotFound, h.Task, f.Path)
		}
	}
	return nil
}

func (c *Catalog) protectLocked(h *backend.Handle, delta int) {
	if !managed(h) {
		return
	}
	for _, f := range h.Files {
		c.protect[f.Path] += delta
		if c.protect[f.Path] <= 0 {
			delete(c.protect, f.Path)
		}
	}
}

// AddTaskHandle records the handle of one task for in-flight checkpoint id
// of job (begun with BeginCheckpoint). Its files are protected from the
// sweep from now on; Complete writes them into the manifest.
func (c *Catalog) AddTaskHandle(job string, id uint64, h *backend.Handle) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	j, ok := c.jobs[job]
	var inf *inflight
	if ok {
		inf = j.inflight[id]
	}
	if inf == nil {
		return fmt.Errorf("%w: checkpoint %s is not in flight", ErrState, CheckpointDir(job, id))
	}
	if inf.completing {
		return fmt.Errorf("%w: checkpoint %s is completing", ErrState, CheckpointDir(job, id))
	}
	if err := c.checkHandleLocked(j, id, h); err != nil {
		return err
	}
	for _, o := range inf.handles {
		if o.Task == h.Task {
			return fmt.Errorf("%w: checkpoint %s already has a handle of task %s", ErrExists, CheckpointDir(job, id), h.Task)
		}
	}
	h = cloneHandle(h)
	inf.handles = append(inf.handles, h)
	c.protectLocked(h, +1)
	return nil
}

// Complete completes in-flight checkpoint id of job with the handles added
// by AddTaskHandle plus handles. It checks that every file not referenced
// yet exists with its size, writes "<job>/chk-<id>/_metadata" (PutIfAbsent:
// exactly once), registers the files, and applies retention: checkpoints of
// the job beyond Options.Retain are discarded (their manifest first, then
// every file no other checkpoint or savepoint references).
//
// Complete of a checkpoint that completed already returns its manifest
// (a retried call). If Complete fails, the checkpoint stays in flight: the
// caller may retry it or Abort it.
func (c *Catalog) Complete(ctx context.Context, job string, id uint64, handles ...*backend.Handle) (*Manifest, error) {
	r := ref{job, id}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if e, ok := c.entries[r]; ok && !e.discarding {
		m := cloneManifest(e.m)
		c.mu.Unlock()
		return m, nil
	}
	j, ok := c.jobs[job]
	var inf *inflight
	if ok {
		inf = j.inflight[id]
	}
	if inf == nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: checkpoint %s is not in flight (BeginCheckpoint first)", ErrState, r)
	}
	if inf.completing {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: checkpoint %s is already completing", ErrState, r)
	}
	all := slices.Clone(inf.handles)
	seen := map[backend.TaskID]bool{}
	for _, h := range all {
		seen[h.Task] = true
	}
	var extra []*backend.Handle
	for _, h := range handles {
		if err := c.checkHandleLocked(j, id, h); err != nil {
			c.mu.Unlock()
			return nil, err
		}
		if seen[h.Task] {
			c.mu.Unlock()
			return nil, fmt.Errorf("%w: checkpoint %s has two handles of task %s", ErrInvalidArgument, r, h.Task)
		}
		seen[h.Task] = true
		extra = append(extra, cloneHandle(h))
	}
	if len(all)+len(extra) == 0 {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: checkpoint %s has no task handle", ErrInvalidArgument, r)
	}
	for _, h := range extra {
		c.protectLocked(h, +1)
	}
	all = append(all, extra...)
	inf.completing = true
	started := inf.started
	c.mu.Unlock()

	m, enc, err := c.writeManifest(ctx, r, started, all)

	c.mu.Lock()
	inf.completing = false
	if err != nil {
		for _, h := range extra {
			c.protectLocked(h, -1)
		}
		c.mu.Unlock()
		return nil, err
	}
	e := &entry{ref: r, m: m, enc: enc, owner: job}
	if err := c.reg.Register(r.dir(), checkpointObjects(m, enc)); err != nil {
		for _, h := range extra {
			c.protectLocked(h, -1)
		}
		c.mu.Unlock()
		// The manifest must not outlive a failed registration, or a restart
		// would resurrect a checkpoint whose files nothing protected.
		c.deleteNames(ctx, []string{r.manifest()})
		return nil, fmt.Errorf("catalog: complete %s: %w", r, err)
	}
	c.entries[r] = e
	delete(j.inflight, id)
	for _, h := range all {
		c.protectLocked(h, -1)
	}
	c.recordLocked(j, Record{ID: id, Status: StatusCompleted, Started: m.Started, Ended: m.Completed,
		CheckpointedSize: m.CheckpointedSize, FullSize: m.FullSize, Tasks: len(m.Tasks)})
	drops := c.retentionLocked(job)
	c.mu.Unlock()

	for _, d := range drops {
		if err := c.discard(ctx, d); err != nil {
			c.opts.Logf("catalog: discard %s after completing %s (the sweep retries): %v", d.ref, r, err)
		}
	}
	c.saveJobLogged(ctx, job)
	return cloneManifest(m), nil
}

// writeManifest checks the files of a completing checkpoint and writes its
// manifest.
func (c *Catalog) writeManifest(ctx context.Context, r ref, started time.Time, hs []*backend.Handle) (*Manifest, []byte, error) {
	// Check that every file not known yet exists with the size its handle
	// says: a checkpoint must never point at a missing file. Files already
	// registered were checked when their first checkpoint completed.
	var check []backend.FileRef
	seen := map[string]bool{}
	for _, h := range hs {
		if !managed(h) {
			continue
		}
		for _, f := range h.Files {
			if seen[f.Path] {
				continue
			}
			seen[f.Path] = true
			if o, ok := c.reg.Lookup(f.Path); ok {
				if o.Size != f.Size || (o.CRC32C != 0 && o.CRC32C != f.CRC32C) {
					return nil, nil, fmt.Errorf("%w: checkpoint %s lists %s with size %d crc %08x, but it is registered with size %d crc %08x",
						ErrInvalidArgument, r, f.Path, f.Size, f.CRC32C, o.Size, o.CRC32C)
				}
				continue
			}
			check = append(check, f)
		}
	}
	err := c.forEach(ctx, len(check), func(ctx context.Context, i int) error {
		f := check[i]
		info, err := c.store.Stat(ctx, f.Path)
		if tiered.IsNotFound(err) {
			return fmt.Errorf("%w: checkpoint %s: file %s does not exist", ErrNotFound, r, f.Path)
		}
		if err != nil {
			return fmt.Errorf("catalog: checkpoint %s: stat %s: %w", r, f.Path, err)
		}
		if info.Size != f.Size {
			return fmt.Errorf("%w: checkpoint %s: file %s has %d bytes, its handle says %d", ErrCorrupt, r, f.Path, info.Size, f.Size)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	sortTasks(hs)
	m := &Manifest{Version: ManifestVersion, Kind: KindCheckpoint, Job: r.job, CheckpointID: r.id,
		Started: started, Completed: c.opts.Clock(), Tasks: hs}
	for _, h := range hs {
		m.CheckpointedSize += h.CheckpointedSize
		m.FullSize += h.FullSize
	}
	enc, err := EncodeManifest(m)
	if err != nil {
		return nil, nil, err
	}
	err = c.store.PutIfAbsent(ctx, r.manifest(), bytes.NewReader(enc), int64(len(enc)))
	if errors.Is(err, tiered.ErrExists) {
		// A previous attempt may have written it and then failed to hear
		// the answer. Accept it if it describes the same checkpoint.
		old, rerr := tiered.ReadAll(ctx, c.store, r.manifest(), maxMetaSize)
		if rerr != nil {
			return nil, nil, fmt.Errorf("catalog: complete %s: manifest exists and cannot be read: %w", r, rerr)
		}
		om, derr := DecodeManifest(old)
		if derr != nil || !sameTasks(om, m) {
			return nil, nil, fmt.Errorf("%w: checkpoint %s has a different manifest already (%v)", ErrExists, r, derr)
		}
		return om, old, nil
	}
	if err != nil {
		// The put may have landed anyway; a manifest must not appear for a
		// checkpoint that the caller was told failed.
		c.deleteNames(ctx, []string{r.manifest()})
		return nil, nil, fmt.Errorf("catalog: complete %s: write manifest: %w", r, err)
	}
	return m, enc, nil
}

func sameTasks(a, b *Manifest) bool {
	if len(a.Tasks) != len(b.Tasks) {
		return false
	}
	for i := range a.Tasks {
		x, _ := backend.EncodeHandle(a.Tasks[i])
		y, _ := backend.EncodeHandle(b.Tasks[i])
		if !bytes.Equal(x, y) {
			return false
		}
	}
	return true
}

// recordLocked adds or replaces the history record of r.ID.
func (c *Catalog) recordLocked(j *jobState, r Record) {
	i, found := slices.BinarySearchFunc(j.history, r.ID, func(x Record, id uint64) int {
		switch {
		case x.ID < id:
			return -1
		case x.ID > id:
			return 1
		}
		return 0
	})
	if found {
		j.history[i] = r
	} else {
		j.history = slices.Insert(j.history, i, r)
	}
	if n := len(j.history) - c.opts.MaxHistory; n > 0 {
		j.history = slices.Delete(j.history, 0, n)
	}
}

// owned returns the checkpoints job owns and may subsume, oldest first:
// adopted ones (in adoption order), then its own by id.
func (c *Catalog) ownedLocked(job string) []*entry {
	var out []*entry
	for _, e := range c.entries {
		if e.owner == job && !e.discarding {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, k int) bool {
		a, b := out[i], out[k]
		aa, ba := a.ref.job != job, b.ref.job != job
		if aa != ba {
			return aa
		}
		if aa && !a.adoptedAt.Equal(b.adoptedAt) {
			return a.adoptedAt.Before(b.adoptedAt)
		}
		if a.ref.job != b.ref.job {
			return a.ref.job < b.ref.job
		}
		return a.ref.id < b.ref.id
	})
	return out
}

// retentionLocked marks the checkpoints beyond Retain for discarding and
// returns them.
func (c *Catalog) retentionLocked(job string) []*entry {
	if j := c.jobs[job]; j != nil && j.degraded {
		return nil
	}
	var counted []*entry
	for _, e := range c.ownedLocked(job) {
		if !e.pinned {
			counted = append(counted, e)
		}
	}
	n := len(counted) - c.opts.Retain
	if n <= 0 {
		return nil
	}
	for _, e := range counted[:n] {
		e.discarding = true
	}
	return counted[:n]
}

// discard deletes a dropped checkpoint: the manifest first (so that a crash
// from here on leaves orphans for the sweep, never a retained checkpoint
// with missing files), then every object of its directory and every shared
// file that no one references any more.
func (c *Catalog) discard(ctx context.Context, e *entry) error {
	if err := c.deleteRetried(ctx, []string{e.ref.manifest()}); err != nil {
		return fmt.Errorf("catalog: discard %s: delete manifest: %w", e.ref, err)
	}
	c.mu.Lock()
	if c.entries[e.ref] == e {
		delete(c.entries, e.ref)
	}
	dropped := c.reg.Unregister(e.ref.dir())
	c.mu.Unlock()
	names := make([]string, 0, len(dropped))
	for _, o := range dropped {
		names = append(names, o.Path)
	}
	listed, err := c.list(ctx, e.ref.dir()+"/")
	if err != nil {
		_, _ = c.deleteUnreferenced(ctx, names)
		return fmt.Errorf("catalog: discard %s: list its directory (the sweep will finish): %w", e.ref, err)
	}
	for _, o := range listed {
		names = append(names, o.Name)
	}
	_, err = c.deleteUnreferenced(ctx, names)
	return err
}

func (c *Catalog) list(ctx context.Context, prefix string) ([]tiered.ObjectInfo, error) {
	var out []tiered.ObjectInfo
	err := tiered.Walk(ctx, c.store, prefix, func(o tiered.ObjectInfo) error {
		out = append(out, o)
		return nil
	})
	return out, err
}

// liveLocked reports whether name must not be deleted: referenced by a
// retained checkpoint or savepoint, listed by a pending handle, under an
// in-flight checkpoint or savepoint, or under a directory with a damaged
// manifest.
func (c *Catalog) liveLocked(name string) bool {
	if c.reg.Count(name) > 0 || c.protect[name] > 0 || c.deleting[name] {
		return true
	}
	n := classify(name)
	switch n.kind {
	case objUnknown, objJobFile:
		return true
	case objCheckpoint, objCheckpointManifest:
		if j := c.jobs[n.job]; j != nil && j.inflight[n.id] != nil {
			return true
		}
		if e := c.entries[ref{n.job, n.id}]; e != nil && n.kind == objCheckpointManifest {
			return true
		}
	case objSavepoint, objSavepointManifest:
		if c.spInflight[n.sp] {
			return true
		}
		if _, ok := c.savepoints[n.sp]; ok && n.kind == objSavepointManifest {
			return true
		}
	}
	_, bad := c.protectDirs[n.dir()]
	return bad
}

// deleteUnreferenced deletes those of names that are not live, manifests
// first, and returns the names it tried to delete. Names are re-checked
// and marked under the lock, so a checkpoint completing concurrently either
// sees the mark (and fails) or registers first (and the name is skipped).
func (c *Catalog) deleteUnreferenced(ctx context.Context, names []string) ([]string, error) {
	names = slices.Clone(names)
	slices.Sort(names)
	names = slices.Compact(names)
	c.mu.Lock()
	var manifests, rest []string
	for _, n := range names {
		if c.liveLocked(n) {
			continue
		}
		c.deleting[n] = true
		if strings.HasSuffix(n, "/"+ManifestName) {
			manifests = append(manifests, n)
		} else {
			rest = append(rest, n)
		}
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		for _, n := range manifests {
			delete(c.deleting, n)
		}
		for _, n := range rest {
			delete(c.deleting, n)
		}
		c.mu.Unlock()
	}()
	tried := append(slices.Clone(manifests), rest...)
	if err := c.deleteRetried(ctx, manifests); err != nil {
		return tried, err
	}
	return tried, c.deleteRetried(ctx, rest)
}

// deleteNames is a best-effort delete for cleanup paths whose failure the
// sweep repairs.
func (c *Catalog) deleteNames(ctx context.Context, names []string) {
	if err := c.deleteRetried(ctx, names); err != nil {
		c.opts.Logf("catalog: delete (the sweep retries): %v", err)
	}
}

// deleteRetried deletes names in batches of DeleteBatch, DeleteParallelism
// at a time, retrying each batch. Deleting a missing object succeeds, so a
// retry never fails on what the first attempt managed.
func (c *Catalog) deleteRetried(ctx context.Context, names []string) error {
	var batches [][]string
	for len(names) > 0 {
		n := min(len(names), c.opts.DeleteBatch)
		batches = append(batches, names[:n])
		names = names[n:]
	}
	return c.forEach(ctx, len(batches), func(ctx context.Context, i int) error {
		var err error
		for attempt := 0; attempt < defaultDeleteAttempts; attempt++ {
			if attempt > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Duration(attempt*attempt) * retryBackoff):
				}
			}
			if err = c.store.DeleteBatch(ctx, batches[i]); err == nil {
				return nil
			}
		}
		return fmt.Errorf("catalog: delete %d objects (first %s): %w", len(batches[i]), batches[i][0], err)
	})
}

// forEach runs fn(0..n-1) with at most DeleteParallelism at a time and
// returns every error joined. It stops starting new calls once ctx is done.
func (c *Catalog) forEach(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	if n == 0 {
		return nil
	}
	sem := make(chan struct{}, c.opts.DeleteParallelism)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for i := 0; i < n; i++ {
		if ctx.Err() != nil {
			mu.Lock()
			errs = append(errs, ctx.Err())
			mu.Unlock()
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			if err := fn(ctx, i); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Abort ends in-flight checkpoint id of job without completing it. why is
// StatusAborted, StatusDeclined or StatusExpired, reason a text for the
// history. Abort deletes the checkpoint's private directory now (after
// making sure no manifest for it survives); the shared files it uploaded
// are left to the sweep, which deletes them once they are older than the
// grace period if no completed checkpoint references them (FLINK-24611).
// Aborting an unknown checkpoint cleans its directory and records it.
// Aborting a completed checkpoint is ErrState.
func (c *Catalog) Abort(ctx context.Context, job string, id uint64, why Status, reason string) error {
	if !why.failed() {
		return fmt.Errorf("%w: abort status %q (want aborted, declined or expired)", ErrInvalidArgument, why)
	}
	return c.abort(ctx, job, id, why, reason)
}

// Release ends in-flight checkpoint id of job like Abort, but leaves no
// history record: for a snapshot taken only to be copied into a native
// savepoint (TriggerSavepoint), which is no failed checkpoint. Tell the
// backends NotifyCheckpointAborted(id) so that they never reuse its
// uploads: a savepoint must not move the incremental base (FLINK-23949).
func (c *Catalog) Release(ctx context.Context, job string, id uint64) error {
	return c.abort(ctx, job, id, "", "")
}

func (c *Catalog) abort(ctx context.Context, job string, id uint64, why Status, reason string) error {
	if err := ValidateJob(job); err != nil {
		return err
	}
	r := ref{job, id}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	if _, ok := c.entries[r]; ok {
		c.mu.Unlock()
		return fmt.Errorf("%w: checkpoint %s completed; it cannot be aborted", ErrState, r)
	}
	j := c.job(job)
	now := c.opts.Clock()
	rec := Record{ID: id, Status: why, Started: now, Ended: now, Reason: reason}
	if inf := j.inflight[id]; inf != nil {
		if inf.completing {
			c.mu.Unlock()
			return fmt.Errorf("%w: checkpoint %s is completing", ErrState, r)
		}
		for _, h := range inf.handles {
			c.protectLocked(h, -1)
			rec.CheckpointedSize += h.CheckpointedSize
			rec.FullSize += h.FullSize
		}
		rec.Started = inf.started
		rec.Tasks = len(inf.handles)
		delete(j.inflight, id)
	}
	if why != "" {
		c.recordLocked(j, rec)
	}
	c.mu.Unlock()

	var err error
	if listed, lerr := c.list(ctx, r.dir()+"/"); lerr != nil {
		err = fmt.Errorf("catalog: abort %s: list its directory (the sweep will clean it): %w", r, lerr)
	} else {
		names := make([]string, len(listed))
		for i, o := range listed {
			names[i] = o.Name
		}
		if _, derr := c.deleteUnreferenced(ctx, names); derr != nil {
			err = fmt.Errorf("catalog: abort %s (the sweep will finish the cleanup): %w", r, derr)
		}
	}
	c.saveJobLogged(ctx, job)
	return err
}

// DeleteCheckpoint discards a retained checkpoint that job owns, pinned or
// not, as retention would. Its files that other checkpoints or savepoints
// reference stay.
func (c *Catalog) DeleteCheckpoint(ctx context.Context, job string, id uint64) error {
	r := ref{job, id}
	c.mu.Lock()
	e, ok := c.entries[r]
	if !ok || e.discarding {
		c.mu.Unlock()
		return fmt.Errorf("%w: checkpoint %s is not retained", ErrNotFound, r)
	}
	if e.owner != job {
		c.mu.Unlock()
		return fmt.Errorf("%w: checkpoint %s belongs to job %s (claimed)", ErrState, r, e.owner)
	}
	e.discarding = true
	c.mu.Unlock()
	err := c.discard(ctx, e)
	c.saveJobLogged(ctx, job)
	return err
}

// Latest returns the manifest of the newest retained checkpoint job owns
// (in retention order: its own checkpoints by id, after adopted ones).
func (c *Catalog) Latest(job string) (*Manifest, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	owned := c.ownedLocked(job)
	if len(owned) == 0 {
		return nil, false
	}
	return cloneManifest(owned[len(owned)-1].m), true
}

// Checkpoint returns the manifest of retained checkpoint id of job.
func (c *Catalog) Checkpoint(job string, id uint64) (*Manifest, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[ref{job, id}]
	if !ok || e.discarding {
		return nil, false
	}
	return cloneManifest(e.m), true
}

// Retained lists the ids of the retained checkpoints of job's own
// directory (whoever owns them), sorted.
func (c *Catalog) Retained(job string) []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []uint64
	for r, e := range c.entries {
		if r.job == job && !e.discarding {
			ids = append(ids, r.id)
		}
	}
	slices.Sort(ids)
	return ids
}

// List returns the history of job, oldest first: completed (retained or
// subsumed), failed and in-flight checkpoints.
func (c *Catalog) List(job string) []Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	j, ok := c.jobs[job]
	if !ok {
		return nil
	}
	byID := map[uint64]Record{}
	for _, r := range j.history {
		byID[r.ID] = r
	}
	for r, e := range c.entries {
		if r.job != job || e.discarding {
			continue
		}
		rec, ok := byID[r.id]
		if !ok || rec.Status != StatusCompleted {
			rec = Record{ID: r.id, Status: StatusCompleted, Started: e.m.Started, Ended: e.m.Completed,
				CheckpointedSize: e.m.CheckpointedSize, FullSize: e.m.FullSize, Tasks: len(e.m.Tasks)}
		}
		rec.Retained, rec.Pinned = true, e.pinned
		if e.owner != job {
			rec.Owner = e.owner
		}
		byID[r.id] = rec
	}
	for id, inf := range j.inflight {
		byID[id] = Record{ID: id, Status: StatusInProgress, Started: inf.started, Tasks: len(inf.handles)}
	}
	out := make([]Record, 0, len(byID))
	for _, r := range byID {
		out = append(out, r)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out
}

func (c *Catalog) saveJobLogged(ctx context.Context, job string) {
	if err := c.saveJob(ctx, job); err != nil {
		c.opts.Logf("catalog: %v", err)
	}
}

// saveJob writes job's file: history, pins, adoptions. Writes of one job
// are serialized and each writes the state at its start, so the last write
// holds the newest state.
func (c *Catalog) saveJob(ctx context.Context, job string) error {
	c.mu.Lock()
	j := c.job(job)
	c.mu.Unlock()
	j.saveMu.Lock()
	defer j.saveMu.Unlock()
	c.mu.Lock()
	if j.degraded {
		c.mu.Unlock()
		return fmt.Errorf("job file of %s is damaged; not overwriting it", job)
	}
	f := &jobFile{Version: JobFileVersion, Job: job, History: slices.Clone(j.history)}
	for _, e := range c.entries {
		if e.owner != job {
			continue
		}
		if e.ref.job != job {
			f.Adopted = append(f.Adopted, adoption{Job: e.ref.job, ID: e.ref.id, At: e.adoptedAt})
		} else if e.pinned {
			f.Pinned = append(f.Pinned, e.ref.id)
		}
	}
	c.mu.Unlock()
	slices.Sort(f.Pinned)
	sort.Slice(f.Adopted, func(a, b int) bool {
		if f.Adopted[a].Job != f.Adopted[b].Job {
			return f.Adopted[a].Job < f.Adopted[b].Job
		}
		return f.Adopted[a].ID < f.Adopted[b].ID
	})
	enc, err := encodeJobFile(f)
	if err != nil {
		return err
	}
	if err := c.store.Put(ctx, job+"/"+JobFileName, bytes.NewReader(enc), int64(len(enc))); err != nil {
		return fmt.Errorf("catalog: write job file of %s: %w", job, err)
	}
	return nil
}

// Stats are the catalog's totals, for metrics.
type Stats struct {
	Jobs, Retained, Savepoints, InFlight int
	// Referenced counts the objects retained checkpoints and savepoints
	// reference (shared files counted once) and their bytes.
	Referenced refcount.Stats
}

// Stats returns the catalog's totals.
func (c *Catalog) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{Jobs: len(c.jobs), Savepoints: len(c.savepoints), Referenced: c.reg.Stats()}
	for _, e := range c.entries {
		if !e.discarding {
			s.Retained++
		}
	}
	for _, j := range c.jobs {
		s.InFlight += len(j.inflight)
	}
	return s
}

// verifyingReader checks size and CRC32C of what it passes through and
// fails the read that reaches the end if they do not match, so a store's
// Put never commits a corrupt copy.
type verifyingReader struct {
	r    io.Reader
	name string
	want backend.FileRef
	n    int64
	crc  uint32
	done bool
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	if v.n+int64(len(p)) > v.want.Size+1 {
		p = p[:v.want.Size+1-v.n]
	}
	k, err := v.r.Read(p)
	v.crc = crc32Update(v.crc, p[:k])
	v.n += int64(k)
	if v.n > v.want.Size {
		return k, fmt.Errorf("%w: %s is longer than the %d bytes its handle says", ErrCorrupt, v.name, v.want.Size)
	}
	if v.n == v.want.Size && !v.done {
		v.done = true
		if v.crc != v.want.CRC32C {
			return k, fmt.Errorf("%w: %s has crc32c %08x, its handle says %08x", ErrCorrupt, v.name, v.crc, v.want.CRC32C)
		}
	}
	if err == io.EOF && v.n < v.want.Size {
		return k, fmt.Errorf("%w: %s has %d bytes, its handle says %d (truncated)", ErrCorrupt, v.name, v.n, v.want.Size)
	}
	return k, err
}
