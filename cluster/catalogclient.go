package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	pb "github.com/statedhq/stated/cluster/clusterpb"
	"github.com/statedhq/stated/tiered"
)

// CatalogCaller delivers one call to the hosting catalog's CatalogServer.Handle (method:
// a Catalog method's full gRPC name; payload: its encoded request) and
// returns its encoded response; an error means the call may not have run (no
// leader within the caller's deadline, a broken connection).
type CatalogCaller interface {
	Call(ctx context.Context, method string, payload []byte) ([]byte, error)
}

// DefaultCatalogTimeout bounds the calls that take no context.
const DefaultCatalogTimeout = 15 * time.Second

// CatalogClientOptions configure a CatalogClient.
type CatalogClientOptions struct {
	// Caller reaches the hosting catalog. Required.
	Caller CatalogCaller
	// Store is this node's view of the checkpoint root the hosting
	// catalog manages (the same bucket and prefix). Required.
	Store tiered.Store
	// GCGrace must be the hosting catalog's (every node is started with
	// the same --gc-grace); the daemon checks its checkpoint timeout
	// against it. Default catalog.DefaultGCGrace.
	GCGrace time.Duration
	// Timeout bounds the calls that take no context (BeginCheckpoint,
	// AddTaskHandle and the lookups). Default DefaultCatalogTimeout.
	Timeout time.Duration
	// Logger receives lookups that failed (they answer "not found") and
	// replays after a leader change. Default: discard.
	Logger *slog.Logger
}

