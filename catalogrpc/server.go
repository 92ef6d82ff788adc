package catalogrpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
)

// ErrNotServing is wrapped by Server.Handle's error when the server
// stopped hosting the catalog during the call: its catalog was closed, or
// its Journal said (by wrapping ErrNotServing) that this node no longer
// leads. The call did not decide anything the next leader would not; the
// caller asks again there.
var ErrNotServing = errors.New("catalogrpc: this server no longer hosts the catalog")

// Server answers Clients' calls with a catalog: the one the cluster's
// leader hosts.
type Server struct {
	cat   *catalog.Catalog
	opts  ServerOptions
	log   *slog.Logger
	group groupPut
	// settles feeds the settler goroutine (with a Journal only); stop
	// ends it and settled closes when it has.
	settles       chan settlement
	stop, settled chan struct{}
	closeOnce     sync.Once
}

// ServerOptions configure a Server.
type ServerOptions struct {
	// Epoch is a number no earlier hosting catalog used (the leader's raft
	// term), so that Clients notice a new catalog. Required (> 0).
	Epoch uint64
	// Verify (nil: none) is asked before a restore or a lookup of the
	// latest checkpoint is answered: a deposed
	// leader that has not noticed yet must not send a task back to an
	// older checkpoint than the new leader completed. (Writes and deletes
	// are guarded by the catalog's own Options.Guard.)
	Verify func(context.Context) error
	// Journal (nil: none) keeps every accepted report until its
	// checkpoint completes or aborts, so that the next hosting catalog
	// recovers them (Recover) even if the reporting node died. A
	// replicated catalog (catalog.Options.Replica) needs none: its log
	// keeps the reports, and checks a fenced report's token itself.
	Journal Journal
	// CheckFences (nil: fenced completions are refused) checks, from the
	// leader's own state, that each fence's token is its task's newest,
	// with an error wrapping catalog.ErrFenced otherwise. It need not
	// confirm the leadership: a completion checks the fences, then the
	// catalog's Options.Guard confirms the leadership before the manifest
	// is written, and the two make a linearizable read.
	CheckFences func(context.Context, []Fence) error
	// Logger receives journal writes that failed after the catalog
	// decided (the next completion settles them). Default: discard.
	Logger *slog.Logger
}

// NewServer serves cat.
func NewServer(cat *catalog.Catalog, o ServerOptions) (*Server, error) {
	if cat == nil || o.Epoch == 0 {
		return nil, errors.New("catalogrpc: a server needs a catalog and an epoch")
	}
	if o.Verify == nil {
		o.Verify = func(context.Context) error { return nil }
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cat: cat, opts: o, log: o.Logger.With("component", "catalogrpc"), stop: make(chan struct{}), settled: make(chan struct{})}
	if o.Journal != nil {
		s.settles = make(chan settlement, settleQueue)
		go s.settler()
	} else {
		close(s.settled)
	}
	return s, nil
}

// Close stops the server's settler goroutine; settlements still queued
// are dropped (the next leader's Recover settles what completed). It does
// not close the catalog.
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.stop) })
	<-s.settled
}

// Epoch is the server's epoch.
func (s *Server) Epoch() uint64 { return s.opts.Epoch }

// Handle runs one call. Its error is for a call it cannot read, or one
// that this server must not answer (verify failed); what the catalog
// answers, errors included, is in the returned answer.
func (s *Server) Handle(ctx context.Context, method string, payload []byte) ([]byte, error) {
	var req request
	if err := json.Unmarshal(payload, &req); err != nil {
		return nil, fmt.Errorf("%w: catalogrpc: %s: bad request: %v", backend.ErrInvalidArgument, method, err)
	}
	if method == mRestore || method == mLatest || method == mSavepointOf {
		// A read that decides what a task restores must not be stale:
		// not an answer when it fails, the caller asks the leader again.
		if err := s.opts.Verify(ctx); err != nil {
			return nil, err
		}
	}
	a, err := s.run(ctx, method, &req)
	if errors.Is(err, catalog.ErrClosed) || errors.Is(err, ErrNotServing) {
		// This server stopped hosting the catalog (its node lost the
		// leadership) during the call: not an answer, the caller asks
		// the next leader (reports and completions are idempotent).
		return nil, fmt.Errorf("%w: %s: %v", ErrNotServing, method, err)
	}
	if err != nil {
		a = &answer{Err: toWire(err)}
	}
	a.Epoch = s.opts.Epoch
	return json.Marshal(a)
}

