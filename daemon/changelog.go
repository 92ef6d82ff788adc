package daemon

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/dstl"
	"github.com/statedhq/stated/dstl/changelog"
)

// Defaults of ChangelogConfig.
const (
	DefaultMaterializeInterval    = 10 * time.Minute
	DefaultMaterializeJitter      = 0.2
	DefaultMaterializeTimeout     = 10 * time.Minute
	DefaultMaxMaterializeFailures = 3
	DefaultMaterializeParallelism = 2
	DefaultLogReleaseInterval     = 100 * time.Millisecond
)

// ChangelogConfig makes changelog mode available (package dstl/changelog):
// every change of an instance in it is applied to its backend and
// appended to the daemon's one log Writer, so a checkpoint only makes the
// recent changes durable, and a background materialization takes the
// backend's snapshot at its own pace.
type ChangelogConfig struct {
	// Writer is the daemon's one log writer. Required; the caller closes
	// it after Shutdown.
	Writer *dstl.Writer
	// Log is the store the Writer writes to, read back on restore.
	// Required.
	Log dstl.LogStore
	// Default puts every instance in changelog mode whose OpenParams do
	// not choose ("stated serve --changelog").
	Default bool
	// MaterializeInterval is how often each instance in changelog mode is
	// materialized. Default DefaultMaterializeInterval.
	MaterializeInterval time.Duration
	// MaterializeJitter spreads the materializations of instances opened
	// together: each waits MaterializeInterval times a random factor in
	// [1-j, 1+j]. Default DefaultMaterializeJitter; in [0, 1).
	MaterializeJitter float64
	// MaterializeTimeout abandons a materialization that has neither
	// completed nor failed within it; it counts as a failure and the next
	// one starts afresh. Default DefaultMaterializeTimeout.
	MaterializeTimeout time.Duration
	// MaxMaterializeFailures: after this many failed materializations of
	// an instance in a row, its checkpoints fail with the last failure as
	// the reason until one succeeds (materializations go on). Default
	// DefaultMaxMaterializeFailures.
	MaxMaterializeFailures int
	// MaterializeParallelism bounds the materializations running at once.
	// Default DefaultMaterializeParallelism.
	MaterializeParallelism int
	// ReleaseInterval is how often segments the log let go of are handed
	// to the catalog for deletion. Default DefaultLogReleaseInterval.
	ReleaseInterval time.Duration
	// Release, when set, is where released segments go instead of
	// Catalog.ReleaseLog, with heldFrom: every segment of the Writer's
	// run with a smaller counter is released and referenced by no handle
	// the catalog has yet to hear of. Cluster mode sets it: the catalog
	// is hosted by another node, which cannot ask Writer.Holds. It is
	// called with the names as they become safe, when heldFrom advances,
	// and at least every releaseReportEvery otherwise, so that a newly
	// elected catalog learns heldFrom.
	Release func(ctx context.Context, names []string, heldFrom uint64) error
}

// releaseReportEvery is how often Release is called with nothing new.
const releaseReportEvery = 30 * time.Second

// EnsureDefaults fills zero fields with their defaults.
func (c *ChangelogConfig) EnsureDefaults() {
	if c.MaterializeInterval == 0 {
		c.MaterializeInterval = DefaultMaterializeInterval
	}
	if c.MaterializeJitter == 0 {
		c.MaterializeJitter = DefaultMaterializeJitter
	}
	if c.MaterializeTimeout == 0 {
		c.MaterializeTimeout = DefaultMaterializeTimeout
	}
	if c.MaxMaterializeFailures == 0 {
		c.MaxMaterializeFailures = DefaultMaxMaterializeFailures
	}
	if c.MaterializeParallelism == 0 {
		c.MaterializeParallelism = DefaultMaterializeParallelism
	}
	if c.ReleaseInterval == 0 {
		c.ReleaseInterval = DefaultLogReleaseInterval
	}
}

// Validate reports every problem of c at once.
func (c *ChangelogConfig) Validate() error {
	var errs []error
	if c.Writer == nil {
		errs = append(errs, errors.New("daemon: changelog: no log writer"))
	}
	if c.Log == nil {
		errs = append(errs, errors.New("daemon: changelog: no log store"))
	}
	if c.MaterializeInterval < 0 || c.MaterializeTimeout < 0 || c.ReleaseInterval < 0 {
		errs = append(errs, errors.New("daemon: changelog: negative interval or timeout"))
	}
	if c.MaterializeJitter < 0 || c.MaterializeJitter >= 1 {
		errs = append(errs, fmt.Errorf("daemon: changelog: materialize jitter %g is outside [0, 1)", c.MaterializeJitter))
	}
	if c.MaxMaterializeFailures < 0 || c.MaterializeParallelism < 0 {
		errs = append(errs, errors.New("daemon: changelog: negative limit"))
	}
	return errors.Join(errs...)
}

// ChangelogMode is an instance's choice of changelog mode at open.
type ChangelogMode int