func (o *CatalogClientOptions) ensureDefaults() {
	if o.GCGrace == 0 {
		o.GCGrace = catalog.DefaultGCGrace
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultCatalogTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

func (o *CatalogClientOptions) validate() error {
	var errs []error
	if o.Caller == nil {
		errs = append(errs, errors.New("catalog service: no caller"))
	}
	if o.Store == nil {
		errs = append(errs, errors.New("catalog service: no checkpoint store"))
	}
	if o.GCGrace < 0 || o.Timeout < 0 {
		errs = append(errs, errors.New("catalog service: negative gc grace or timeout"))
	}
	return errors.Join(errs...)
}

// ckpt names an in-flight checkpoint.
type ckpt struct {
	job string
	id  uint64
}

// CatalogClient is a daemon.Catalog over a CatalogCaller. It is safe for concurrent
// use.
type CatalogClient struct {
	opts CatalogClientOptions
	log  *slog.Logger
	rpc  pb.CatalogClient

	mu sync.Mutex
	// epoch of the last answer (0: none yet).
	epoch uint64
	// pending are the reports of the checkpoints still in flight that
	// this node made, by checkpoint: replayed to a new epoch. Entries
	// go when the checkpoint completes, aborts or is released; they are
	// bounded by the daemon's in-flight checkpoints.
	pending map[ckpt]map[backend.TaskID]report
	// replays counts reports replayed to new epochs.
	replays uint64

	// hosted is the catalog server this node hosts (nil: none), when a
	// CatalogHost set it (setHosted).
	hosted atomic.Pointer[func() *CatalogServer]
}

// setHosted has completions ask server (the catalog this node hosts,
// nil while it hosts none) directly, without the wire's encodings, while
// it serves under the epoch of the client's last answer.
func (c *CatalogClient) setHosted(server func() *CatalogServer) {
	c.hosted.Store(&server)
}

// completeHere completes through the catalog this node hosts, when it
// hosts it under the epoch of the last answer (a new epoch needs the
// replay the call path makes first); done is false when it did not, and
// the caller calls through the cluster.
func (c *CatalogClient) completeHere(ctx context.Context, job string, id uint64, tasks []backend.TaskID, tokens map[backend.TaskID]uint64,
	reports []catalog.FencedHandle) (m *catalog.Manifest, done bool, err error) {
	hosted := c.hosted.Load()
	if hosted == nil {
		return nil, false, nil
	}
	srv := (*hosted)()
	if srv == nil {
		return nil, false, nil
	}
	c.mu.Lock()
	same := c.epoch == srv.opts.Epoch
	c.mu.Unlock()
	if !same {
		return nil, false, nil
	}
	m, err = srv.completeHere(ctx, job, id, tasks, tokens, reports)
	if errors.Is(err, ErrCatalogNotServing) {
		return nil, false, nil // deposed meanwhile: the next leader decides
	}
	if err != nil {
		return nil, true, err
	}
	c.forget(ckpt{job, id})
	return m, true, nil
}

// NewCatalogClient returns a CatalogClient.
func NewCatalogClient(opts CatalogClientOptions) (*CatalogClient, error) {
	opts.ensureDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &CatalogClient{opts: opts, log: opts.Logger.With("component", "catalog-service"), rpc: pb.NewCatalogClient(callerConn{opts.Caller}),
		pending: map[ckpt]map[backend.TaskID]report{}}, nil
}

// callerConn is the generated Catalog client's connection: each call goes
// through the Caller (the cluster's leader-forwarding Call) as its full
// method name and its encoded request.
type callerConn struct{ c CatalogCaller }

func (cc callerConn) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	name := path.Base(method)
	payload, err := proto.Marshal(args.(proto.Message))
	if err != nil {
		return err
	}
	out, err := cc.c.Call(ctx, method, payload)
	if err != nil {
		if s, ok := status.FromError(err); ok && s.Code() != codes.Unavailable && s.Code() != codes.FailedPrecondition && s.Code() != codes.Unknown {
			// The hosting node answered, with an error of its own (a
			// request it could not read): not an unreachable catalog.
			return fmt.Errorf("catalog service: %s: %w", name, err)
		}
		return &CatalogUnavailableError{Method: name, Err: err}
	}
	if len(out) > maxAnswerSize {
		return fmt.Errorf("%w: catalog service: %s: an answer of %d bytes", backend.ErrCorrupt, name, len(out))
	}
	if err := proto.Unmarshal(out, reply.(proto.Message)); err != nil {
		return fmt.Errorf("%w: catalog service: %s: unreadable answer: %v", backend.ErrCorrupt, name, err)
	}
	return nil
}

func (callerConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, errors.New("catalog service: the catalog service has no streams")
}

// answer is every Catalog response: it carries the serving catalog's
// status.
type answer interface{ GetStatus() *pb.CatalogStatus }

// rpcFunc is a method of the generated Catalog client.
type rpcFunc[Q any, A answer] func(context.Context, Q, ...grpc.CallOption) (A, error)

// call runs one call and returns its answer with the catalog's error; a
// new epoch first gets this node's pending reports (and then, for the
// calls that depend on them, retry set, the call again).
func call[Q any, A answer](c *CatalogClient, ctx context.Context, rpc rpcFunc[Q, A], req Q, retry bool) (A, error) {
	a, st, err := once(ctx, rpc, req)
	if err != nil {
		return a, err
	}
	if c.newEpoch(st.GetEpoch()) {
		if rerr := c.replay(ctx); rerr != nil {
			c.log.Warn("replaying reports to the new catalog failed; the next call retries", "err", rerr)
		} else if st.GetError() != nil && retry {
			if a, st, err = once(ctx, rpc, req); err != nil {
				return a, err
			}
		}
	}
	return a, fromWire(st.GetError())
}

// once is one call, without replays.
func once[Q any, A answer](ctx context.Context, rpc rpcFunc[Q, A], req Q) (A, *pb.CatalogStatus, error) {
	a, err := rpc(ctx, req)
	if err != nil {
		return a, nil, err
	}
	st := a.GetStatus()
	if st == nil {
		return a, nil, fmt.Errorf("%w: catalog service: an answer without its status", backend.ErrCorrupt)
	}
	return a, st, nil
}

// newEpoch records epoch and reports whether it replaced an earlier one
// (the first answer's epoch has nothing to replay to).
func (c *CatalogClient) newEpoch(epoch uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if epoch == c.epoch {
		return false
	}
	first := c.epoch == 0
	c.epoch = epoch
	return !first && len(c.pending) > 0
}

// replay reports this node's pending checkpoints again.
func (c *CatalogClient) replay(ctx context.Context) error {
	c.mu.Lock()
	type item struct {
		k ckpt
		h []report
	}
	var items []item
	for k, hs := range c.pending {
		tasks := slices.SortedFunc(maps.Keys(hs), func(a, b backend.TaskID) int { return strings.Compare(a.String(), b.String()) })
		it := item{k: k}
		for _, t := range tasks {
			it.h = append(it.h, hs[t])
		}
		items = append(items, it)
	}
	c.mu.Unlock()
	var errs []error
	for _, it := range items {
		if _, st, err := once(ctx, c.rpc.Begin, &pb.BeginRequest{Job: it.k.job, Id: it.k.id}); err != nil {
			return err
		} else if err := fromWire(st.GetError()); err != nil {
			if errors.Is(err, catalog.ErrExists) {
				c.forget(it.k) // completed meanwhile
				continue
			}
			errs = append(errs, err)
			continue
		}
		for _, h := range it.h {
			_, st, err := once(ctx, c.rpc.Report, &pb.ReportRequest{Job: it.k.job, Id: it.k.id, Report: &pb.Report{Handle: h.handle, Token: h.token}})
			if err != nil {
				return err
			}
			if err := fromWire(st.GetError()); err != nil {
				errs = append(errs, err)
			}
		}
		c.mu.Lock()
		c.replays += uint64(len(it.h))
		c.mu.Unlock()
	}
	if len(items) > 0 {
		c.log.Info("reported in-flight checkpoints to a new catalog", "checkpoints", len(items))
	}
	return errors.Join(errs...)
}

// report is a pending report: the encoded handle and the fencing token
// it was made under (0: none), replayed as they were.
type report struct {
	handle []byte
	token  uint64
}

func (c *CatalogClient) remember(k ckpt, t backend.TaskID, h []byte, token uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.pending[k]
	if m == nil {
		m = map[backend.TaskID]report{}
		c.pending[k] = m
	}
	if t != (backend.TaskID{}) {
		m[t] = report{h, token}
	}
}

func (c *CatalogClient) forget(k ckpt) {
	c.mu.Lock()
	delete(c.pending, k)
	c.mu.Unlock()
}

// Resync asks the hosting catalog for its epoch and, if it is new,
// reports this node's in-flight checkpoints to it: call it when the
// cluster's leader changed, so that completions through other nodes find
// this node's reports without waiting for its daemon's next call.
func (c *CatalogClient) Resync(ctx context.Context) error {
	_, err := call(c, ctx, c.rpc.Epoch, &pb.EpochRequest{}, false)
	return err
}

// Pending is how many in-flight checkpoints the client would replay.
func (c *CatalogClient) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// Replays counts the reports replayed to new catalogs.
func (c *CatalogClient) Replays() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.replays
}

