package catalog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
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
	DefaultSweepMaxListPages = 1000
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
	// sweep deletes it. It must exceed the longest a checkpoint stays in
	// flight (the daemon's checkpoint timeout, which daemon.New checks
	// against GCGrace()), so that uploads of a running checkpoint are
	// never orphans. Default DefaultGCGrace.
	GCGrace time.Duration
	// SweepInterval is the quiet time between background sweeps (Start):
	// the next pass starts SweepInterval after the previous one ended, so
	// a pass that takes longer than the interval (a large store listed
	// page by page) is never followed at once by another. Default
	// DefaultSweepInterval.
	SweepInterval time.Duration
	// SweepMaxListPages bounds the LIST pages one sweep reads (of the
	// checkpoint store and the log store together; on S3 a page is one
	// LIST request of up to 1,000 names). A sweep that reaches it stops
	// listing and deletes nothing from the stores (GCReport.Truncated, a
	// Problem, and a warning): its decisions need the whole listing. Raise
	// it for a store of more objects. Default DefaultSweepMaxListPages (a
	// million objects on S3); negative: no bound.
	SweepMaxListPages int
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
	// Logger receives problems that do not fail the call that met them (a
	// delete that the sweep will retry) and what the sweep deleted, with
	// the attribute component=catalog. Default: a logger that discards
	// everything (the catalog is a library; the daemon passes its own).
	Logger *slog.Logger
	// HeapStore is where heap backends keep their snapshot files (the
	// daemon's one in-memory store), under the same names as in
	// checkpoint storage ("<job>/chk-<N>/..."). Optional: when set, the
	// catalog deletes heap files there as it deletes other files in Store
	// (see heap.go); without it nothing ever deletes them.
	HeapStore tiered.Store
	// LogStore is where the changelog's segments live (the names a
	// handle's Log lists, under LogDir). Default Store. The catalog
	// counts them with the other shared files, deletes them here when no
	// retained checkpoint or savepoint references them and LogHeld does
	// not hold them, and sweeps orphans under LogDir here.
	LogStore tiered.Store
	// LogHeld reports whether the live changelog still holds a segment
	// (dstl.Writer.Holds): records in it are not yet truncated, so a
	// later checkpoint may reference it even if no retained one does
	// now. Default: nothing is held (no changelog writes to this store).
	LogHeld func(name string) bool
	// SelfContain, when set, is asked for each handle a native savepoint
	// copies from retained checkpoints (SavepointFromCheckpoint) to give
	// one that needs nothing from LogStore (changelog.SelfContained): it
	// reads the handle's files from src and its log from log, writes the
	// files it makes into dst under the paths the returned handle lists,
	// and returns those paths in written, which are then not copied. A
	// savepoint stays self-contained and relocatable so. Default: handles
	// are copied as they are (a changelog handle's window then stays in
	// the shared segments, which the savepoint references).
	SelfContain func(ctx context.Context, src, log tiered.Store, h *backend.Handle, dst tiered.Store) (nh *backend.Handle, written []string, err error)
	// Guard, when set, is asked before every object the catalog writes or
	// deletes in Store and LogStore (job files, manifests, delete batches),
	// and once more after a manifest is written, before Complete reports
	// it. In cluster mode it confirms with a quorum that this node still
	// leads: a deposed leader that has not noticed yet fails the check
	// instead of deleting what the new leader's checkpoints reference or
	// overwriting its job files. An error fails the write or delete (the
	// sweep retries deletes on the leader that holds the catalog then).
	// Default: always allowed (a daemon alone owns its root).
	Guard func(ctx context.Context) error
	// DeleteGuard, when set, is asked before every delete batch instead
	// of Guard: in cluster mode Guard may answer from a leader lease,
	// DeleteGuard always asks a quorum, so that even a leader cut off a
	// moment ago deletes nothing. Default: Guard.
	DeleteGuard func(ctx context.Context) error
	// Replica and Propose make a replicated catalog (replica.go): the
	// machine is Replica, kept up to date on every node by a log, and
	// every decision is a command Propose appends to that log; it returns
	// once the command is applied to this node's Replica, with what
	// Replica.Apply returned for it. With fences the log applies the
	// command only while each fence's token is its task's newest, in the
	// same entry, and otherwise returns an error wrapping ErrFenced (a
	// refusal: no replica saw it). Both or neither. Default: neither, a
	// catalog alone over its root.
	Replica *Replica
	Propose func(ctx context.Context, cmd []byte, fences []Fence) (any, error)
	// CheckCompletion (nil: none), of a replicated catalog, is asked by a
	// completion right before its manifest is written; Guard, asked
	// next, confirms the leadership, which makes what it read a
	// linearizable read. It gets the handles the manifest would list,
	// with the fencing tokens they were reported under, and whether the
	// caller named no tasks (then the checkpoint must hold every task of
	// its job). An error refuses the completion; the checkpoint stays in
	// flight. In cluster mode it refuses a handle whose task was opened
	// again since it was reported, and a checkpoint without a task list
	// that lacks a task open anywhere in the cluster or a subtask of an
	// operator it holds handles of (Missing).
	CheckCompletion func(ctx context.Context, c Completion) error
}

