package catalog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/statedhq/stated/backend"
)

// A replicated catalog.
//
// In a cluster every node keeps a Replica: a copy of the machine that the
// cluster's log keeps up to date, applying each command the leader's
// catalog proposes (Replica.Apply) in log order on every node. The leader
// opens its Catalog over its node's Replica (Options.Replica) and has
// the machine decide through the log (Options.Propose) instead of under
// its own lock: a decision is taken once it is on a quorum, and a new
// leader finds every one of them in its own Replica, in-flight checkpoints
// and their handles included, without listing the store. Only the first
// leader lists it: Open rebuilds the machine from the manifests and job
// files there, as a daemon alone does, and proposes the result as one
// load command.
//
// A command whose fate the log could not confirm (the leader lost its
// term meanwhile) fails with errLogFailed, and the catalog ends then: the
// next leader's Open proposes take-over, which ends every completion and
// savepoint that was under way, as their callers were never told they
// succeeded. A completion whose manifest was written stays in flight, and
// its retry completes with that manifest.

// discardGather is how long a replicated catalog's discarder gathers the
// checkpoints retention dropped before it discards them together.
const discardGather = 200 * time.Millisecond

// proposeTimeout bounds one command's trip through the log.
const proposeTimeout = 30 * time.Second

// errLogFailed: the log did not confirm a command; it may or may not have
// been applied.
var errLogFailed = errors.New("catalog: the replicated log did not confirm the command")

// Replica is a node's copy of the catalog's machine in a cluster. Its
// methods are safe for concurrent use.
type Replica struct {
	s *shared
	// pre are the commands this node's catalog proposed, decoded while
	// the log takes them (prepare.go).
	pre preparedCommands
}

// NewReplica returns an empty replica; retain and maxHistory are the
// catalog's Options.Retain and MaxHistory (defaults when zero), the same
// on every node.
func NewReplica(retain, maxHistory int) *Replica {
	o := Options{Retain: retain, MaxHistory: maxHistory}
	o.EnsureDefaults()
	return &Replica{s: &shared{machine: newMachine(o.Retain, o.MaxHistory)}}
}

// applied is what Replica.Apply returns: the machine's outcome, or its
// refusal.
type applied struct {
	out outcome
	err error
}

// Apply applies one command the log carries and returns the outcome for
// the proposer (this node's Catalog, when it leads). A command that does
// not decode is refused like any other: every node refuses it alike.
func (r *Replica) Apply(cmd []byte) any {
	c, err := r.decoded(cmd)
	if err != nil {
		return applied{err: err}
	}
	r.s.Lock()
	defer r.s.Unlock()
	out, err := r.s.apply(c)
	return applied{out: out, err: err}
}

// Image is the replica's whole state, for the log's snapshots.
func (r *Replica) Image() ([]byte, error) {
	r.s.Lock()
	defer r.s.Unlock()
	return r.s.snapshot()
}

// Restore replaces the replica's state by an image (a log's snapshot).
func (r *Replica) Restore(img []byte) error {
	r.s.Lock()
	defer r.s.Unlock()
	m, err := restoreMachine(img, r.s.retain, r.s.maxHistory)
	if err != nil {
		return err
	}
	m.observe = r.s.observe
	r.s.machine = m
	return nil
}

// Loaded reports whether a leader loaded the catalog into the log yet.
func (r *Replica) Loaded() bool {
	r.s.Lock()
	defer r.s.Unlock()
	return r.s.loaded
}

// load puts what Open read from the store into the log, as the first
// leader's catalog does, and continues over the replica.
func (c *Catalog) load(r *Replica) error {
	img, err := c.mu.snapshot()
	if err != nil {
		return err
	}
	c.mu.shared = r.s
	if _, err := c.exec(command{Op: opLoad, Image: img}); err != nil && !errors.Is(err, ErrExists) {
		return fmt.Errorf("catalog: load the catalog into the log: %w", err)
	}
	// Loaded meanwhile by another (a leader of a term that ended): that
	// load stands, as the log says.
	return c.takeOver(r)
}

// takeOver has a new leader's catalog end what its predecessors left
// under way (opTakeOver).
func (c *Catalog) takeOver(r *Replica) error {
	c.mu.shared = r.s
	if _, err := c.exec(command{Op: opTakeOver}); err != nil {
		return fmt.Errorf("catalog: take over the replicated catalog: %w", err)
	}
	c.startDiscarder()
	c.startMirror()
	return nil
}

// Fence is the fencing token an instance of Task acts under (cluster
// mode: each open of a task takes a new one).
type Fence struct {
	Task  backend.TaskID
	Token uint64
}