// bounded is a context for the calls that take none.
func (c *CatalogClient) bounded() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.opts.Timeout)
}

func (c *CatalogClient) Store() tiered.Store     { return c.opts.Store }
func (c *CatalogClient) GCGrace() time.Duration  { return c.opts.GCGrace }
func (c *CatalogClient) HeapStore() tiered.Store { return nil }

func (c *CatalogClient) BeginCheckpoint(job string, id uint64) error {
	if err := catalog.ValidateJob(job); err != nil {
		return err
	}
	ctx, cancel := c.bounded()
	defer cancel()
	if _, err := call(c, ctx, c.rpc.Begin, &pb.BeginRequest{Job: job, Id: id}, false); err != nil {
		return err
	}
	c.remember(ckpt{job, id}, backend.TaskID{}, nil, 0)
	return nil
}

func (c *CatalogClient) AddTaskHandle(job string, id uint64, h *backend.Handle) error {
	return c.AddFencedTaskHandle(job, id, h, 0)
}

// AddFencedTaskHandle is AddTaskHandle of an instance holding fencing
// token (0: none): the hosting catalog keeps the report only while token
// is its task's newest, checked in the same replicated write that keeps
// it, and refuses it otherwise with an error wrapping catalog.ErrFenced
// (daemon.ErrFenced). The daemon then needs no check of its own before
// reporting.
func (c *CatalogClient) AddFencedTaskHandle(job string, id uint64, h *backend.Handle, token uint64) error {
	if h == nil {
		return fmt.Errorf("%w: nil handle for checkpoint %d of job %s", catalog.ErrInvalidArgument, id, job)
	}
	enc, err := backend.EncodeHandle(h)
	if err != nil {
		return err
	}
	ctx, cancel := c.bounded()
	defer cancel()
	if _, err := call(c, ctx, c.rpc.Report, &pb.ReportRequest{Job: job, Id: id, Report: &pb.Report{Handle: enc, Token: token}}, true); err != nil {
		return err
	}
	c.remember(ckpt{job, id}, h.Task, enc, token)
	return nil
}

