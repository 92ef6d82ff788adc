package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	pb "github.com/statedhq/stated/cluster/clusterpb"
)

// ErrCatalogNotServing is wrapped by CatalogServer.Handle's error when the server
// stopped hosting the catalog during the call: its catalog was closed, or
// its Journal said (by wrapping ErrCatalogNotServing) that this node no longer
// leads. The call did not decide anything the next leader would not; the
// caller asks again there.
var ErrCatalogNotServing = errors.New("catalog service: this server no longer hosts the catalog")

// CatalogServer answers CatalogClients' calls with a catalog: the one the cluster's
// leader hosts.
type CatalogServer struct {
	cat   *catalog.Catalog
	opts  CatalogServerOptions
	log   *slog.Logger
	group groupPut
	// settles feeds the settler goroutine (with a Journal only); stop
	// ends it and settled closes when it has.
	settles       chan settlement
	stop, settled chan struct{}
	closeOnce     sync.Once
}

// CatalogServerOptions configure a CatalogServer.
type CatalogServerOptions struct {
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
	Journal ReportJournal
	// CheckFences (nil: fenced completions are refused) checks, from the
	// leader's own state, that each fence's token is its task's newest,
	// with an error wrapping catalog.ErrFenced otherwise. It need not
	// confirm the leadership: a completion checks the fences, then the
	// catalog's Options.Guard confirms the leadership before the manifest
	// is written, and the two make a linearizable read.
	CheckFences func(context.Context, []Fence) error
	// LogRelease (nil: none) takes a node's report of the changelog
	// segments its writer let go of (ReleaseChangelog), before the
	// catalog is told its names.
	LogRelease func(run string, heldFrom uint64, names []string)
	// Logger receives journal writes that failed after the catalog
	// decided (the next completion settles them). Default: discard.
	Logger *slog.Logger
}