// Replicated reports whether the catalog decides through a log
// (Options.Replica).
func (c *Catalog) Replicated() bool { return c.opts.Replica != nil }

// AddFencedTaskHandle is AddTaskHandle of a report made under a fencing
// token: the log takes it only while token is still the task's newest,
// decided in the same entry, so that no report of an instance whose task
// was opened again since can land. A stale token is an error wrapping
// ErrFenced. Only a replicated catalog checks tokens; token 0 (none) is
// AddTaskHandle on any catalog.
func (c *Catalog) AddFencedTaskHandle(job string, id uint64, h *backend.Handle, token uint64) error {
	if token == 0 {
		return c.AddTaskHandle(job, id, h)
	}
	if !c.Replicated() {
		return fmt.Errorf("%w: report of checkpoint %s under fencing token %d: this catalog is not replicated and cannot check tokens",
			ErrInvalidArgument, CheckpointDir(job, id), token)
	}
	if h == nil {
		return fmt.Errorf("%w: nil handle for %s", ErrInvalidArgument, CheckpointDir(job, id))
	}
	if c.isClosed() {
		return ErrClosed
	}
	if err := c.checkNotCompleting(job, id); err != nil {
		return err
	}
	if c.opts.Propose != nil && token != 0 {
		return c.gatherReport(command{Op: opAddHandle, Job: job, ID: id, Handles: []*backend.Handle{h}, Token: token}, Fence{Task: h.Task, Token: token})
	}
	return c.report(command{Op: opAddHandle, Job: job, ID: id, Handles: []*backend.Handle{h}, Token: token}, []Fence{{Task: h.Task, Token: token}})
}

// report has the machine take a report, with its checkpoint's held-back
// begin when the log has not begun it yet.
func (c *Catalog) report(cmd command, fences []Fence) error {
	wc := c.withBegin(cmd)
	_, err := c.execFenced(wc, fences)
	if err == nil && wc.Op == opBatch {
		c.forgetBegin(ref{cmd.Job, cmd.ID})
	}
	return err
}

// maxBegun bounds the begins a replicated catalog holds back; they all
// go with the next command (withHeldBegins), in one batch with it.
const maxBegun = 16

// beginLater holds back the begin of r until its first report
// (withBegin), and reports whether it did (not past maxBegun).
func (c *Catalog) beginLater(r ref) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.mu.begun[r]; ok {
		return true
	}
	if len(c.mu.begun) >= maxBegun {
		return false
	}
	if c.mu.begun == nil {
		c.mu.begun = map[ref]time.Time{}
	}
	c.mu.begun[r] = c.opts.Clock()
	return true
}

// withBegin puts the held-back begin of cmd's checkpoint in front of it,
// in one batch, if the log has not begun the checkpoint yet. The begin
// stays held back until the batch is taken: a refused batch (a stale
// token) must not lose it for the other tasks' reports.
func (c *Catalog) withBegin(cmd command) command {
	r := ref{cmd.Job, cmd.ID}
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.mu.begun[r]
	if !ok {
		return cmd
	}
	if j := c.mu.jobs[r.job]; j != nil && j.inflight[r.id] != nil {
		delete(c.mu.begun, r) // in the log already
		return cmd
	}
	return command{Op: opBatch, Batch: []command{{Op: opBegin, Job: r.job, ID: r.id, Now: at}, cmd}}
}

// withHeldBegins puts the begins the leader holds back in front of cmd,
// in one batch (a batch's own commands after them). A decision about
// in-flight checkpoints (a completion moving the job's base, a discard
// dropping one, retention) must see every checkpoint begun: one that
// began on the old base keeps the base's shared files alive, and
// deciding without it deletes files that checkpoint reuses. A held-back
// begin stays held (its first report still carries it, an idempotent
// begin) until the report is taken. It returns how many begins it put.
func (c *Catalog) withHeldBegins(cmd command) (command, int) {
	if cmd.Op == opLoad || cmd.Op == opTakeOver {
		return cmd, 0
	}
	in := cmd.Batch
	if cmd.Op != opBatch {
		in = []command{cmd}
	}
	sent := map[ref]bool{}
	for _, sub := range in {
		if sub.Op == opBegin {
			sent[ref{sub.Job, sub.ID}] = true
		}
	}
	var begins []command
	c.mu.Lock()
	for r, at := range c.mu.begun {
		j := c.mu.jobs[r.job]
		if _, done := c.mu.entries[r]; done || sent[r] || (j != nil && j.inflight[r.id] != nil) {
			continue
		}
		begins = append(begins, command{Op: opBegin, Job: r.job, ID: r.id, Now: at})
	}
	c.mu.Unlock()
	if len(begins) == 0 {
		return cmd, 0
	}
	slices.SortFunc(begins, func(a, b command) int {
		return cmp.Or(cmp.Compare(a.Job, b.Job), cmp.Compare(a.ID, b.ID))
	})
	return command{Op: opBatch, Batch: append(begins, in...)}, len(begins)
}