func (c *CatalogClient) CompleteTasks(ctx context.Context, job string, id uint64, tasks []backend.TaskID) (*catalog.Manifest, error) {
	return c.CompleteFencedTasks(ctx, job, id, tasks, nil)
}

// CompleteFencedTasks is CompleteTasks by a caller holding instances of
// tasks under tokens: the hosting catalog completes only if every token
// is still its task's newest, checked on the leader right before the
// completion confirms the leadership (no round trip of its own), and
// refuses otherwise with an error wrapping catalog.ErrFenced.
func (c *CatalogClient) CompleteFencedTasks(ctx context.Context, job string, id uint64, tasks []backend.TaskID, tokens map[backend.TaskID]uint64) (*catalog.Manifest, error) {
	return c.CompleteWithReports(ctx, job, id, tasks, tokens, nil)
}

// CompleteWithReports is CompleteFencedTasks that also hands over the
// caller's reports of its own tasks not reported yet: the hosting
// catalog takes them in the completion's own log write
// (catalog.Catalog.CompleteWithReports), each checked under its token. The
// client does not keep them for a replay: on an error the caller still
// holds them and reports them (AddFencedTaskHandle) or completes again.
func (c *CatalogClient) CompleteWithReports(ctx context.Context, job string, id uint64, tasks []backend.TaskID, tokens map[backend.TaskID]uint64,
	reports []catalog.FencedHandle) (*catalog.Manifest, error) {
	if m, done, err := c.completeHere(ctx, job, id, tasks, tokens, reports); done {
		return m, err
	}
	var fences []*pb.Fence
	for t, tok := range tokens {
		fences = append(fences, &pb.Fence{Task: toTaskID(t), Token: tok})
	}
	var wr []*pb.Report
	for _, rp := range reports {
		if rp.Handle == nil {
			return nil, fmt.Errorf("%w: nil handle for checkpoint %d of job %s", catalog.ErrInvalidArgument, id, job)
		}
		enc, err := backend.EncodeHandle(rp.Handle)
		if err != nil {
			return nil, err
		}
		wr = append(wr, &pb.Report{Handle: enc, Token: rp.Token})
	}
	a, err := call(c, ctx, c.rpc.Complete, &pb.CompleteRequest{Job: job, Id: id, Tasks: toTaskIDs(tasks), Fences: fences, Reports: wr}, true)
	if err != nil {
		return nil, err
	}
	m, err := catalog.DecodeManifest(a.GetManifest())
	if err != nil {
		return nil, fmt.Errorf("catalog service: complete checkpoint %d of job %s: %w", id, job, err)
	}
	c.forget(ckpt{job, id})
	return m, nil
}

func (c *CatalogClient) Abort(ctx context.Context, job string, id uint64, why catalog.Status, reason string) error {
	// Forgotten whatever the answer: an aborted checkpoint never completes,
	// and a new leader's sweep deletes its uploads after the grace.
	c.forget(ckpt{job, id})
	_, err := call(c, ctx, c.rpc.Abort, &pb.AbortRequest{Job: job, Id: id, Status: string(why), Reason: reason}, false)
	return err
}