// Completion is what Options.CheckCompletion checks.
type Completion struct {
	Job string
	ID  uint64
	// Handles are the handles the manifest would list.
	Handles []*backend.Handle
	// Tokens are the fencing tokens of the handles' reports, by task (a
	// handle reported without one has none).
	Tokens map[backend.TaskID]uint64
	// Whole: the caller named no tasks, so the checkpoint must hold
	// every task of the job.
	Whole bool
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
	if o.SweepMaxListPages == 0 {
		o.SweepMaxListPages = DefaultSweepMaxListPages
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
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.LogStore == nil {
		o.LogStore = o.Store
	}
	if o.LogHeld == nil {
		o.LogHeld = func(string) bool { return false }
	}
	if o.Guard == nil {
		o.Guard = func(context.Context) error { return nil }
	}
	if o.DeleteGuard == nil {
		o.DeleteGuard = o.Guard
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
	if o.DeleteBatch < 1 || o.DeleteBatch > 1000 {
		errs = append(errs, fmt.Errorf("%w: delete batch %d is outside [1,1000]", ErrInvalidArgument, o.DeleteBatch))
	}
	if o.DeleteParallelism < 1 {
		errs = append(errs, fmt.Errorf("%w: delete parallelism %d must be at least 1", ErrInvalidArgument, o.DeleteParallelism))
	}
	if o.MaxHistory < 1 {
		errs = append(errs, fmt.Errorf("%w: max history %d must be at least 1", ErrInvalidArgument, o.MaxHistory))
	}
	if (o.Replica == nil) != (o.Propose == nil) {
		errs = append(errs, fmt.Errorf("%w: a replicated catalog needs both a replica and a log to propose to", ErrInvalidArgument))
	}
	if o.Replica != nil && (o.Replica.s.retain != o.Retain || o.Replica.s.maxHistory != o.MaxHistory) {
		errs = append(errs, fmt.Errorf("%w: the replica keeps %d checkpoints and %d history records, the catalog %d and %d",
			ErrInvalidArgument, o.Replica.s.retain, o.Replica.s.maxHistory, o.Retain, o.MaxHistory))
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
	started time.Time
	handles []*backend.Handle
	// tokens are the fencing tokens the handles were reported under, by
	// task (a replicated catalog; none for a report without one).
	tokens map[backend.TaskID]uint64
	// completing: a Complete is writing the manifest, which lists handles
	// and extra, the handles passed to that Complete.
	completing bool
	extra      []*backend.Handle
}

// jobState is what the catalog knows of one job besides its checkpoints.
// Its fields are guarded by Catalog.mu, but saveMu.
type jobState struct {
	name     string
	inflight map[uint64]*inflight
	history  []Record // sorted by ID
	// noClaim are the files of the checkpoint the job last restored in
	// no-claim mode: its new checkpoints must reference none of them.
	noClaim     map[string]string // path -> checkpoint dir
	noClaimFrom string
	// base is the checkpoint the job's tasks build their next incremental
	// checkpoints on: the job's last completion or the checkpoint it last
	// restored in claim mode (zero: none). prevBase is the one before, on
	// which a checkpoint begun just before the tasks heard of the newer
	// one still builds. See base.go.
	base, prevBase ref
	// baseRestored: base was set by a restore, so the next completion
	// moves it whatever its id (as the backends' bases move); after that
	// only a newer completion does.
	baseRestored bool
	// degraded: the job file could not be read. Retention is off (a pin may
	// be lost) and the file is left as it is for a human to look at.
	degraded bool
	// damage is what was found wrong with the job file when degraded.
	damage error
	saveMu sync.Mutex // orders writes of the job file
}

// Catalog is the per-store registry of completed checkpoints and
// savepoints. See the package documentation.
type Catalog struct {
	opts  Options
	store tiered.Store
	// heap is Options.HeapStore (nil: heap files are not managed).
	heap tiered.Store
	// logStore is Options.LogStore: where names under LogDir live.
	logStore tiered.Store
	// log is Options.Logger with component=catalog.
	log *slog.Logger

	// gcMu serializes GC passes. Lock order: gcMu, then a job's saveMu,
	// then mu.
	gcMu sync.Mutex
	// sweeps, sweepPages and sweepsTruncated count GC passes (Stats).
	sweeps, sweepPages, sweepsTruncated atomic.Uint64

	// mu guards every field in it, the machine's included, and the fields
	// of every jobState and entry (but jobState.saveMu). It is never held across store I/O:
	// operations take it, decide and mark, let it go for the I/O, and take
	// it again to record the outcome, re-checking what may have changed.
	mu struct {
		// closed: Close was called; calls that change the catalog fail
		// with ErrClosed.
		closed bool
		// completing are the checkpoints a replicated catalog's Complete
		// is writing the manifest of (the leader's own marks, as
		// guard.deleting: reports and aborts of them are refused here
		// before they reach the log).
		completing map[ref]bool
		// begun are the checkpoints a replicated catalog's BeginCheckpoint
		// took and has not put in the log yet, with their start: the
		// begin goes in with the first report (opBatch), saving the
		// log write a begin alone would cost every checkpoint. At most
		// maxBegun; a leader change forgets them (the nodes' clients
		// begin again, as they report again).
		begun map[ref]time.Time
		// discarderStop and discarderDone belong to a replicated
		// catalog's discarder (replica.go); nil otherwise.
		discarderStop, discarderDone chan struct{}
		// mirrorKick, mirrorStop and mirrorDone belong to a replicated
		// catalog's job-file writer, mirrorDirty are the jobs whose
		// files it is to write (mirror.go); nil otherwise.
		mirrorKick, mirrorStop, mirrorDone chan struct{}
		mirrorDirty                        map[string]bool

		// shared is the machine (the catalog's state and its decisions,
		// machine.go) and the mutex that guards it and this struct: the
		// catalog's own, or a Replica's (Options.Replica), whose log
		// applies commands to it from outside the catalog.
		*shared

		// adopting counts, by name, the savepoint directories and log
		// segments of the savepoints adoptSavepoint is adopting (this
		// node's own marks, as guard.deleting): deleteUnreferenced
		// leaves them alone, so that nothing a savepoint about to be
		// registered lists is deleted between its check and its
		// registration.
		adopting map[string]int
		// spDeleting are the savepoints DeleteSavepoint is deleting: the
		// sweep does not drop them (the delete does), and they are not
		// adopted again meanwhile.
		spDeleting map[string]bool
		// droppedSps are savepoints deleted while the catalog ran
		// (noteDropped), for the error of a restore from one.
		droppedSps map[string]bool

		// sweepCancel and sweepDone belong to the background sweep
		// (Start); nil until it starts.
		sweepCancel context.CancelFunc
		sweepDone   chan struct{}
	}

	// discardKick wakes a replicated catalog's discarder.
	discardKick chan struct{}

	// reports holds fenced reports back for a shared log write
	// (reportbatch.go).
	reports reportBatcher

	// afterSweep, if set (by tests, before Start), is called by the
	// background sweep after each pass.
	afterSweep func(*GCReport, error)
}

// deleteGuard is the catalog's check-and-mark state for deletes, beside
// the registry. Guarded by Catalog.mu.
//
// Invariants: protect[p] is the number of pending handles (added to an
// in-flight checkpoint, or passed to a Complete in progress) that list p,
// plus one for good if p is listed by a checkpoint Open could not register
// (a name with two contents); p is absent at zero. deleting[p] is set by deleteUnreferenced after
// it checked under mu that p is not live, and cleared when its delete
// call returns; checkHandle refuses a handle that lists a name being
// deleted, so a name is never protected and deleted at once. dirs maps the
// directories of damaged or conflicting manifests to the problem: nothing
// under them is ever deleted.
type deleteGuard struct {
	protect  map[string]int
	deleting map[string]bool
	dirs     map[string]string
}

func newDeleteGuard() deleteGuard {
	return deleteGuard{protect: map[string]int{}, deleting: map[string]bool{}, dirs: map[string]string{}}
}

// add changes the protection of the managed files of h by delta (+1 when
// a handle becomes pending, -1 when it is no longer).
func (g *deleteGuard) add(h *backend.Handle, delta int) {
	for _, o := range managedObjects(h) {
		g.protect[o.Path] += delta
		if g.protect[o.Path] <= 0 {
			delete(g.protect, o.Path)
		}
	}
}

// guards reports whether the guard keeps name: a pending handle lists it,
// a delete of it is under way, or it is under a damaged directory (dir is
// name's checkpoint or savepoint directory, "" for none).
func (g *deleteGuard) guards(name, dir string) bool {
	if g.protect[name] > 0 || g.deleting[name] {
		return true
	}
	_, bad := g.dirs[dir]
	return bad && dir != ""
}

// spEntry is a completed savepoint.
type spEntry struct {
	m   *Manifest
	enc []byte
}

// Open reads the catalog back from the store: every checkpoint and
// savepoint manifest, every job file, and rebuilds the shared-file registry
// from the manifests (refcount.Rebuild). It only reads: retention beyond Retain, orphans and
// interrupted deletions are dealt with by the next Complete and sweep.
// Damaged manifests and job files do not fail Open: they are reported by
// Problems, and nothing in their directories is ever deleted.
func Open(ctx context.Context, opts Options) (*Catalog, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	c := &Catalog{
		opts: opts, store: opts.Store, heap: opts.HeapStore, logStore: opts.LogStore,
		log: opts.Logger.With("component", "catalog"),
	}
	c.mu.shared = &shared{machine: newMachine(opts.Retain, opts.MaxHistory)}
	if opts.Replica != nil && opts.Replica.Loaded() {
		// A leader before this one loaded the catalog into the log: the
		// replica holds all of it.
		return c, c.takeOver(opts.Replica)
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
	// owners are what the retained manifests reference, for
	// refcount.Rebuild; refusedBy says what to keep when Rebuild refuses
	// an owner.
	owners := map[string][]refcount.Object{}
	refusedBy := map[string]func(error){}
	for _, name := range jobFiles {
		n := classify(name)
		j := c.mu.job(n.job)
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
			j.degraded, j.damage = true, err
			c.mu.problems = append(c.mu.problems, Problem{What: "job file", Object: name, Job: n.job, Err: err,
				Effect: fmt.Sprintf("retention of job %s is off until it is repaired", n.job)})
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
			c.mu.noteDamagedManifest(n, name, err)
			continue
		}
		if n.kind == objSavepointManifest {
			c.mu.savepoints[n.sp] = &spEntry{m: m, enc: data}
			owners[spOwner(n.sp)] = savepointObjects(m, data)
			refusedBy[spOwner(n.sp)] = func(err error) {
				c.mu.guard.dirs[n.dir()] = err.Error()
				c.mu.problems = append(c.mu.problems, Problem{What: "savepoint", Object: n.sp, Err: err})
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
		c.mu.entries[r] = e
		c.mu.job(r.job)
		c.mu.job(e.owner)
		objs := checkpointObjects(m, data)
		owners[r.dir()] = objs
		refusedBy[r.dir()] = func(err error) {
			// The store holds two different objects under one name: keep
			// everything this checkpoint lists, and say so.
			for _, o := range objs {
				c.mu.guard.protect[o.Path]++
			}
			c.mu.problems = append(c.mu.problems, Problem{What: "checkpoint", Object: r.String(), Job: r.job, Err: err})
		}
	}
	// The registry is rebuilt from the retained manifests, never stored:
	// after a crash, whatever a completion or discard left half done, it
	// counts exactly what the surviving manifests reference.
	reg, refused := refcount.Rebuild(owners)
	c.mu.reg = reg
	for _, owner := range slices.Sorted(maps.Keys(refused)) {
		refusedBy[owner](refused[owner])
	}
	if opts.Replica != nil {
		if err := c.load(opts.Replica); err != nil {
			return nil, err
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
// neither checks, counts nor deletes them. A heap instance in changelog
// mode writes its bases and manifests to the checkpoint store like the
// other kinds.
func managed(h *backend.Handle) bool { return h.Backend != backend.KindHeap || h.IsChangelog() }

// managedObjects are the objects of h the catalog counts: its files, if
// managed, and its log segments (always: they are in the log store).
func managedObjects(h *backend.Handle) []refcount.Object {
	var objs []refcount.Object
	if managed(h) {
		for _, f := range h.Files {
			if f.Inline != nil {
				continue // its bytes are in the handle: no object
			}
			if f.Pack != nil {
				// The pack object is shared by the tasks of one daemon,
				// as channel state objects are: counted once per
				// checkpoint. The file has no object of its own.
				objs = append(objs, refcount.Object{Path: f.Pack.Object})
				continue
			}
			objs = append(objs, refcount.Object{Path: f.Path, Size: f.Size, CRC32C: f.CRC32C})
		}
	}
	if h.Log != nil {
		for _, s := range h.Log.Segments {
			objs = append(objs, refcount.Object{Path: s})
		}
	}
	// Channel state objects are always in the checkpoint store (also for
	// heap handles), and shared by the tasks of one daemon: the registry
	// counts each once per checkpoint.
	for _, name := range h.ChannelObjects() {
		objs = append(objs, refcount.Object{Path: name})
	}
	return objs
}

// checkpointObjects are the objects a checkpoint references: its manifest
// and the files of its managed handles.
func checkpointObjects(m *Manifest, enc []byte) []refcount.Object {
	objs := []refcount.Object{{Path: CheckpointManifest(m.Job, m.CheckpointID), Size: int64(len(enc)), CRC32C: frame.Checksum(enc)}}
	for _, h := range m.Tasks {
		objs = append(objs, managedObjects(h)...)
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
		// A native savepoint of a changelog instance reads its log from
		// the log store, under the segments' own names.
		if h.Log != nil {
			for _, s := range h.Log.Segments {
				objs = append(objs, refcount.Object{Path: s})
			}
		}
	}
	return objs
}

// Problem is one thing Open or a sweep found damaged.
type Problem struct {
	// What kind of thing it is: "manifest", "job file", "savepoint" or
	// "checkpoint".
	What string
	// Object names it: the object's name, the savepoint id or the
	// checkpoint (job/chk-N).
	Object string
	// Job is the job it belongs to ("" for a savepoint).
	Job string
	// Err says what is wrong; it wraps ErrCorrupt when the data failed its
	// checks (errors.Is(p.Err, backend.ErrCorrupt)).
	Err error
	// Effect says what the catalog does about it ("" when nothing more
	// than keeping what it references).
	Effect string
}

// String is the problem as the CLI and the logs show it.
func (p Problem) String() string {
	s := fmt.Sprintf("%s %s: %v", p.What, p.Object, p.Err)
	if p.Effect != "" {
		s += " (" + p.Effect + ")"
	}
	return s
}

// Problems lists what Open and the sweeps found damaged: manifests and job
// files that do not decode, and objects registered twice with different
// sizes. Their directories are never deleted.
func (c *Catalog) Problems() []Problem {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.mu.problems)
}

// GCGrace is Options.GCGrace: whoever expires in-flight checkpoints (the
// daemon) must do so well within it.
func (c *Catalog) GCGrace() time.Duration { return c.opts.GCGrace }

// Store is the checkpoint root the catalog manages.
func (c *Catalog) Store() tiered.Store { return c.store }

// Jobs lists the jobs with a history, a checkpoint or one in flight, sorted.
func (c *Catalog) Jobs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for name := range c.mu.jobs {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

func (c *Catalog) saveJobLogged(ctx context.Context, job string) {
	if err := c.saveJob(ctx, job); err != nil {
		c.log.Warn("save the job file failed", "job", job, "err", err)
	}
}

// saveJob writes job's file: history, pins, adoptions. Writes of one job
// are serialized and each writes the state at its start, so the last write
// holds the newest state.
func (c *Catalog) saveJob(ctx context.Context, job string) error {
	c.mu.Lock()
	j := c.mu.job(job)
	c.mu.Unlock()
	j.saveMu.Lock()
	defer j.saveMu.Unlock()
	c.mu.Lock()
	if j.degraded {
		c.mu.Unlock()
		return jobFileErr(j)
	}
	f := &jobFile{Version: JobFileVersion, Job: job, History: slices.Clone(j.history)}
	for _, e := range c.mu.entries {
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
	if err := c.opts.Guard(ctx); err != nil {
		return fmt.Errorf("catalog: write job file of %s: %w", job, err)
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
	// Sweeps are the GC passes run since Open, SweepListPages the LIST
	// pages they read, and SweepsTruncated the passes that reached
	// Options.SweepMaxListPages (and deleted nothing from the stores).
	Sweeps, SweepListPages, SweepsTruncated uint64
}

// Stats returns the catalog's totals.
func (c *Catalog) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{Jobs: len(c.mu.jobs), Savepoints: len(c.mu.savepoints), Referenced: c.mu.reg.Stats(),
		Sweeps: c.sweeps.Load(), SweepListPages: c.sweepPages.Load(), SweepsTruncated: c.sweepsTruncated.Load()}
	for _, e := range c.mu.entries {
		if !e.discarding {
			s.Retained++
		}
	}
	for _, j := range c.mu.jobs {
		s.InFlight += len(j.inflight)
	}
	return s
}