// forgetBegin drops a held-back begin (an abort or release).
func (c *Catalog) forgetBegin(r ref) {
	c.mu.Lock()
	delete(c.mu.begun, r)
	c.mu.Unlock()
}

// checkNotCompleting fails when the catalog is closed, or when a
// replicated catalog's Complete is writing the manifest of checkpoint id
// of job (a single catalog's machine refuses that itself).
func (c *Catalog) checkNotCompleting(job string, id uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return ErrClosed
	}
	if c.mu.completing[ref{job, id}] {
		return fmt.Errorf("%w: checkpoint %s is completing", ErrState, CheckpointDir(job, id))
	}
	return nil
}

// FencedHandle is a task's handle with the fencing token its instance
// holds (0: none).
type FencedHandle struct {
	Handle *backend.Handle
	Token  uint64
}

// CompleteWithReports is CompleteTasks by a caller that also hands over
// reports of its own tasks not reported yet. A replicated catalog takes
// them in the completion's own log entry (one log write for reports and
// completion): the entry checks every report's token (all or nothing,
// like a report's own entry), and a report the entry does not take is not
// in the log, so the caller still holds it and must report it (or
// complete again). The completeness checks count the reports as reported
// handles. Another catalog takes them as reports first (no token: it
// cannot check one).
//
// tokens are those its caller's instances hold: the catalog has no fencing
// tokens of its own to check them against (a cluster's catalog service
// checks them before it completes, cluster.CatalogServer), so it refuses them.
func (c *Catalog) CompleteWithReports(ctx context.Context, job string, id uint64, tasks []backend.TaskID, tokens map[backend.TaskID]uint64,
	reports []FencedHandle) (*Manifest, error) {
	if len(tokens) > 0 {
		return nil, fmt.Errorf("%w: complete %s under fencing tokens: this catalog cannot check them (a cluster's catalog service does)",
			ErrInvalidArgument, CheckpointDir(job, id))
	}
	for _, rp := range reports {
		if rp.Handle == nil {
			return nil, fmt.Errorf("%w: nil handle for %s", ErrInvalidArgument, CheckpointDir(job, id))
		}
	}
	if c.Replicated() {
		return c.completeReplicated(ctx, job, id, tasks, reports)
	}
	for _, rp := range reports {
		if rp.Token != 0 {
			return nil, fmt.Errorf("%w: report of checkpoint %s under fencing token %d: this catalog is not replicated and cannot check tokens",
				ErrInvalidArgument, CheckpointDir(job, id), rp.Token)
		}
		if err := c.AddTaskHandle(job, id, rp.Handle); err != nil {
			return nil, err
		}
	}
	return c.CompleteTasks(ctx, job, id, tasks)
}

// mergeReports adds reports to the handles and tokens of in-flight
// checkpoint r as its machine's add-handle would (the completion's entry
// applies them so): the same report again is taken once, a newer token's
// handle replaces an older one's, an older token's is fenced, and another
// handle of a task that has one is refused. It returns the reports that
// add something.
func mergeReports(r ref, hs []*backend.Handle, tokens map[backend.TaskID]uint64, reports []FencedHandle) ([]*backend.Handle, map[backend.TaskID]uint64, []FencedHandle, error) {
	var add []FencedHandle
	for _, rp := range reports {
		h, token := rp.Handle, rp.Token
		i := slices.IndexFunc(hs, func(o *backend.Handle) bool { return o.Task == h.Task })
		if i >= 0 {
			old := tokens[h.Task]
			switch {
			case sameHandle(hs[i], h) && (token == old || token == 0):
				continue
			case token != 0 && old != 0 && token > old:
				hs[i] = h
			case token != 0 && old != 0 && token < old:
				return nil, nil, nil, fmt.Errorf("%w: checkpoint %s: the report of task %s under fencing token %d is older than the one it holds (token %d)",
					ErrFenced, r, h.Task, token, old)
			default:
				return nil, nil, nil, fmt.Errorf("%w: checkpoint %s already has a handle of task %s", ErrExists, r, h.Task)
			}
		} else {
			hs = append(hs, h)
		}
		if token != 0 {
			if tokens == nil {
				tokens = map[backend.TaskID]uint64{}
			}
			tokens[h.Task] = token
		}
		add = append(add, rp)
	}
	return hs, tokens, add, nil
}