func (c *CatalogClient) Release(ctx context.Context, job string, id uint64) error {
	c.forget(ckpt{job, id})
	_, err := call(c, ctx, c.rpc.Release, &pb.ReleaseRequest{Job: job, Id: id}, false)
	return err
}

// ErrCatalogUnavailable is wrapped by the error of a call that did not reach the
// hosting catalog (no leader within the caller's deadline, a broken
// connection): the call may not have run, and its answer is unknown,
// which is not "none".
var ErrCatalogUnavailable = errors.New("the cluster's catalog is unreachable")

// CatalogUnavailableError is the error of a call that did not reach the hosting
// catalog. It wraps ErrCatalogUnavailable and the Caller's error, and carries
// gRPC's UNAVAILABLE code, which the daemon's API answers with (the
// caller retries).
type CatalogUnavailableError struct {
	Method string
	Err    error
}

func (e *CatalogUnavailableError) Error() string {
	return fmt.Sprintf("catalog service: %s: %v (during a leader change this lasts seconds; retry, or see `stated cluster status`): %v",
		e.Method, ErrCatalogUnavailable, e.Err)
}

func (e *CatalogUnavailableError) Unwrap() []error { return []error{ErrCatalogUnavailable, e.Err} }

// GRPCStatus is UNAVAILABLE with the error's text.
func (e *CatalogUnavailableError) GRPCStatus() *status.Status {
	return status.New(codes.Unavailable, e.Error())
}

// The lookups without a context have no error to return: a failure is
// logged and answers "not found". The daemon asks the *Context methods
// instead, which return the failure; these remain for the daemon.Catalog
// interface.

// lookupFailed logs a failed lookup.
func (c *CatalogClient) lookupFailed(call, job string, id uint64, err error) {
	c.log.Warn("catalog lookup failed", "call", call, "job", job, "id", id, "err", err)
}

// manifestOf decodes a manifest answer.
func manifestOf(call, job string, a *pb.ManifestResponse, err error) (*catalog.Manifest, bool, error) {
	if err != nil || !a.GetFound() {
		return nil, false, err
	}
	m, err := catalog.DecodeManifest(a.GetManifest())
	if err != nil {
		return nil, false, fmt.Errorf("catalog service: %s of job %s: %w", call, job, err)
	}
	return m, true, nil
}

func (c *CatalogClient) Checkpoint(job string, id uint64) (*catalog.Manifest, bool) {
	ctx, cancel := c.bounded()
	defer cancel()
	m, ok, err := c.CheckpointContext(ctx, job, id)
	if err != nil {
		c.lookupFailed("checkpoint", job, id, err)
	}
	return m, ok
}

func (c *CatalogClient) Latest(job string) (*catalog.Manifest, bool) {
	ctx, cancel := c.bounded()
	defer cancel()
	m, ok, err := c.LatestContext(ctx, job)
	if err != nil {
		c.lookupFailed("latest", job, 0, err)
	}
	return m, ok
}

// LatestContext is Latest with its error: a lookup that could not reach
// the catalog is an error, not "none".
func (c *CatalogClient) LatestContext(ctx context.Context, job string) (*catalog.Manifest, bool, error) {
	a, err := call(c, ctx, c.rpc.Latest, &pb.LatestRequest{Job: job}, false)
	return manifestOf("latest", job, a, err)
}

func (c *CatalogClient) Savepoint(id string) (*catalog.Manifest, bool) {
	ctx, cancel := c.bounded()
	defer cancel()
	m, ok, err := c.SavepointContext(ctx, id)
	if err != nil {
		c.lookupFailed("savepoint "+id, "", 0, err)
	}
	return m, ok
}

func (c *CatalogClient) Retained(job string) []uint64 {
	ctx, cancel := c.bounded()
	defer cancel()
	ids, err := c.RetainedContext(ctx, job)
	if err != nil {
		c.lookupFailed("retained", job, 0, err)
	}
	return ids
}

