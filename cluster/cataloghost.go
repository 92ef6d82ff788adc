package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
)

// hostOpenTimeout bounds a new leader's wait for its log and the opening
// of its catalog (for the cluster's first leader, a listing of the
// checkpoint root).
const hostOpenTimeout = 2 * time.Minute

// errDeposed fails the hosted catalog's writes once this node's term has
// passed: another leader may have decided since.
var errDeposed = errors.New("cluster: this node no longer hosts the cluster's catalog")

// CatalogHost hosts the cluster's one catalog while this node leads: on
// becoming leader it waits for the raft log to be applied, opens the
// catalog over the node's replica (which the log keeps, so only the
// cluster's first leader reads the checkpoint store) and serves it to every node's
// CatalogClient through Call; on losing leadership (or a new
// term) it stops serving and closes it. It then has the node's own
// client report its in-flight checkpoints to whichever catalog now
// serves. One goroutine, owned by the node, does all of it in order.
type CatalogHost struct {
	c      *Member
	base   catalog.Options
	client *CatalogClient
	log    *slog.Logger
	// logs takes the nodes' changelog release reports (ReleaseChangelog).
	logs   *ChangelogRuns
	kick   chan struct{}
	resync chan struct{}
	stop   chan struct{}
	done   chan struct{} // closed when both goroutines returned

	mu   sync.Mutex
	cat  *catalog.Catalog // nil: not hosting
	srv  *CatalogServer
	term uint64
}

// NewCatalogHost returns the catalog host of member c: base are the
// catalog's options (its Replica the one c's log keeps), client this
// node's client of whichever catalog serves, and logs (nil: no changelog)
// the node's changelog runs, whose releases then go through client. Run
// starts it, Close stops it.
func NewCatalogHost(c *Member, base catalog.Options, client *CatalogClient, logs *ChangelogRuns, log *slog.Logger) *CatalogHost {
	if logs != nil {
		logs.client = client
	}
	h := &CatalogHost{c: c, base: base, client: client, logs: logs, log: log.With("component", "catalog-host"),
		kick: make(chan struct{}, 1), resync: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	client.setHosted(h.server)
	return h
}

// server is the catalog server this node hosts in its current term (nil:
// none).
func (h *CatalogHost) server() *CatalogServer {
	h.mu.Lock()
	srv, term := h.srv, h.term
	h.mu.Unlock()
	if srv == nil || h.c.Term() != term {
		return nil
	}
	return srv
}

// Nudge asks the host to look at the leadership again (OnLeaderChange).
func (h *CatalogHost) Nudge() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// Current is the hosted catalog (nil: this node does not host it).
func (h *CatalogHost) Current() *catalog.Catalog {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cat
}

// Run starts the host's two goroutines: one hosts or releases the
// catalog as the leadership changes, the other resyncs the node's client
// with whichever catalog serves (it may wait seconds for a new leader,
// which must not delay this node's own hosting).
func (h *CatalogHost) Run() {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		// Leadership can change without an observation this node saw in
		// time (a term won back): look again now and then, too.
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			if h.reconcile() {
				select {
				case h.resync <- struct{}{}:
				default:
				}
			}
			select {
			case <-h.stop:
				h.release()
				return
			case <-h.kick:
			case <-tick.C:
			}
		}
	}()
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-h.resync:
			case <-tick.C:
				if h.client.Pending() == 0 {
					continue
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			go func() { // the stop ends a resync waiting for a leader
				select {
				case <-h.stop:
				case <-ctx.Done():
				}
				cancel()
			}()
			if err := h.client.Resync(ctx); err != nil && ctx.Err() == nil {
				h.log.Warn("resyncing with the cluster's catalog failed; retrying", "err", err)
			}
			cancel()
		}
	}()
	wg.Wait()
	close(h.done)
}

// reconcile hosts the catalog if this node leads in a term it does not
// host yet and releases it if not; it reports whether the leadership
// changed (a resync is due) — any nudge may mean another node leads now.
func (h *CatalogHost) reconcile() bool {
	leading, term := h.c.IsLeader(), h.c.Term()
	h.mu.Lock()
	hosting, hostTerm := h.cat != nil, h.term
	h.mu.Unlock()
	changed := false
	if hosting && (!leading || hostTerm != term) {
		h.release()
		changed = true
	}
	if leading && (!hosting || hostTerm != term) {
		if err := h.host(term); err != nil {
			h.log.Error("hosting the catalog failed; retrying", "term", term, "err", err)
			return false
		}
		changed = true
	}
	return changed || !leading
}