func (s *Server) run(ctx context.Context, method string, req *request) (*answer, error) {
	c := s.cat
	manifest := func(m *catalog.Manifest, err error) (*answer, error) {
		if err != nil {
			return nil, err
		}
		enc, err := catalog.EncodeManifest(m)
		if err != nil {
			return nil, err
		}
		return &answer{Found: true, Manifest: enc}, nil
	}
	lookup := func(m *catalog.Manifest, ok bool) (*answer, error) {
		if !ok {
			return &answer{}, nil
		}
		return manifest(m, nil)
	}
	switch method {
	case mEpoch:
		return &answer{}, nil
	case mBegin:
		return &answer{}, c.BeginCheckpoint(req.Job, req.ID)
	case mReport:
		h, err := backend.DecodeHandle(req.Handle)
		if err != nil {
			return nil, fmt.Errorf("catalogrpc: report to checkpoint %d of job %s: %w", req.ID, req.Job, err)
		}
		if req.Token != 0 && c.Replicated() {
			// The catalog's own log checks the token in the entry that
			// takes the report.
			return &answer{}, c.AddFencedTaskHandle(req.Job, req.ID, h, req.Token)
		}
		if req.Token != 0 {
			// A fenced report: the journal write that keeps it also
			// checks the token, so a report of an instance whose task
			// was opened again since cannot land, whatever happens
			// between the instance's snapshot and this call. Only then
			// does the catalog take it (a report the catalog refuses
			// after that stays in the journal until a completion or
			// abort of the job settles it; Recover refuses it again).
			if s.opts.Journal == nil {
				return nil, fmt.Errorf("%w: catalogrpc: report of %s under fencing token %d: this catalog keeps no journal to check tokens in",
					catalog.ErrInvalidArgument, h.Task, req.Token)
			}
			if err := s.record(ctx, req.Job, req.ID, h.Task, req.Handle, &Fence{Task: h.Task, Token: req.Token}); err != nil {
				return nil, err
			}
			return &answer{}, c.AddTaskHandle(req.Job, req.ID, h)
		}
		if err := c.AddTaskHandle(req.Job, req.ID, h); err != nil {
			return nil, err
		}
		// Journaled once the catalog accepted it: the report stands only
		// when it is kept (the client retries otherwise; a repeated
		// report is accepted).
		return &answer{}, s.record(ctx, req.Job, req.ID, h.Task, req.Handle, nil)
	case mComplete:
		if len(req.Fences) > 0 {
			if s.opts.CheckFences == nil {
				return nil, fmt.Errorf("%w: catalogrpc: complete checkpoint %d of job %s under fencing tokens: this catalog cannot check them",
					catalog.ErrInvalidArgument, req.ID, req.Job)
			}
			if err := s.opts.CheckFences(ctx, req.Fences); err != nil {
				return nil, fmt.Errorf("catalogrpc: complete checkpoint %d of job %s: %w", req.ID, req.Job, err)
			}
		}
		var m *catalog.Manifest
		var err error
		if len(req.Reports) > 0 {
			m, err = s.completeWithReports(ctx, req)
		} else {
			m, err = c.CompleteTasks(ctx, req.Job, req.ID, req.Tasks)
		}
		if err == nil {
			s.settle(ctx, req.Job, req.ID, true)
			s.subsume(ctx, req.Job, req.ID)
		}
		return manifest(m, err)
	case mAbort:
		err := c.Abort(ctx, req.Job, req.ID, req.Status, req.Reason)
		s.settle(ctx, req.Job, req.ID, false)
		return &answer{}, err
	case mRelease:
		err := c.Release(ctx, req.Job, req.ID)
		s.settle(ctx, req.Job, req.ID, false)
		return &answer{}, err
	case mCheckpoint:
		return lookup(c.Checkpoint(req.Job, req.ID))
	case mLatest:
		return lookup(c.Latest(req.Job))
	case mSavepoint:
		// Finds (adopts) one written by another process, too.
		m, ok, err := c.SavepointContext(ctx, req.Savept)
		if err != nil {
			return nil, err
		}
		return lookup(m, ok)
	case mJobs:
		return &answer{Names: c.Jobs()}, nil
	case mProblems:
		a := &answer{}
		for _, p := range c.Problems() {
			a.Problems = append(a.Problems, problem{What: p.What, Object: p.Object, Job: p.Job, Err: toWire(p.Err), Effect: p.Effect})
		}
		return a, nil
	case mSavepoints:
		a := &answer{}
		for _, m := range c.Savepoints() {
			enc, err := catalog.EncodeManifest(m)
			if err != nil {
				return nil, err
			}
			a.Manifests = append(a.Manifests, enc)
		}
		return a, nil
	case mRetained:
		return &answer{IDs: c.Retained(req.Job)}, nil
	case mList:
		return &answer{Records: toWireRecords(c.List(req.Job))}, nil
	case mNoteNoChans:
		c.NoteWithoutChannelState(ctx, req.Job, req.ID)
		return &answer{}, nil
	case mSavepointOf:
		id := req.ID
		if id == 0 {
			m, ok := c.Latest(req.Job)
			if !ok {
				return nil, fmt.Errorf("%w: savepoint of job %s: the job has no completed checkpoint", catalog.ErrNotFound, req.Job)
			}
			id = m.CheckpointID
		}
		return manifest(c.SavepointFromCheckpoint(ctx, "", req.Job, id))
	case mReleaseLog:
		return &answer{}, c.ReleaseLog(ctx, req.Names)
	case mRestore:
		if req.Restore == nil {
			return nil, fmt.Errorf("%w: catalogrpc: restore without its request", backend.ErrInvalidArgument)
		}
		rr := req.Restore
		r, err := c.RestoreSource(ctx, catalog.RestoreRequest{Job: rr.Job, FromJob: rr.FromJob, CheckpointID: rr.CheckpointID,
			SavepointID: rr.SavepointID, Mode: rr.Mode, AllowFallback: rr.AllowFallback})
		if err != nil {
			return nil, err
		}
		a, err := manifest(r.Manifest, nil)
		if err != nil {
			return nil, err
		}
		a.Restore = &restoreAnswer{NoClaim: r.NoClaim, Savepoint: rr.SavepointID}
		for _, d := range r.Skipped {
			a.Restore.Skipped = append(a.Restore.Skipped, damage{Job: d.Job, ID: d.ID, Manifest: d.Manifest, Err: d.Err.Error()})
		}
		return a, nil
	}
	return nil, fmt.Errorf("%w: catalogrpc: unknown method %q (a node of a newer build?)", backend.ErrInvalidArgument, method)
}