func (c *CatalogClient) List(job string) []catalog.Record {
	ctx, cancel := c.bounded()
	defer cancel()
	rs, err := c.ListContext(ctx, job)
	if err != nil {
		c.lookupFailed("list", job, 0, err)
	}
	return rs
}

// ListContext is List with its error: a catalog that could not be
// reached is an error, not an empty history.
func (c *CatalogClient) ListContext(ctx context.Context, job string) ([]catalog.Record, error) {
	a, err := call(c, ctx, c.rpc.List, &pb.ListRequest{Job: job}, false)
	if err != nil {
		return nil, err
	}
	return fromWireRecords(a.GetRecords()), nil
}

// RetainedContext is Retained with its error.
func (c *CatalogClient) RetainedContext(ctx context.Context, job string) ([]uint64, error) {
	a, err := call(c, ctx, c.rpc.Retained, &pb.RetainedRequest{Job: job}, false)
	if err != nil {
		return nil, err
	}
	return a.GetIds(), nil
}

// CheckpointContext is Checkpoint with its error: a lookup that could not
// reach the catalog is an error, not "not retained".
func (c *CatalogClient) CheckpointContext(ctx context.Context, job string, id uint64) (*catalog.Manifest, bool, error) {
	a, err := call(c, ctx, c.rpc.Checkpoint, &pb.CheckpointRequest{Job: job, Id: id}, false)
	return manifestOf("checkpoint", job, a, err)
}

// SavepointContext is Savepoint with its error.
func (c *CatalogClient) SavepointContext(ctx context.Context, id string) (*catalog.Manifest, bool, error) {
	a, err := call(c, ctx, c.rpc.Savepoint, &pb.SavepointRequest{SavepointId: id}, false)
	return manifestOf("savepoint "+id, "", a, err)
}

// Jobs, Problems and Savepoints are the hosting catalog's (for the web
// page); a failure is logged and answers nothing.
func (c *CatalogClient) Jobs() []string {
	ctx, cancel := c.bounded()
	defer cancel()
	jobs, err := c.JobsContext(ctx)
	if err != nil {
		c.lookupFailed("jobs", "", 0, err)
	}
	return jobs
}

// JobsContext is Jobs with its error: the web page shows a catalog it
// could not reach as a problem, not as "no checkpoint history".
func (c *CatalogClient) JobsContext(ctx context.Context) ([]string, error) {
	a, err := call(c, ctx, c.rpc.Jobs, &pb.JobsRequest{}, false)
	if err != nil {
		return nil, err
	}
	return a.GetJobs(), nil
}

func (c *CatalogClient) Problems() []catalog.Problem {
	ctx, cancel := c.bounded()
	defer cancel()
	a, err := call(c, ctx, c.rpc.Problems, &pb.ProblemsRequest{}, false)
	if err != nil {
		c.lookupFailed("problems", "", 0, err)
		return nil
	}
	var out []catalog.Problem
	for _, p := range a.GetProblems() {
		out = append(out, catalog.Problem{What: p.GetWhat(), Object: p.GetObject(), Job: p.GetJob(), Err: fromWire(p.GetError()), Effect: p.GetEffect()})
	}
	return out
}

func (c *CatalogClient) Savepoints() []*catalog.Manifest {
	ctx, cancel := c.bounded()
	defer cancel()
	a, err := call(c, ctx, c.rpc.Savepoints, &pb.SavepointsRequest{}, false)
	if err != nil {
		c.lookupFailed("savepoints", "", 0, err)
		return nil
	}
	var out []*catalog.Manifest
	for _, enc := range a.GetManifests() {
		m, err := catalog.DecodeManifest(enc)
		if err != nil {
			c.log.Warn("catalog lookup answered a bad savepoint manifest", "err", err)
			continue
		}
		out = append(out, m)
	}
	return out
}