// host opens the catalog for term and serves it.
func (h *CatalogHost) host(term uint64) error {
	ctx, cancel := context.WithTimeout(context.Background(), hostOpenTimeout)
	defer cancel()
	// Every command committed by earlier leaders (fencing tokens) is
	// applied here before the catalog decides anything.
	if err := h.c.Barrier(ctx); err != nil {
		return fmt.Errorf("waiting for the raft log: %w", err)
	}
	o := h.base
	guard := func(confirm func(context.Context) error) func(context.Context) error {
		return func(ctx context.Context) error {
			if h.c.Term() != term {
				return fmt.Errorf("%w (its term %d ended)", errDeposed, term)
			}
			return confirm(ctx)
		}
	}
	// Writes may go on a leader lease (a later leader lists what they
	// wrote); deletes ask a quorum every time.
	o.Guard, o.DeleteGuard = guard(h.c.ConfirmLeader), guard(h.c.VerifyLeader)
	// Every decision goes through the log onto every node's replica
	// (o.Replica); a fenced report's token is checked in its own entry.
	o.Propose = func(ctx context.Context, cmd []byte, fences []catalog.Fence) (any, error) {
		if h.c.Term() != term {
			return nil, fmt.Errorf("%w (its term %d ended)", errDeposed, term)
		}
		var checks []Check
		for _, f := range fences {
			checks = append(checks, Check{Task: fenceKey(f.Task), Token: f.Token})
		}
		res, err := h.c.Propose(ctx, cmd, checks)
		if IsLeadershipError(err) {
			// Not an answer: the call that proposed it is retried on
			// the next leader (reports and completions are idempotent,
			// and a completion whose command was committed after all is
			// found there).
			return nil, fmt.Errorf("%w: %w", ErrCatalogNotServing, err)
		}
		return res, fencedErr(err)
	}
	o.CheckCompletion = h.checkCompletion
	t0 := time.Now()
	cat, err := catalog.Open(ctx, o)
	if err != nil {
		return err
	}
	for _, p := range cat.Problems() {
		h.log.Warn("catalog problem", "problem", p.String())
	}
	// The sweep lives as long as this node hosts the catalog.
	if err := cat.Start(context.Background()); err != nil {
		_ = cat.Close()
		return err
	}
	// The reports the old leader's catalog accepted for checkpoints still
	// in flight, whichever node made them (it may have died with it).
	j := clusterJournal{h.c}
	if n, err := RecoverReports(ctx, cat, j); err != nil {
		h.log.Warn("some journaled reports were not recovered", "recovered", n, "err", err)
	} else if n > 0 {
		h.log.Info("recovered journaled reports", "reports", n)
	}
	checkFences := func(ctx context.Context, fences []Fence) error {
		checks := make([]Check, len(fences))
		for i, f := range fences {
			checks[i] = Check{Task: fenceKey(f.Task), Token: f.Token}
		}
		err := h.c.CheckHeld(ctx, checks)
		if IsLeadershipError(err) {
			return fmt.Errorf("%w: %w", ErrCatalogNotServing, err)
		}
		return fencedErr(err)
	}
	// The replicated catalog keeps the reports itself: no journal.
	so := CatalogServerOptions{Epoch: term, Verify: o.Guard, CheckFences: checkFences, Logger: h.log}
	if h.logs != nil {
		so.LogRelease = h.logs.noteRelease
	}
	srv, err := NewCatalogServer(cat, so)
	if err != nil {
		_ = cat.Close()
		return err
	}
	h.mu.Lock()
	h.cat, h.srv, h.term = cat, srv, term
	h.mu.Unlock()
	h.c.SetHandler(func(ctx context.Context, method string, payload []byte) ([]byte, error) {
		out, err := srv.Handle(ctx, method, payload)
		if errors.Is(err, ErrCatalogNotServing) {
			// Retried by Call on the next leader.
			return nil, fmt.Errorf("%w: %w", ErrServiceNotReady, err)
		}
		return out, err
	})
	h.log.Info("hosting the cluster's catalog", "term", term, "jobs", len(cat.Jobs()), "opened_in", time.Since(t0))
	return nil
}