const (
	// ChangelogDefault follows ChangelogConfig.Default.
	ChangelogDefault ChangelogMode = iota
	// ChangelogOn and ChangelogOff choose for this instance.
	ChangelogOn
	ChangelogOff
)

// clState is what the daemon keeps of an instance in changelog mode.
// Guarded by Instance.mu.
type clState struct {
	b *changelog.Backend
	// next is when the next materialization is due.
	next time.Time
	// running: a materialization is under way.
	running bool
	// fails counts failed materializations in a row; lastErr is the last.
	fails   int
	lastErr error
}

// openChangelog opens an instance in changelog mode (or restores one
// written in it): the inner backend comes from open, wrapped. With wrap
// false, the restored state is unwrapped into a plain backend.
func (d *Daemon) openChangelog(opts backend.Options, wrap bool, open func(backend.Options) (backend.Backend, error)) (backend.Backend, *changelog.Backend, error) {
	cl := d.cfg.Changelog
	job := opts.Task.Job
	cb, err := changelog.Open(opts, changelog.Options{OpenInner: open, Writer: cl.Writer, Log: cl.Log,
		BeforePersist: func(ctx context.Context, id uint64) { d.awaitBarrier(ctx, job, id) }})
	if err != nil {
		return nil, nil, err
	}
	if wrap {
		return cb, cb, nil
	}
	inner, err := cb.Unwrap()
	if err != nil {
		_ = cb.Close()
		return nil, nil, err
	}
	return inner, nil, nil
}

// wantChangelog decides an instance's mode.
func (d *Daemon) wantChangelog(m ChangelogMode) bool {
	switch m {
	case ChangelogOn:
		return true
	case ChangelogOff:
		return false
	}
	return d.cfg.Changelog != nil && d.cfg.Changelog.Default
}

// nextMaterialization is when an instance materializes next, from now.
func (d *Daemon) nextMaterialization(now time.Time) time.Time {
	cl := d.cfg.Changelog
	f := 1 + cl.MaterializeJitter*(2*rand.Float64()-1)
	return now.Add(time.Duration(float64(cl.MaterializeInterval) * f))
}

// changelogBackend is in's changelog wrapper, nil when in is not in
// changelog mode.
func (in *Instance) changelogBackend() *changelog.Backend {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cl == nil {
		return nil
	}
	return in.cl.b
}

// Changelog reports whether in is in changelog mode.
func (in *Instance) Changelog() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.cl != nil
}

// materializeFailure is the error a checkpoint of in fails with while its
// materializations keep failing (nil: none).
func (in *Instance) materializeFailure() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	cs := in.cl
	if cs == nil || cs.fails < in.d.cfg.Changelog.MaxMaterializeFailures {
		return nil
	}
	return fmt.Errorf("%w: changelog: the last %d materializations of %s failed (the log grows until one succeeds): %w",
		ErrCheckpointFailed, cs.fails, in.Task, cs.lastErr)
}

// logKeeper runs the daemon's changelog chores: it materializes instances
// when due and hands the segments the log let go of to the catalog. It is
// owned by the Daemon: Shutdown stops it and waits.
type logKeeper struct {
	d    *Daemon
	stop chan struct{}
	done chan struct{}
	// kick asks for a release pass now: a checkpoint completed or an
	// instance closed, so the log likely let go of segments.
	kick chan struct{}
	sem  chan struct{}
	wg   sync.WaitGroup // materializations

	mu sync.Mutex
	// seq numbers the asynchronous snapshot parts (hold); live are those
	// running. A batch of released segments waits until every part that
	// was running when it was taken has finished: such a part may have
	// persisted a window in those segments and not yet handed its handle
	// to the catalog, which protects it from then on.
	seq     uint64
	live    map[uint64]struct{}
	batches []releaseBatch
	// reported and reportedAt are the heldFrom last given to Release and
	// when.
	reported   uint64
	reportedAt time.Time
}

type releaseBatch struct {
	names []string
	upto  uint64
}

func newLogKeeper(d *Daemon) *logKeeper {
	k := &logKeeper{d: d, stop: make(chan struct{}), done: make(chan struct{}), kick: make(chan struct{}, 1),
		sem: make(chan struct{}, d.cfg.Changelog.MaterializeParallelism), live: map[uint64]struct{}{}}
	go k.run()
	return k
}

// hold marks an asynchronous part that may hand a changelog handle to the
// catalog; call the result when it has (or failed).
func (k *logKeeper) hold() func() {
	k.mu.Lock()
	k.seq++
	n := k.seq
	k.live[n] = struct{}{}
	k.mu.Unlock()
	return func() {
		k.mu.Lock()
		delete(k.live, n)
		k.mu.Unlock()
	}
}

// nudge asks for a release pass soon, without waiting.
func (k *logKeeper) nudge() {
	select {
	case k.kick <- struct{}{}:
	default:
	}
}