// completeReplicated is Complete of a replicated catalog: the manifest is
// written, then one command through the log completes the checkpoint
// (a single catalog's start-complete would be one more log write on the
// completion's path). What retention drops goes in the background
// (discarder): the command marked those checkpoints discarding in every
// replica, so a leader change leaves their discard to the next leader.
//
// tasks are those the checkpoint must hold a handle of; none says the
// caller named no tasks: Options.CheckCompletion then requires every task
// of the job. reports (CompleteWithReports) go into the completion's
// entry, as add-handle commands in one batch with it (and the held-back
// begin of the checkpoint, if the log has not begun it), under their
// tokens' checks.
func (c *Catalog) completeReplicated(ctx context.Context, job string, id uint64, tasks []backend.TaskID, reports []FencedHandle) (*Manifest, error) {
	r := ref{job, id}
	whole := len(tasks) == 0
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if e, ok := c.mu.entries[r]; ok && !e.discarding {
		m := cloneManifest(e.m)
		c.mu.Unlock()
		// Completed already: every task asked for must be in it.
		if missing := missingTasks(m.Tasks, tasks); len(missing) > 0 {
			return nil, fmt.Errorf("%w: checkpoint %s has no handle of tasks %s", ErrState, r, strings.Join(missing, ", "))
		}
		return m, nil
	}
	_, inf, err := c.mu.inflightOf(job, id, " (BeginCheckpoint first)")
	beganAt, begun := c.mu.begun[r]
	begin := false // the entry begins the checkpoint
	var started time.Time
	var hs []*backend.Handle
	var tokens map[backend.TaskID]uint64
	switch {
	case err != nil && begun && len(reports) > 0:
		// Begun here and held back: the completion's entry begins it.
		err, begin, started = nil, true, beganAt
	case err != nil && begun:
		err = fmt.Errorf("%w: checkpoint %s has no task handle", ErrInvalidArgument, r)
	case err != nil:
	case c.mu.completing[r] || inf.completing:
		err = fmt.Errorf("%w: checkpoint %s is already completing", ErrState, r)
	default:
		started, hs, tokens = inf.started, slices.Clone(inf.handles), maps.Clone(inf.tokens)
	}
	if err == nil {
		hs, tokens, reports, err = mergeReports(r, hs, tokens, reports)
	}
	if err == nil && len(hs) == 0 {
		err = fmt.Errorf("%w: checkpoint %s has no task handle", ErrInvalidArgument, r)
	}
	if err == nil {
		if missing := missingTasks(hs, tasks); len(missing) > 0 {
			// In flight still: their daemons may report them, and the
			// caller retries.
			err = fmt.Errorf("%w: checkpoint %s has no handle of tasks %s", ErrState, r, strings.Join(missing, ", "))
		}
	}
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	if c.mu.completing == nil {
		c.mu.completing = map[ref]bool{}
	}
	c.mu.completing[r] = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.mu.completing, r)
		c.mu.Unlock()
	}()

	if c.opts.CheckCompletion != nil {
		// Reports of the checkpoint are refused while it completes, so
		// these are the handles the manifest lists.
		if err := c.opts.CheckCompletion(ctx, Completion{Job: job, ID: id, Handles: hs, Tokens: tokens, Whole: whole}); err != nil {
			return nil, fmt.Errorf("catalog: complete %s: %w", r, err)
		}
	}
	m, enc, err := c.writeManifest(ctx, r, started, hs)
	if err != nil {
		return nil, err
	}
	cmd := command{Op: opCompleted, Job: job, ID: id, Manifest: enc, decoded: m}
	var fences []Fence
	if len(reports) > 0 || begin {
		var batch []command
		if begin {
			batch = append(batch, command{Op: opBegin, Job: job, ID: id, Now: started})
		}
		for _, rp := range reports {
			batch = append(batch, command{Op: opAddHandle, Job: job, ID: id, Handles: []*backend.Handle{rp.Handle}, Token: rp.Token})
			if rp.Token != 0 {
				fences = append(fences, Fence{Task: rp.Handle.Task, Token: rp.Token})
			}
		}
		cmd = command{Op: opBatch, Batch: append(batch, cmd)}
	}
	out, err := c.execFenced(cmd, fences)
	if errors.Is(err, errLogFailed) {
		// Whether the log took it is unknown: the manifest stays, and a
		// retry (on the next leader) completes with it.
		return nil, err
	}
	if err != nil {
		// Refused (aborted meanwhile, a stale token): no manifest may
		// outlive it.
		c.deleteNames(ctx, []string{r.manifest()})
		return nil, err
	}
	c.forgetBegin(r)
	c.deleteReleased(ctx, out.releaseShared)
	if len(out.discard) > 0 {
		c.kickDiscarder()
	}
	c.mirrorJob(ctx, job) // after the answer (mirror.go)
	return cloneManifest(m), nil
}