// checkCompletion is the hosted catalog's check of a completion, on the
// leader, from the tokens every node's opens took (the catalog's guard
// confirms the leadership right after, before the manifest is written):
//
//   - every handle must have been reported under its task's newest token:
//     a task opened again since (taken over, on any node) makes the old
//     holder's handle stale, whichever node reported it and whichever
//     completes (a task released since, and not opened again, keeps its
//     handle);
//   - a completion whose caller named no tasks must hold a handle of every
//     task of the job open anywhere, and of every subtask of each
//     operator it holds handles of (catalog.Missing).
func (h *CatalogHost) checkCompletion(ctx context.Context, cp catalog.Completion) error {
	held, err := h.c.HeldTasks(ctx, cp.Job+"/")
	if IsLeadershipError(err) {
		return fmt.Errorf("%w: %w", ErrCatalogNotServing, err)
	}
	if err != nil {
		return fmt.Errorf("reading the tasks' fencing tokens: %w", err)
	}
	var errs []error
	for _, hd := range cp.Handles {
		tok := cp.Tokens[hd.Task]
		if tok == 0 {
			continue
		}
		if cur, ok := held[fenceKey(hd.Task)]; ok && cur.Token != tok {
			errs = append(errs, fmt.Errorf("%w: task %s: its handle was reported under fencing token %d, but node %s holds token %d since (the task was taken over): the old holder's handle must not complete the checkpoint",
				catalog.ErrFenced, hd.Task, tok, cur.Holder, cur.Token))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if !cp.Whole {
		return nil
	}
	var open []backend.TaskID
	for key, cur := range held {
		t, ok := taskOfKey(key)
		if !ok {
			h.log.Warn("a fencing token of an unreadable task name", "task", key, "holder", cur.Holder)
			continue
		}
		open = append(open, t)
	}
	if missing := catalog.Missing(cp.Handles, open); len(missing) > 0 {
		return fmt.Errorf("%w: checkpoint %d of job %s is not whole: %s. In cluster mode a completion without a task list needs a handle of every task of the job open on any node and of every subtask of its operators: wait for their reports, or name the tasks the checkpoint holds",
			catalog.ErrState, cp.ID, cp.Job, strings.Join(missing, "; "))
	}
	return nil
}

// taskOfKey parses fenceKey's "<job>/<operator>/<subtask>".
func taskOfKey(key string) (backend.TaskID, bool) {
	parts := strings.Split(key, "/")
	if len(parts) != 3 {
		return backend.TaskID{}, false
	}
	sub, err := strconv.Atoi(parts[2])
	if err != nil || sub < 0 {
		return backend.TaskID{}, false
	}
	return backend.TaskID{Job: parts[0], Operator: parts[1], Subtask: sub}, true
}

// release stops serving and closes the hosted catalog.
func (h *CatalogHost) release() {
	h.c.SetHandler(nil)
	h.mu.Lock()
	cat, srv, term := h.cat, h.srv, h.term
	h.cat, h.srv, h.term = nil, nil, 0
	h.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
	if cat != nil {
		_ = cat.Close()
		h.log.Info("stopped hosting the cluster's catalog", "term", term)
	}
}

// Close stops the host's goroutine and releases the catalog.
func (h *CatalogHost) Close() {
	select {
	case <-h.stop:
	default:
		close(h.stop)
	}
	<-h.done
}

// clusterJournal is the cluster's replicated journal as the catalog server uses
// it.
type clusterJournal struct{ c *Member }

func (j clusterJournal) PutMany(ctx context.Context, recs map[string][]byte, fences map[string]Fence) (map[string]error, error) {
	var checks map[string]Check
	for k, f := range fences {
		if checks == nil {
			checks = map[string]Check{}
		}
		checks[k] = Check{Task: fenceKey(f.Task), Token: f.Token}
	}
	refused, err := j.c.JournalPutChecked(ctx, recs, checks)
	if IsLeadershipError(err) {
		return nil, fmt.Errorf("%w: %w", ErrCatalogNotServing, err)
	}
	for k, e := range refused {
		refused[k] = fencedErr(e)
	}
	return refused, err
}

func (j clusterJournal) DeleteRange(ctx context.Context, from, to string) error {
	return j.c.JournalDeleteRange(ctx, from, to)
}

func (j clusterJournal) Read(prefix string) map[string][]byte { return j.c.JournalRead(prefix) }