func (c *CatalogClient) RestoreSource(ctx context.Context, req catalog.RestoreRequest) (*catalog.Restore, error) {
	a, err := call(c, ctx, c.rpc.Restore, &pb.RestoreRequest{Job: req.Job, FromJob: req.FromJob, CheckpointId: req.CheckpointID,
		SavepointId: req.SavepointID, Mode: string(req.Mode), AllowFallback: req.AllowFallback}, false)
	if err != nil {
		return nil, err
	}
	m, err := catalog.DecodeManifest(a.GetManifest())
	if err != nil {
		return nil, fmt.Errorf("catalog service: restore of job %s: %w", req.Job, err)
	}
	r := &catalog.Restore{Manifest: m, Handles: m.Tasks, Store: c.opts.Store, NoClaim: a.GetNoClaim()}
	if sp := a.GetSavepoint(); sp != "" {
		if err := catalog.ValidateSavepointID(sp); err != nil {
			return nil, err
		}
		r.Store = tiered.WithPrefix(c.opts.Store, catalog.SavepointDir(sp))
	}
	for _, d := range a.GetSkipped() {
		r.Skipped = append(r.Skipped, catalog.DamagedCheckpoint{Job: d.GetJob(), ID: d.GetId(), Manifest: d.GetManifest(),
			Err: fmt.Errorf("%w: %s", catalog.ErrCorrupt, d.GetError())})
	}
	return r, nil
}

// TriggerSavepoint is refused: it takes a savepoint from live backends or
// files of one daemon, while in a cluster a job's tasks live on several.
// A cluster's savepoints are copies of completed checkpoints
// (SavepointOfCheckpoint; the daemon uses that with SharedCatalog, this
// is the backstop).
func (c *CatalogClient) TriggerSavepoint(ctx context.Context, req catalog.SavepointRequest) (*catalog.Manifest, error) {
	return nil, fmt.Errorf("%w: catalog service: savepoint of job %s: in cluster mode a savepoint is a copy of a completed checkpoint (SavepointOfCheckpoint)",
		backend.ErrInvalidArgument, req.Job)
}

// SavepointOfCheckpoint has the hosting catalog copy retained checkpoint
// id of job (0: its latest) into a native savepoint: self-contained and
// relocatable, whichever nodes wrote the checkpoint's handles. A retry
// after a lost answer writes a second savepoint; the first stays valid.
func (c *CatalogClient) SavepointOfCheckpoint(ctx context.Context, job string, id uint64) (*catalog.Manifest, error) {
	if err := catalog.ValidateJob(job); err != nil {
		return nil, err
	}
	a, err := call(c, ctx, c.rpc.SavepointFromCheckpoint, &pb.SavepointFromCheckpointRequest{Job: job, Id: id}, false)
	if err != nil {
		return nil, err
	}
	m, err := catalog.DecodeManifest(a.GetManifest())
	if err != nil {
		return nil, fmt.Errorf("catalog service: savepoint of job %s: %w", job, err)
	}
	return m, nil
}

func (c *CatalogClient) NoteWithoutChannelState(ctx context.Context, job string, id uint64) {
	if _, err := call(c, ctx, c.rpc.NoteWithoutChannelState, &pb.NoteWithoutChannelStateRequest{Job: job, Id: id}, false); err != nil {
		c.log.Warn("recording a restore without channel state failed", "job", job, "id", id, "err", err)
	}
}

func (c *CatalogClient) ReleaseLog(ctx context.Context, names []string) error {
	_, err := call(c, ctx, c.rpc.ReleaseLog, &pb.ReleaseLogRequest{Names: names}, false)
	return err
}

// ReleaseChangelog reports the changelog segments this node's writer (of
// run) let go of: every segment of the run below heldFrom, and names.
func (c *CatalogClient) ReleaseChangelog(ctx context.Context, run string, heldFrom uint64, names []string) error {
	_, err := call(c, ctx, c.rpc.ReleaseChangelog, &pb.ReleaseChangelogRequest{Run: run, HeldFrom: heldFrom, Names: names}, false)
	return err
}