// missingTasks are the tasks (sorted names) no handle of hs belongs to.
func missingTasks(hs []*backend.Handle, tasks []backend.TaskID) []string {
	if len(tasks) == 0 {
		return nil
	}
	have := map[backend.TaskID]bool{}
	for _, h := range hs {
		have[h.Task] = true
	}
	var missing []string
	for _, t := range tasks {
		if !have[t] {
			missing = append(missing, t.String())
		}
	}
	slices.Sort(missing)
	return missing
}

// startDiscarder runs a replicated catalog's discarder until Close: it
// discards the checkpoints marked discarding, gathered for discardGather
// after a completion kicks it, and once at the start, for those a former
// leader left.
func (c *Catalog) startDiscarder() {
	c.discardKick = make(chan struct{}, 1)
	stop, done := make(chan struct{}), make(chan struct{})
	c.mu.Lock()
	c.mu.discarderStop, c.mu.discarderDone = stop, done
	c.mu.Unlock()
	c.kickDiscarder()
	go func() {
		defer close(done)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			<-stop
			cancel()
		}()
		for {
			select {
			case <-stop:
				return
			case <-c.discardKick:
			}
			// Gathered: the discards of many completions share one log
			// write, which would otherwise compete with every
			// completion's own.
			select {
			case <-stop:
				return
			case <-time.After(discardGather):
			}
			for todo := c.discarding(); len(todo) > 0; {
				n := min(len(todo), maxBatch-maxBegun)
				if err := c.discardMany(ctx, todo[:n]); err != nil {
					c.log.Warn("discarding dropped checkpoints failed; the sweep retries", "err", err)
				}
				todo = todo[n:]
			}
		}
	}()
}

// kickDiscarder wakes the discarder (a no-op without one).
func (c *Catalog) kickDiscarder() {
	select {
	case c.discardKick <- struct{}{}:
	default:
	}
}

// isClosed reports whether Close was called.
func (c *Catalog) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.closed
}

// exec has the machine decide on cmd: under the catalog's lock, or
// through the replicated log (Options.Propose), which applies it to every
// node's replica, this one's included, and returns this one's outcome.
// The caller does not hold the lock.
func (c *Catalog) exec(cmd command) (outcome, error) { return c.execFenced(cmd, nil) }

// execFenced is exec of a command the log applies only while every fence
// holds.
func (c *Catalog) execFenced(cmd command, fences []Fence) (outcome, error) {
	if c.opts.Propose == nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.mu.apply(cmd)
	}
	// A fenced command's entry may be refused whole (a stale token): the
	// held-back begins go with the next one instead.
	wasBatch, held := cmd.Op == opBatch, 0
	if len(fences) == 0 {
		cmd, held = c.withHeldBegins(cmd)
	}
	enc, err := encodeCommand(cmd)
	if err != nil {
		return outcome{}, err
	}
	// Not the caller's context: a command the caller gave up on may still
	// be applied, and its outcome must then be acted on (or the next
	// leader take over).
	ctx, cancel := context.WithTimeout(context.Background(), proposeTimeout)
	defer cancel()
	if c.opts.Replica != nil {
		defer c.opts.Replica.prepare(enc)()
	}
	res, err := c.opts.Propose(ctx, enc, fences)
	if errors.Is(err, ErrFenced) {
		return outcome{}, err
	}
	if err != nil {
		return outcome{}, fmt.Errorf("%w (%s): %w", errLogFailed, cmd.Op, err)
	}
	a, ok := res.(applied)
	if !ok {
		return outcome{}, fmt.Errorf("%w (%s): the log answered %T, not the replica's outcome", errLogFailed, cmd.Op, res)
	}
	if held > 0 && a.err == nil {
		// The caller's outcome, as if its command had gone alone.
		if wasBatch {
			a.out.subs = a.out.subs[held:]
		} else {
			a.out.subs = nil
		}
	}
	return a.out, a.err
}