func (k *logKeeper) run() {
	defer close(k.done)
	cl := k.d.cfg.Changelog
	tick := min(cl.ReleaseInterval, max(cl.MaterializeInterval/10, 10*time.Millisecond))
	t := time.NewTicker(tick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-k.stop:
			return
		case <-k.kick:
			k.release(context.Background())
			last = time.Now()
		case now := <-t.C:
			if now.Sub(last) >= cl.ReleaseInterval {
				k.release(context.Background())
				last = now
			}
			k.materializeDue(now)
		}
	}
}

// release hands the segments whose batch is safe to the catalog.
func (k *logKeeper) release(ctx context.Context) {
	w := k.d.cfg.Changelog.Writer
	// HeldFrom before TakeReleased: a segment released in between is
	// below it and among names, so the batches below protect it.
	heldFrom := w.HeldFrom()
	names := w.TakeReleased()
	k.mu.Lock()
	if len(names) > 0 {
		k.batches = append(k.batches, releaseBatch{names: names, upto: k.seq})
	}
	oldest := k.seq + 1
	for n := range k.live {
		oldest = min(oldest, n)
	}
	var ready []string
	keep := k.batches[:0]
	for _, b := range k.batches {
		if b.upto < oldest {
			ready = append(ready, b.names...)
		} else {
			keep = append(keep, b)
		}
	}
	clear(k.batches[len(keep):])
	k.batches = keep
	// A segment of a batch still waiting may be in a handle an
	// asynchronous part has yet to report: still held.
	prefix := w.Options().Prefix
	for _, b := range keep {
		for _, n := range b.names {
			if _, c, ok := dstl.ParseSegmentName(prefix, n); ok {
				heldFrom = min(heldFrom, c)
			}
		}
	}
	report := k.d.cfg.Changelog.Release
	now := time.Now()
	due := report != nil && (len(ready) > 0 || heldFrom != k.reported || now.Sub(k.reportedAt) >= releaseReportEvery)
	k.mu.Unlock()
	slices.Sort(ready)
	if report != nil {
		if !due {
			return
		}
		if err := report(ctx, ready, heldFrom); err != nil {
			// The names are not kept for a retry: once heldFrom passes
			// them, a later report frees them all the same.
			k.d.log.Warn("reporting released log segments failed; a later report covers them", "segments", len(ready), "err", err)
			return
		}
		k.mu.Lock()
		k.reported, k.reportedAt = heldFrom, now
		k.mu.Unlock()
		return
	}
	if len(ready) == 0 {
		return
	}
	if err := k.d.cfg.Catalog.ReleaseLog(ctx, ready); err != nil {
		k.d.log.Warn("delete released log segments failed; the sweep retries", "segments", len(ready), "err", err)
	}
}

// materializeDue starts the materializations that are due, as many as the
// semaphore allows; the others wait for the next tick.
func (k *logKeeper) materializeDue(now time.Time) {
	for _, in := range k.d.Instances() {
		in.mu.Lock()
		cs := in.cl
		due := cs != nil && !in.closed && !cs.running && !now.Before(cs.next)
		in.mu.Unlock()
		if !due {
			continue
		}
		select {
		case k.sem <- struct{}{}:
		default:
			return
		}
		in.mu.Lock()
		cs.running = true
		in.mu.Unlock()
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			defer func() { <-k.sem }()
			k.materialize(in, cs)
		}()
	}
}

// materialize runs one materialization of in, bounded by the timeout.
func (k *logKeeper) materialize(in *Instance, cs *clState) {
	d := k.d
	cl := d.cfg.Changelog
	ctx, cancel := context.WithTimeout(d.baseCtx, cl.MaterializeTimeout)
	defer cancel()
	t0 := time.Now()
	err := cs.b.Materialize(ctx)
	dur := time.Since(t0)
	if err != nil && ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("abandoned after %s: %w", cl.MaterializeTimeout, err)
	}
	in.mu.Lock()
	cs.running = false
	cs.next = d.nextMaterialization(time.Now())
	closed := in.closed
	if err == nil {
		cs.fails, cs.lastErr = 0, nil
	} else if !closed && d.baseCtx.Err() == nil {
		cs.fails++
		cs.lastErr = err
	}
	fails := cs.fails
	in.mu.Unlock()
	if err == nil {
		d.m.MaterializeDuration.Observe(dur)
		d.m.Materializations.Add(1)
		return
	}
	if closed || d.baseCtx.Err() != nil {
		return // closing: not the backend's failure
	}
	d.m.MaterializeFailures.Add(1)
	d.log.Warn("materialization failed", "task", in.Task.String(), "in_a_row", fails, "err", err)
}

// close stops the keeper, waits for its materializations, and hands what
// the log let go of to the catalog one last time (no snapshot is running
// any more).
func (k *logKeeper) close(ctx context.Context) {
	close(k.stop)
	<-k.done
	k.wg.Wait()
	k.release(ctx)
}