// NewCatalogServer serves cat.
func NewCatalogServer(cat *catalog.Catalog, o CatalogServerOptions) (*CatalogServer, error) {
	if cat == nil || o.Epoch == 0 {
		return nil, errors.New("catalog service: a server needs a catalog and an epoch")
	}
	if o.Verify == nil {
		o.Verify = func(context.Context) error { return nil }
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &CatalogServer{cat: cat, opts: o, log: o.Logger.With("component", "catalog-service"), stop: make(chan struct{}), settled: make(chan struct{})}
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
func (s *CatalogServer) Close() {
	s.closeOnce.Do(func() { close(s.stop) })
	<-s.settled
}

// Epoch is the server's epoch.
func (s *CatalogServer) Epoch() uint64 { return s.opts.Epoch }

// catalogMethods are the Catalog service's handlers by full method name,
// as protoc-gen-go-grpc generated them: Handle dispatches to the
// service's typed methods through them.
var catalogMethods = func() map[string]methodHandler {
	m := map[string]methodHandler{}
	for _, md := range pb.Catalog_ServiceDesc.Methods {
		m["/"+pb.Catalog_ServiceDesc.ServiceName+"/"+md.MethodName] = methodHandler(md.Handler)
	}
	return m
}()

type methodHandler func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error)

// Handle runs one call: method is a Catalog method's full gRPC name,
// payload its encoded request. Its error is for a call it cannot read, or
// one that this server must not answer (verify failed, or it stopped
// hosting the catalog); what the catalog answers, errors included, is in
// the returned response.
func (s *CatalogServer) Handle(ctx context.Context, method string, payload []byte) ([]byte, error) {
	h, ok := catalogMethods[method]
	if !ok {
		return nil, fmt.Errorf("%w: catalog service: unknown method %q (a node of a newer build?)", backend.ErrInvalidArgument, method)
	}
	dec := func(v any) error {
		if err := proto.Unmarshal(payload, v.(proto.Message)); err != nil {
			return fmt.Errorf("%w: catalog service: %s: bad request: %v", backend.ErrInvalidArgument, path.Base(method), err)
		}
		return nil
	}
	resp, err := h(catalogService{s: s}, ctx, dec, nil)
	if err != nil {
		return nil, err
	}
	return proto.Marshal(resp.(proto.Message))
}

// catalogService is the Server as the generated pb.CatalogServer: one typed
// method per call.
type catalogService struct {
	pb.UnimplementedCatalogServer
	s *CatalogServer
}

// status is the answer's status for what the catalog returned; an error
// saying this server stopped hosting the catalog (its node lost the
// leadership during the call) is not an answer: the caller asks the next
// leader (reports and completions are idempotent).
func (s *CatalogServer) status(call string, err error) (*pb.CatalogStatus, error) {
	if errors.Is(err, catalog.ErrClosed) || errors.Is(err, ErrCatalogNotServing) {
		return nil, fmt.Errorf("%w: %s: %v", ErrCatalogNotServing, call, err)
	}
	return &pb.CatalogStatus{Epoch: s.opts.Epoch, Error: toWire(err)}, nil
}

func (v catalogService) ack(call string, err error) (*pb.CatalogAck, error) {
	st, err := v.s.status(call, err)
	if err != nil {
		return nil, err
	}
	return &pb.CatalogAck{Status: st}, nil
}

func (v catalogService) manifest(call string, m *catalog.Manifest, found bool, err error) (*pb.ManifestResponse, error) {
	var enc []byte
	if err == nil && found {
		enc, err = catalog.EncodeManifest(m)
	}
	st, err := v.s.status(call, err)
	if err != nil {
		return nil, err
	}
	r := &pb.ManifestResponse{Status: st}
	if st.Error == nil && found {
		r.Found, r.Manifest = true, enc
	}
	return r, nil
}

func (v catalogService) Epoch(context.Context, *pb.EpochRequest) (*pb.CatalogAck, error) {
	return v.ack("epoch", nil)
}

func (v catalogService) Begin(_ context.Context, r *pb.BeginRequest) (*pb.CatalogAck, error) {
	return v.ack("begin", v.s.cat.BeginCheckpoint(r.GetJob(), r.GetId()))
}

func (v catalogService) Report(ctx context.Context, r *pb.ReportRequest) (*pb.CatalogAck, error) {
	return v.ack("report", v.s.report(ctx, r.GetJob(), r.GetId(), r.GetReport().GetHandle(), r.GetReport().GetToken()))
}

// report takes one report of a task's handle, under token (0: none).
func (s *CatalogServer) report(ctx context.Context, job string, id uint64, handle []byte, token uint64) error {
	c := s.cat
	h, err := backend.DecodeHandle(handle)
	if err != nil {
		return fmt.Errorf("catalog service: report to checkpoint %d of job %s: %w", id, job, err)
	}
	if token != 0 && c.Replicated() {
		// The catalog's own log checks the token in the entry that
		// takes the report.
		return c.AddFencedTaskHandle(job, id, h, token)
	}
	if token != 0 {
		// A fenced report: the journal write that keeps it also
		// checks the token, so a report of an instance whose task
		// was opened again since cannot land, whatever happens
		// between the instance's snapshot and this call. Only then
		// does the catalog take it (a report the catalog refuses
		// after that stays in the journal until a completion or
		// abort of the job settles it; Recover refuses it again).
		if s.opts.Journal == nil {
			return fmt.Errorf("%w: catalog service: report of %s under fencing token %d: this catalog keeps no journal to check tokens in",
				catalog.ErrInvalidArgument, h.Task, token)
		}
		if err := s.record(ctx, job, id, h.Task, handle, &Fence{Task: h.Task, Token: token}); err != nil {
			return err
		}
		return c.AddTaskHandle(job, id, h)
	}
	if err := c.AddTaskHandle(job, id, h); err != nil {
		return err
	}
	// Journaled once the catalog accepted it: the report stands only
	// when it is kept (the client retries otherwise; a repeated
	// report is accepted).
	return s.record(ctx, job, id, h.Task, handle, nil)
}

func (v catalogService) Complete(ctx context.Context, r *pb.CompleteRequest) (*pb.ManifestResponse, error) {
	m, err := v.s.complete(ctx, r)
	return v.manifest("complete", m, err == nil, err)
}

func (s *CatalogServer) complete(ctx context.Context, r *pb.CompleteRequest) (*catalog.Manifest, error) {
	job, id, tasks := r.GetJob(), r.GetId(), fromTaskIDs(r.GetTasks())
	fences := make([]Fence, len(r.GetFences()))
	for i, f := range r.GetFences() {
		fences[i] = Fence{Task: fromTaskID(f.GetTask()), Token: f.GetToken()}
	}
	if len(r.GetReports()) > 0 && !s.cat.Replicated() {
		// Each report first, as Report takes it (journaled, its token
		// checked in the journal's write).
		if err := s.checkFences(ctx, job, id, fences); err != nil {
			return nil, err
		}
		for _, rp := range r.GetReports() {
			if err := s.report(ctx, job, id, rp.GetHandle(), rp.GetToken()); err != nil {
				return nil, fmt.Errorf("catalog service: complete checkpoint %d of job %s: %w", id, job, err)
			}
		}
		return s.completeChecked(ctx, job, id, tasks, nil)
	}
	if err := s.checkFences(ctx, job, id, fences); err != nil {
		return nil, err
	}
	reports := make([]catalog.FencedHandle, len(r.GetReports()))
	for i, rp := range r.GetReports() {
		h, err := backend.DecodeHandle(rp.GetHandle())
		if err != nil {
			return nil, fmt.Errorf("catalog service: complete checkpoint %d of job %s: report %d: %w", id, job, i, err)
		}
		reports[i] = catalog.FencedHandle{Handle: h, Token: rp.GetToken()}
	}
	return s.completeChecked(ctx, job, id, tasks, reports)
}

// checkFences refuses a completion under a fence that no longer holds.
func (s *CatalogServer) checkFences(ctx context.Context, job string, id uint64, fences []Fence) error {
	if len(fences) == 0 {
		return nil
	}
	if s.opts.CheckFences == nil {
		return fmt.Errorf("%w: catalog service: complete checkpoint %d of job %s under fencing tokens: this catalog cannot check them",
			catalog.ErrInvalidArgument, id, job)
	}
	if err := s.opts.CheckFences(ctx, fences); err != nil {
		return fmt.Errorf("catalog service: complete checkpoint %d of job %s: %w", id, job, err)
	}
	return nil
}

// completeChecked completes a checkpoint whose fences were checked: with
// reports, in the completion's own log entry (a replicated catalog: with
// the checkpoint's begin, if this leader holds it back; a checkpoint a
// former leader began and held is not in flight here until the caller's
// client replays its begins, and the completion is refused until then,
// never begun again here: it may have been aborted since).
func (s *CatalogServer) completeChecked(ctx context.Context, job string, id uint64, tasks []backend.TaskID, reports []catalog.FencedHandle) (*catalog.Manifest, error) {
	var m *catalog.Manifest
	var err error
	if len(reports) > 0 {
		m, err = s.cat.CompleteWithReports(ctx, job, id, tasks, nil, reports)
	} else {
		m, err = s.cat.CompleteTasks(ctx, job, id, tasks)
	}
	if err == nil {
		s.settle(ctx, job, id, true)
		s.subsume(ctx, job, id)
	}
	return m, err
}

// completeHere is Complete for a caller on the node that hosts the
// catalog (CatalogClient.CompleteWithReports): the same checks and
// outcome, without the wire's encodings of the handles and of the
// manifest (about a quarter of a millisecond of a completion's path for
// 6 tasks). The reports are checked as the wire's decode checks them.
// Its error says ErrCatalogNotServing when this server no longer hosts
// the catalog, and the caller asks through the cluster instead.
func (s *CatalogServer) completeHere(ctx context.Context, job string, id uint64, tasks []backend.TaskID, tokens map[backend.TaskID]uint64,
	reports []catalog.FencedHandle) (*catalog.Manifest, error) {
	if len(reports) > 0 && !s.cat.Replicated() {
		return nil, fmt.Errorf("%w: reports of a completion through an unreplicated catalog go through the wire", ErrCatalogNotServing)
	}
	for i, rp := range reports {
		if rp.Handle == nil {
			return nil, fmt.Errorf("%w: nil handle for checkpoint %d of job %s", catalog.ErrInvalidArgument, id, job)
		}
		if err := rp.Handle.Validate(); err != nil {
			return nil, fmt.Errorf("catalog service: complete checkpoint %d of job %s: report %d: %w", id, job, i, err)
		}
	}
	fences := make([]Fence, 0, len(tokens))
	for t, tok := range tokens {
		fences = append(fences, Fence{Task: t, Token: tok})
	}
	if err := s.checkFences(ctx, job, id, fences); err != nil {
		return nil, err
	}
	m, err := s.completeChecked(ctx, job, id, tasks, reports)
	if errors.Is(err, catalog.ErrClosed) {
		err = fmt.Errorf("%w: %w", ErrCatalogNotServing, err)
	}
	return m, err
}

func (v catalogService) Abort(ctx context.Context, r *pb.AbortRequest) (*pb.CatalogAck, error) {
	err := v.s.cat.Abort(ctx, r.GetJob(), r.GetId(), catalog.Status(r.GetStatus()), r.GetReason())
	v.s.settle(ctx, r.GetJob(), r.GetId(), false)
	return v.ack("abort", err)
}

func (v catalogService) Release(ctx context.Context, r *pb.ReleaseRequest) (*pb.CatalogAck, error) {
	err := v.s.cat.Release(ctx, r.GetJob(), r.GetId())
	v.s.settle(ctx, r.GetJob(), r.GetId(), false)
	return v.ack("release", err)
}

func (v catalogService) Checkpoint(_ context.Context, r *pb.CheckpointRequest) (*pb.ManifestResponse, error) {
	m, ok := v.s.cat.Checkpoint(r.GetJob(), r.GetId())
	return v.manifest("checkpoint", m, ok, nil)
}

// Latest, Restore and SavepointFromCheckpoint decide what a task restores
// and must not be stale: when the leadership cannot be confirmed (Verify)
// they are not answered, and the caller asks the leader again.
func (v catalogService) Latest(ctx context.Context, r *pb.LatestRequest) (*pb.ManifestResponse, error) {
	if err := v.s.opts.Verify(ctx); err != nil {
		return nil, err
	}
	m, ok := v.s.cat.Latest(r.GetJob())
	return v.manifest("latest", m, ok, nil)
}

func (v catalogService) Savepoint(ctx context.Context, r *pb.SavepointRequest) (*pb.ManifestResponse, error) {
	// Finds (adopts) one written by another process, too.
	m, ok, err := v.s.cat.SavepointContext(ctx, r.GetSavepointId())
	return v.manifest("savepoint", m, ok, err)
}

func (v catalogService) Retained(_ context.Context, r *pb.RetainedRequest) (*pb.RetainedResponse, error) {
	st, err := v.s.status("retained", nil)
	if err != nil {
		return nil, err
	}
	return &pb.RetainedResponse{Status: st, Ids: v.s.cat.Retained(r.GetJob())}, nil
}

func (v catalogService) List(_ context.Context, r *pb.ListRequest) (*pb.ListResponse, error) {
	st, err := v.s.status("list", nil)
	if err != nil {
		return nil, err
	}
	return &pb.ListResponse{Status: st, Records: toWireRecords(v.s.cat.List(r.GetJob()))}, nil
}

func (v catalogService) NoteWithoutChannelState(ctx context.Context, r *pb.NoteWithoutChannelStateRequest) (*pb.CatalogAck, error) {
	v.s.cat.NoteWithoutChannelState(ctx, r.GetJob(), r.GetId())
	return v.ack("note-without-channel-state", nil)
}

func (v catalogService) ReleaseLog(ctx context.Context, r *pb.ReleaseLogRequest) (*pb.CatalogAck, error) {
	return v.ack("release-log", v.s.cat.ReleaseLog(ctx, r.GetNames()))
}

func (v catalogService) ReleaseChangelog(ctx context.Context, r *pb.ReleaseChangelogRequest) (*pb.CatalogAck, error) {
	if v.s.opts.LogRelease != nil {
		v.s.opts.LogRelease(r.GetRun(), r.GetHeldFrom(), r.GetNames())
	}
	return v.ack("release-changelog", v.s.cat.ReleaseLog(ctx, r.GetNames()))
}

func (v catalogService) Jobs(context.Context, *pb.JobsRequest) (*pb.JobsResponse, error) {
	st, err := v.s.status("jobs", nil)
	if err != nil {
		return nil, err
	}
	return &pb.JobsResponse{Status: st, Jobs: v.s.cat.Jobs()}, nil
}

func (v catalogService) Problems(context.Context, *pb.ProblemsRequest) (*pb.ProblemsResponse, error) {
	st, err := v.s.status("problems", nil)
	if err != nil {
		return nil, err
	}
	a := &pb.ProblemsResponse{Status: st}
	for _, p := range v.s.cat.Problems() {
		a.Problems = append(a.Problems, &pb.CatalogProblem{What: p.What, Object: p.Object, Job: p.Job, Error: toWire(p.Err), Effect: p.Effect})
	}
	return a, nil
}

func (v catalogService) Savepoints(context.Context, *pb.SavepointsRequest) (*pb.SavepointsResponse, error) {
	var encs [][]byte
	var err error
	for _, m := range v.s.cat.Savepoints() {
		var enc []byte
		if enc, err = catalog.EncodeManifest(m); err != nil {
			break
		}
		encs = append(encs, enc)
	}
	st, err := v.s.status("savepoints", err)
	if err != nil {
		return nil, err
	}
	if st.Error != nil {
		encs = nil
	}
	return &pb.SavepointsResponse{Status: st, Manifests: encs}, nil
}

func (v catalogService) SavepointFromCheckpoint(ctx context.Context, r *pb.SavepointFromCheckpointRequest) (*pb.ManifestResponse, error) {
	if err := v.s.opts.Verify(ctx); err != nil {
		return nil, err
	}
	m, err := v.s.cat.SavepointOfCheckpoint(ctx, r.GetJob(), r.GetId())
	return v.manifest("savepoint-from-checkpoint", m, err == nil, err)
}

func (v catalogService) Restore(ctx context.Context, rr *pb.RestoreRequest) (*pb.RestoreResponse, error) {
	if err := v.s.opts.Verify(ctx); err != nil {
		return nil, err
	}
	r, err := v.s.cat.RestoreSource(ctx, catalog.RestoreRequest{Job: rr.GetJob(), FromJob: rr.GetFromJob(), CheckpointID: rr.GetCheckpointId(),
		SavepointID: rr.GetSavepointId(), Mode: catalog.Mode(rr.GetMode()), AllowFallback: rr.GetAllowFallback()})
	var enc []byte
	if err == nil {
		enc, err = catalog.EncodeManifest(r.Manifest)
	}
	st, err := v.s.status("restore", err)
	if err != nil {
		return nil, err
	}
	a := &pb.RestoreResponse{Status: st}
	if st.Error != nil {
		return a, nil
	}
	a.Manifest, a.NoClaim, a.Savepoint = enc, r.NoClaim, rr.GetSavepointId()
	for _, d := range r.Skipped {
		a.Skipped = append(a.Skipped, &pb.DamagedCheckpoint{Job: d.Job, Id: d.ID, Manifest: d.Manifest, Error: d.Err.Error()})
	}
	return a, nil
}

// subsume aborts the job's checkpoints older than id still in flight: a
// completion subsumes them. The nodes' daemons abort their own; this
// catches the ones no daemon knows any more (recovered from the journal
// after their node died, or after an abort whose settlement was lost), so
// that they do not protect their uploads from the sweep for ever.
func (s *CatalogServer) subsume(ctx context.Context, job string, id uint64) {
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