// subsume aborts the job's checkpoints older than id still in flight: a
// completion subsumes them. The nodes' daemons abort their own; this
// catches the ones no daemon knows any more (recovered from the journal
// after their node died, or after an abort whose settlement was lost), so
// that they do not protect their uploads from the sweep for ever.
func (s *Server) subsume(ctx context.Context, job string, id uint64) {
	for _, old := range s.cat.InFlight(job) {
		if old >= id {
			break
		}
		if err := s.cat.Abort(ctx, job, old, catalog.StatusAborted, fmt.Sprintf("subsumed by checkpoint %d", id)); err != nil {
			s.log.Warn("aborting a subsumed checkpoint failed", "job", job, "checkpoint", old, "err", err)
		}
		s.settle(ctx, job, old, false)
	}
}

// completeWithReports is a completion that carries reports of its
// caller's tasks. A replicated catalog takes them in the completion's log
// entry (with the checkpoint's begin, if this leader holds it back; a
// checkpoint a former leader began and held is not in flight here until
// the caller's client replays its begins, and the completion is refused
// until then, never begun again here: it may have been aborted since).
// Otherwise each is a report of its own first, as mReport takes it
// (journaled, its token checked in the journal's write).
func (s *Server) completeWithReports(ctx context.Context, req *request) (*catalog.Manifest, error) {
	c := s.cat
	reports := make([]catalog.FencedHandle, len(req.Reports))
	for i, rp := range req.Reports {
		h, err := backend.DecodeHandle(rp.Handle)
		if err != nil {
			return nil, fmt.Errorf("catalogrpc: complete checkpoint %d of job %s: report %d: %w", req.ID, req.Job, i, err)
		}
		reports[i] = catalog.FencedHandle{Handle: h, Token: rp.Token}
	}
	if c.Replicated() {
		return c.CompleteWithReports(ctx, req.Job, req.ID, req.Tasks, nil, reports)
	}
	for _, rp := range req.Reports {
		if _, err := s.run(ctx, mReport, &request{Job: req.Job, ID: req.ID, Handle: rp.Handle, Token: rp.Token}); err != nil {
			return nil, fmt.Errorf("catalogrpc: complete checkpoint %d of job %s: %w", req.ID, req.Job, err)
		}
	}
	return c.CompleteTasks(ctx, req.Job, req.ID, req.Tasks)
}
