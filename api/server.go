package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/statedhq/stated/api/internal/wire"
	"github.com/statedhq/stated/api/protocol"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/daemon"
)

// ProtocolVersion is the revision of stated.v1 this daemon speaks, sent as
// OpenResponse.protocol_version. Raise it, and list what the new revision
// adds next to that field in stated.proto, whenever a call, field or
// operation is added that a client may depend on; clients compare it with
// the revision they need (client.MinProtocolVersion).
const ProtocolVersion = 4

// Defaults of ServerOptions.
const (
	DefaultMaxMessageSize = 16 << 20
	DefaultMaxBatchOps    = 10000
	DefaultQueueDepth     = 4
	DefaultMaxPage        = 10000
	// DefaultMaxConcurrentStreams lets one connection serve about a
	// thousand instances (a batch stream each) with calls in flight.
	DefaultMaxConcurrentStreams = 1024
	DefaultFirstBatchTimeout    = 10 * time.Second
)

// ServerOptions bound what one client can make the daemon hold.
type ServerOptions struct {
	// MaxMessageSize bounds a received message (and the payload a response
	// carries for read operations). Default DefaultMaxMessageSize.
	MaxMessageSize int
	// MaxBatchOps bounds the operations of one batch. Default
	// DefaultMaxBatchOps.
	MaxBatchOps int
	// QueueDepth is the number of received batches a stream buffers while
	// the previous one is applied. With MaxMessageSize and the daemon's
	// MaxStreamsPerInstance it bounds the memory one instance's clients
	// can pin. Default DefaultQueueDepth.
	QueueDepth int
	// MaxPage caps the entries of one MAP_ITERATE and the timers of one
	// TIMER_POLL (both are cut further to keep the response within
	// MaxMessageSize). Default DefaultMaxPage.
	MaxPage int
	// MaxConcurrentStreams bounds the calls and streams one connection has
	// open at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS): a client needs
	// one for each open instance (its batch stream) and one for each call
	// in flight; beyond it, new ones wait in the client until one ends.
	// Default DefaultMaxConcurrentStreams.
	MaxConcurrentStreams int
	// FirstBatchTimeout bounds the wait for the first request of a batch
	// stream, the one that names the instance: a stream that sends none
	// within it ends with DeadlineExceeded, so it holds no goroutine and
	// no stream slot for longer. Clients send that request when they open
	// the stream (api/client does it in Open, with no operations). Default
	// DefaultFirstBatchTimeout.
	FirstBatchTimeout time.Duration
	// ReadParallelism bounds the goroutines that make one batch's run of
	// point reads (get, map get, map contains) on a backend that can share
	// one hold of its reader lock between them (lsm, heap, file): a run of
	// at least 128 reads is split across up to this many, with the same
	// results, in order. 1: every read on the stream's own goroutine.
	// Default runtime.GOMAXPROCS(0) when the server is made.
	ReadParallelism int
	// BatchSocket is the path of the Unix socket ServeBatchSocket serves,
	// which Open names to clients that called over a Unix socket
	// (OpenResponse.batch_socket). Default "": none named.
	BatchSocket string
	// Logger receives stream-level events. Default slog.Default().
	Logger *slog.Logger
}

// EnsureDefaults fills zero fields with their defaults.
func (o *ServerOptions) EnsureDefaults() {
	if o.MaxMessageSize <= 0 {
		o.MaxMessageSize = DefaultMaxMessageSize
	}
	if o.MaxBatchOps <= 0 {
		o.MaxBatchOps = DefaultMaxBatchOps
	}
	if o.QueueDepth <= 0 {
		o.QueueDepth = DefaultQueueDepth
	}
	if o.MaxPage <= 0 {
		o.MaxPage = DefaultMaxPage
	}
	if o.MaxConcurrentStreams <= 0 {
		o.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if o.FirstBatchTimeout <= 0 {
		o.FirstBatchTimeout = DefaultFirstBatchTimeout
	}
	if o.ReadParallelism <= 0 {
		o.ReadParallelism = runtime.GOMAXPROCS(0)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Server implements the Stated gRPC service over a daemon.
type Server struct {
	pb.UnimplementedStatedServer
	d    *daemon.Daemon
	opts ServerOptions
	log  *slog.Logger
	// unary tracks the unary calls running on every gRPC server built by
	// GRPCServer, for Drain.
	unary inflight
	// draining is closed by Drain to end every batch stream.
	draining  chan struct{}
	drainOnce sync.Once
	// minReadsPerWorker and readChunk are the constants of those names;
	// tests lower them to reach readParallel with small batches.
	minReadsPerWorker, readChunk int
	// parallelReadRuns counts the runs of reads made by readParallel.
	parallelReadRuns atomic.Uint64
	// batchSockets are what ServeBatchSocket serves, for Drain.
	batchSockets batchSockets
}

// NewServer returns the service for d.
func NewServer(d *daemon.Daemon, opts ServerOptions) *Server {
	opts.EnsureDefaults()
	return &Server{d: d, opts: opts, log: opts.Logger, draining: make(chan struct{}), minReadsPerWorker: minReadsPerWorker,
		readChunk: readChunk}
}

// Options returns the options the server runs with, defaults filled in.
func (s *Server) Options() ServerOptions { return s.opts }

// GRPCServer returns a gRPC server with the service registered and the
// message limits set. A non-empty token is required on every call (as
// "authorization: Bearer <token>"); use it for TCP listeners.
func (s *Server) GRPCServer(token string, extra ...grpc.ServerOption) *grpc.Server {
	opts := []grpc.ServerOption{
		// Outermost: Drain waits for every unary call, token check
		// included.
		grpc.ChainUnaryInterceptor(s.unary.track),
		// Stop (and so Drain) returns only once every handler has: the
		// daemon is never shut down under a running call.
		grpc.WaitForHandlers(true),
		grpc.MaxConcurrentStreams(uint32(min(s.opts.MaxConcurrentStreams, math.MaxUint32))),
		// Sends keep gRPC's default (2 GiB). Responses stay within
		// MaxMessageSize (read results that do not fit fail or are cut;
		// TIMER_POLL leaves the timers that do not fit registered), except
		// for error results and a lone timer larger than the whole limit,
		// which must still go out.
		grpc.MaxRecvMsgSize(s.opts.MaxMessageSize),
		grpc.ReadBufferSize(protocol.SocketBufferSize), grpc.WriteBufferSize(protocol.SocketBufferSize),
		grpc.InitialWindowSize(protocol.StreamWindow), grpc.InitialConnWindowSize(protocol.ConnWindow),
		grpc.ForceServerCodecV2(lenientCodec{wire.NewCodec()}),
	}
	if token != "" {
		opts = append(opts, grpc.ChainUnaryInterceptor(unaryToken(token)), grpc.ChainStreamInterceptor(streamToken(token)))
	}
	// After the token check: a client without the token learns nothing.
	opts = append(opts, grpc.ChainUnaryInterceptor(unaryMalformed))
	g := grpc.NewServer(append(opts, extra...)...)
	pb.RegisterStatedServer(g, s)
	return g
}

// Drain stops gs, servers built by GRPCServer, the way a daemon's shutdown
// needs: they stop accepting calls and streams at once; the unary calls in
// flight (a Snapshot waiting for its upload, a CompleteCheckpoint) run
// until they end, for as long as ctx allows; then every batch stream ends
// with codes.Unavailable after the request it is applying (they would end
// only when their clients end them), and the servers stop once every
// answer is out. When ctx ends first, the connections are closed, which
// cancels the calls still running. Drain returns once every handler of gs
// has returned (GRPCServer sets grpc.WaitForHandlers), so that nothing
// runs against the daemon when it is shut down next; it returns an error
// wrapping ctx's if it had to cut calls. The batch sockets
// (ServeBatchSocket) are drained alike: they stop accepting at once, their
// streams end as the gRPC ones do, and Drain waits for their handlers. The
// Server serves no batch stream afterwards.
func (s *Server) Drain(ctx context.Context, gs ...*grpc.Server) error {
	s.batchSockets.stopAccepting()
	stopped := make(chan struct{})
	go func() {
		// Owned by Drain, which waits for it.
		defer close(stopped)
		var wg sync.WaitGroup
		for _, g := range gs {
			wg.Add(1)
			go func() { defer wg.Done(); g.GracefulStop() }()
		}
		wg.Wait()
	}()
	err := s.unary.wait(ctx)
	s.drainOnce.Do(func() { close(s.draining) })
	if berr := s.batchSockets.wait(ctx); berr != nil && err == nil {
		err = berr
	}
	select {
	case <-stopped:
	case <-ctx.Done():
		for _, g := range gs {
			g.Stop()
		}
		<-stopped
		if err == nil {
			err = fmt.Errorf("api: calls cut: %w", ctx.Err())
		}
	}
	return err
}

// inflight counts running unary calls.
type inflight struct {
	mu sync.Mutex
	n  int
	// idle is closed while n is 0 (nil: never used, idle).
	idle chan struct{}
}

func (f *inflight) track(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	f.mu.Lock()
	if f.n == 0 {
		f.idle = make(chan struct{})
	}
	f.n++
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.n--
		if f.n == 0 {
			close(f.idle)
		}
		f.mu.Unlock()
	}()
	return h(ctx, req)
}

// wait returns once no call runs, or ctx's error.
func (f *inflight) wait(ctx context.Context) error {
	f.mu.Lock()
	idle := f.idle
	n := f.n
	f.mu.Unlock()
	if n == 0 {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("api: %d calls still running: %w", n, ctx.Err())
	}
}

func checkToken(ctx context.Context, want [32]byte) error {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get(protocol.TokenHeader) {
		got, ok := strings.CutPrefix(v, "Bearer ")
		// Compare digests so that neither content nor length leaks
		// through timing.
		if h := sha256.Sum256([]byte(got)); ok && subtle.ConstantTimeCompare(h[:], want[:]) == 1 {
			return nil
		}
	}
	return status.Error(codes.Unauthenticated,
		"stated: missing or wrong token: TCP clients must send \"authorization: Bearer <token>\" with the daemon's --token")
}

func unaryToken(token string) grpc.UnaryServerInterceptor {
	want := sha256.Sum256([]byte(token))
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := checkToken(ctx, want); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
}

func streamToken(token string) grpc.StreamServerInterceptor {
	want := sha256.Sum256([]byte(token))
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if err := checkToken(ss.Context(), want); err != nil {
			return err
		}
		return h(srv, ss)
	}
}

// Open implements pb.StatedServer.
func (s *Server) Open(ctx context.Context, req *pb.OpenRequest) (*pb.OpenResponse, error) {
	p, err := openParams(req)
	if err != nil {
		return nil, toStatus(err)
	}
	inst, err := s.d.Open(ctx, p)
	if err != nil {
		return nil, toStatus(err)
	}
	cfg := s.d.Config()
	resp := &pb.OpenResponse{
		InstanceId:           inst.ID,
		MaxParallelism:       int32(inst.MaxParallelism),
		KeyGroups:            &pb.KeyGroupRange{Start: int32(inst.KeyGroups.Start), End: int32(inst.KeyGroups.End)},
		RestoredCheckpointId: inst.RestoredFrom,
		MaxValueSize:         int64(inst.MaxValueSize()),
		MaxMessageSize:       int64(s.opts.MaxMessageSize),
		MaxBatchOps:          int32(s.opts.MaxBatchOps),
		Changelog:            inst.Changelog(),
		BackendKind:          backendKindToPB(inst.Kind),
		MaxPage:              int32(s.opts.MaxPage),
		StreamQueueDepth:     int32(s.opts.QueueDepth),
		// Clamped: a daemon configured beyond int32 still tells clients a
		// bound they can use.
		MaxStreamsPerInstance:     int32(min(cfg.MaxStreamsPerInstance, math.MaxInt32)),
		FirstBatchTimeoutMillis:   s.opts.FirstBatchTimeout.Milliseconds(),
		IdleInstanceTimeoutMillis: max(cfg.IdleInstanceTimeout.Milliseconds(), 0),
		MaxOperatorStateBytes:     backend.MaxOperatorStateBytes,
		LastCompletedCheckpointId: s.d.LastCompleted(inst.Task.Job),
		ProtocolVersion:           ProtocolVersion,
		MaxViewsPerInstance:       int32(min(cfg.Views.MaxPerInstance, math.MaxInt32)),
	}
	// A TCP client may be on another host, where the path means nothing.
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil && p.Addr.Network() == "unix" {
		resp.BatchSocket = s.opts.BatchSocket
	}
	if inst.VerifyKeyGroups {
		resp.KeyHash = pb.KeyHash_KEY_HASH_FNV1A_MURMUR
	}
	for _, d := range inst.Backend.States() {
		resp.States = append(resp.States, protocol.StateToPB(d))
	}
	return resp, nil
}

// backendKinds maps BackendKind to the backend's names; the string field
// of older clients carries the same names.
var backendKinds = map[pb.BackendKind]backend.Kind{
	pb.BackendKind_BACKEND_KIND_HEAP: backend.KindHeap,
	pb.BackendKind_BACKEND_KIND_FILE: backend.KindFile,
	pb.BackendKind_BACKEND_KIND_LSM:  backend.KindLSM,
}

func backendKindToPB(k backend.Kind) pb.BackendKind {
	for e, name := range backendKinds {
		if name == k {
			return e
		}
	}
	return pb.BackendKind_BACKEND_KIND_UNSPECIFIED
}

// stateEnums checks the enums of a state descriptor as the proto names
// them, so that a client that left one unset is told which field to set
// and to what (issue 37: a state with no kind was "kind kind(0) is
// unknown"). The daemon validates the rest.
func stateEnums(sd *pb.StateDescriptor) error {
	kinds := "STATE_KIND_VALUE, STATE_KIND_LIST, STATE_KIND_MAP, STATE_KIND_AGGREGATE or STATE_KIND_TIMERS"
	switch k := sd.GetKind(); {
	case k == pb.StateKind_STATE_KIND_UNSPECIFIED:
		return fmt.Errorf("state %q has no kind: set its kind to %s", sd.GetName(), kinds)
	case pb.StateKind_name[int32(k)] == "":
		return fmt.Errorf("state %q has kind %d, which this daemon does not know: set its kind to %s", sd.GetName(), k, kinds)
	case k != pb.StateKind_STATE_KIND_AGGREGATE:
		return nil
	}
	var errs []error
	if sd.GetAggregate() == pb.AggregateFunc_AGGREGATE_FUNC_UNSPECIFIED {
		errs = append(errs, fmt.Errorf("aggregate state %q has no aggregate function: set aggregate to "+
			"AGGREGATE_FUNC_SUM, AGGREGATE_FUNC_MIN, AGGREGATE_FUNC_MAX or AGGREGATE_FUNC_COUNT", sd.GetName()))
	}
	if sd.GetNumber() == pb.NumberType_NUMBER_TYPE_UNSPECIFIED {
		errs = append(errs, fmt.Errorf("aggregate state %q has no number type: set number to NUMBER_TYPE_INT64 or NUMBER_TYPE_FLOAT64", sd.GetName()))
	}
	return errors.Join(errs...)
}

// openKind is the backend an Open asks for: backend_kind, or the
// deprecated string, which must agree when both are set.
func openKind(req *pb.OpenRequest) (backend.Kind, error) {
	// The deprecated string stays accepted: older clients send only it.
	name := backend.Kind(req.GetBackend())
	e := req.GetBackendKind()
	if e == pb.BackendKind_BACKEND_KIND_UNSPECIFIED {
		if name == "" {
			return "", fmt.Errorf("%w: no backend: set backend_kind to BACKEND_KIND_HEAP, BACKEND_KIND_FILE or BACKEND_KIND_LSM", backend.ErrInvalidArgument)
		}
		if _, err := backend.ParseKind(string(name)); err != nil {
			return "", fmt.Errorf("%w: unknown backend %q in the deprecated field backend: set backend_kind to "+
				"BACKEND_KIND_HEAP, BACKEND_KIND_FILE or BACKEND_KIND_LSM instead", backend.ErrInvalidArgument, name)
		}
		return name, nil
	}
	k, ok := backendKinds[e]
	if !ok {
		return "", fmt.Errorf("%w: unknown backend_kind %d: set it to BACKEND_KIND_HEAP, BACKEND_KIND_FILE or BACKEND_KIND_LSM", backend.ErrInvalidArgument, e)
	}
	if name != "" && name != k {
		return "", fmt.Errorf("%w: backend %q and backend_kind %s name different backends", backend.ErrInvalidArgument, name, e)
	}
	return k, nil
}

func openParams(req *pb.OpenRequest) (daemon.OpenParams, error) {
	p := daemon.OpenParams{
		Task:           protocol.TaskFromPB(req.GetTask()),
		MaxParallelism: int(req.GetMaxParallelism()),
		Parallelism:    int(req.GetParallelism()),
		Replace:        req.GetReplace(),
	}
	if req.GetTask() == nil {
		return p, fmt.Errorf("api: open: %w: no task", backend.ErrInvalidArgument)
	}
	kind, err := openKind(req)
	if err != nil {
		return p, fmt.Errorf("api: open %s: %w", p.Task, err)
	}
	p.Kind = kind
	switch h := req.GetKeyHash(); h {
	case pb.KeyHash_KEY_HASH_UNSPECIFIED:
	case pb.KeyHash_KEY_HASH_FNV1A_MURMUR:
		p.VerifyKeyGroups = true
	default:
		return p, fmt.Errorf("api: open %s: %w: unknown key_hash %d", p.Task, backend.ErrInvalidArgument, h)
	}
	switch m := req.GetLsmMode(); m {
	case pb.LsmMode_LSM_MODE_UNSPECIFIED:
	case pb.LsmMode_LSM_MODE_LOCAL:
		p.LSM = daemon.LSMLocal
	case pb.LsmMode_LSM_MODE_REMOTE:
		p.LSM = daemon.LSMRemote
	default:
		return p, fmt.Errorf("api: open: %w: unknown lsm mode %d", backend.ErrInvalidArgument, m)
	}
	switch m := req.GetChangelog(); m {
	case pb.ChangelogMode_CHANGELOG_MODE_UNSPECIFIED:
	case pb.ChangelogMode_CHANGELOG_MODE_ON:
		p.Changelog = daemon.ChangelogOn
	case pb.ChangelogMode_CHANGELOG_MODE_OFF:
		p.Changelog = daemon.ChangelogOff
	default:
		return p, fmt.Errorf("api: open: %w: unknown changelog mode %d", backend.ErrInvalidArgument, m)
	}
	switch {
	case req.GetKeyGroups() != nil:
		p.KeyGroups = backend.KeyGroupRange{Start: int(req.KeyGroups.Start), End: int(req.KeyGroups.End)}
	case p.Parallelism > 0:
		maxPar := p.MaxParallelism
		if maxPar == 0 {
			maxPar = backend.DefaultMaxParallelism
		}
		if err := backend.ValidateParallelism(maxPar, p.Parallelism); err != nil {
			return p, fmt.Errorf("api: open %s: %w", p.Task, err)
		}
		p.KeyGroups = backend.KeyGroupRangeForOperator(maxPar, p.Parallelism, p.Task.Subtask)
	default:
		return p, fmt.Errorf("api: open %s: %w: no key-group range and no parallelism", p.Task, backend.ErrInvalidArgument)
	}
	var problems []error
	for _, sd := range req.GetStates() {
		if err := stateEnums(sd); err != nil {
			problems = append(problems, err)
		}
		p.States = append(p.States, protocol.StateFromPB(sd))
	}
	if err := errors.Join(problems...); err != nil {
		return p, fmt.Errorf("api: open %s: %w: %w", p.Task, backend.ErrInvalidArgument, err)
	}
	if e := req.GetExternal(); e != nil {
		ext := &daemon.ExternalParams{Root: e.GetRoot()}
		for i, raw := range e.GetRestoreHandles() {
			h, err := backend.DecodeHandle(raw)
			if err != nil {
				return p, fmt.Errorf("api: open %s: %w: external.restore_handles[%d] is not a task handle the daemon wrote (pass ExternalSnapshot.task_handle as it was returned): %v",
					p.Task, backend.ErrInvalidArgument, i, err)
			}
			ext.Restore = append(ext.Restore, h)
		}
		p.External = ext
	}
	if r := req.GetRestore(); r != nil {
		spec := &daemon.RestoreSpec{AllowFallback: r.GetAllowFallback(), WithoutChannelState: r.GetWithoutChannelStateCheckpointId()}
		switch r.GetMode() {
		case pb.RestoreMode_RESTORE_MODE_UNSPECIFIED:
			// The daemon picks by source (see daemon.RestoreSpec).
		case pb.RestoreMode_RESTORE_MODE_CLAIM:
			spec.Claim = true
		case pb.RestoreMode_RESTORE_MODE_NO_CLAIM:
			spec.NoClaim = true
		default:
			return p, fmt.Errorf("api: open %s: %w: unknown restore mode %d", p.Task, backend.ErrInvalidArgument, r.GetMode())
		}
		switch src := r.GetSource().(type) {
		case *pb.RestoreSource_Latest:
			spec.Latest = src.Latest
		case *pb.RestoreSource_CheckpointId:
			spec.CheckpointID = src.CheckpointId
		case *pb.RestoreSource_Savepoint:
			spec.Savepoint = src.Savepoint
		}
		p.Restore = spec
	}
	return p, nil
}

// Snapshot implements pb.StatedServer.
func (s *Server) Snapshot(ctx context.Context, req *pb.SnapshotRequest) (*pb.SnapshotResponse, error) {
	inst, err := s.d.Lookup(req.GetInstanceId(), req.GetJob())
	if err != nil {
		return nil, toStatus(err)
	}
	// The daemon cannot tell which batch requests are still on their way
	// (sent, not yet received): only the client knows that it waited for
	// their responses. Without that word a snapshot here could silently
	// miss writes, which the barrier on the stream never does.
	if !req.GetBatchesAnswered() {
		return nil, status.Errorf(codes.FailedPrecondition,
			"stated: snapshot %d of %s: the unary Snapshot is not ordered with the batch stream, so it would miss requests still in flight; "+
				"send the snapshot as a barrier on the batch stream (BatchRequest.snapshot), or set batches_answered once every batch response it must cover has arrived",
			req.GetCheckpointId(), inst.Task)
	}
	res, err := s.d.SnapshotWith(ctx, inst, req.GetCheckpointId(), daemon.SnapshotOptions{Wait: req.GetWait(), Stats: statsFromPB(req.GetStats()),
		Full: req.GetFullCheckpoint()})
	if err != nil {
		return nil, toStatus(err)
	}
	out, err := snapshotToPB(res)
	if err != nil {
		return nil, toStatus(err)
	}
	return out, nil
}

func snapshotToPB(res daemon.SnapshotResult) (*pb.SnapshotResponse, error) {
	out := &pb.SnapshotResponse{
		SyncMicros: res.Sync.Microseconds(), AsyncMicros: res.Async.Microseconds(),
		CheckpointedSize: res.CheckpointedSize, FullSize: res.FullSize, Files: int32(res.Files),
	}
	if res.External != nil {
		e, err := externalToPB(res.External)
		if err != nil {
			return nil, err
		}
		out.External = e
	}
	return out, nil
}

// externalToPB encodes an externally owned snapshot.
func externalToPB(x *daemon.ExternalSnapshot) (*pb.ExternalSnapshot, error) {
	raw, err := backend.EncodeHandle(x.Handle)
	if err != nil {
		return nil, fmt.Errorf("api: snapshot %d of %s: encode the task handle: %w", x.Handle.CheckpointID, x.Handle.Task, err)
	}
	out := &pb.ExternalSnapshot{CheckpointId: x.Handle.CheckpointID, TaskHandle: raw,
		CheckpointedSize: x.Handle.CheckpointedSize, FullSize: x.Handle.FullSize}
	for _, f := range x.Files {
		out.Files = append(out.Files, &pb.ExternalFile{Path: f.Path, Location: f.Location, Size: f.Size, Shared: f.Shared})
	}
	return out, nil
}

// AwaitSnapshot implements pb.StatedServer.
func (s *Server) AwaitSnapshot(ctx context.Context, req *pb.AwaitSnapshotRequest) (*pb.AwaitSnapshotResponse, error) {
	inst, err := s.d.Lookup(req.GetInstanceId(), req.GetJob())
	if err != nil {
		return nil, toStatus(err)
	}
	x, err := s.d.AwaitExternal(ctx, inst, req.GetCheckpointId())
	if err != nil {
		return nil, toStatus(err)
	}
	out, err := externalToPB(x)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.AwaitSnapshotResponse{Snapshot: out}, nil
}

// ConfirmSnapshot implements pb.StatedServer.
func (s *Server) ConfirmSnapshot(ctx context.Context, req *pb.ConfirmSnapshotRequest) (*pb.ConfirmSnapshotResponse, error) {
	inst, err := s.d.Lookup(req.GetInstanceId(), req.GetJob())
	if err != nil {
		return nil, toStatus(err)
	}
	if err := s.d.ConfirmExternal(ctx, inst, req.GetCheckpointId()); err != nil {
		return nil, toStatus(err)
	}
	return &pb.ConfirmSnapshotResponse{}, nil
}

// ForgetSnapshot implements pb.StatedServer.
func (s *Server) ForgetSnapshot(ctx context.Context, req *pb.ForgetSnapshotRequest) (*pb.ForgetSnapshotResponse, error) {
	inst, err := s.d.Lookup(req.GetInstanceId(), req.GetJob())
	if err != nil {
		return nil, toStatus(err)
	}
	x, err := s.d.ForgetExternal(ctx, inst, req.GetCheckpointId(), req.GetAbandon())
	if err != nil {
		return nil, toStatus(err)
	}
	if x == nil {
		return &pb.ForgetSnapshotResponse{}, nil
	}
	out, err := externalToPB(x)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.ForgetSnapshotResponse{Finished: out}, nil
}

// barrier takes the snapshot a batch request carries, once its operations
// are applied, and returns the encoded SnapshotOutcome. The stream applies
// nothing else meanwhile, which is what orders the snapshot with the
// operations.
func (s *Server) barrier(ctx context.Context, inst *daemon.Instance, br wire.Barrier) []byte {
	var out pb.SnapshotOutcome
	o := daemon.SnapshotOptions{Wait: br.Wait, Full: br.Full}
	if br.HasStats {
		o.Stats = &daemon.SnapshotStats{Unaligned: br.Stats.Unaligned,
			Alignment: time.Duration(br.Stats.AlignmentMicros) * time.Microsecond, StartDelay: time.Duration(br.Stats.StartDelayMicros) * time.Microsecond}
	}
	res, err := s.d.SnapshotWith(ctx, inst, br.CheckpointID, o)
	if err != nil {
		out.Code = uint32(Code(err))
		out.Error = err.Error()
	} else if r, err := snapshotToPB(res); err != nil {
		out.Code = uint32(Code(err))
		out.Error = err.Error()
	} else {
		out.Result = r
	}
	return encodeOutcome(&out)
}

func encodeOutcome(out *pb.SnapshotOutcome) []byte {
	b, err := proto.Marshal(out)
	if err != nil {
		// Marshal fails only on invalid UTF-8 in error, which daemon
		// messages do not hold; say so rather than send nothing.
		b, _ = proto.Marshal(&pb.SnapshotOutcome{Code: uint32(codes.Internal), Error: "stated: snapshot outcome not encodable"})
	}
	return b
}

// CompleteCheckpoint implements pb.StatedServer.
func (s *Server) CompleteCheckpoint(ctx context.Context, req *pb.CompleteCheckpointRequest) (*pb.CompleteCheckpointResponse, error) {
	var tasks []backend.TaskID
	for _, t := range req.GetTasks() {
		tasks = append(tasks, protocol.TaskFromPB(t))
	}
	info, err := s.d.CompleteCheckpoint(ctx, req.GetJob(), req.GetCheckpointId(), tasks)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.CompleteCheckpointResponse{Checkpoint: infoToPB(info)}, nil
}

func infoToPB(in daemon.CheckpointInfo) *pb.CheckpointInfo {
	out := &pb.CheckpointInfo{
		Job: in.Job, CheckpointId: in.ID, Status: in.Status, State: checkpointStatus(in.Status), Tasks: int32(in.Tasks),
		CheckpointedSize: in.CheckpointedSize, FullSize: in.FullSize,
		DurationMillis: in.Duration.Milliseconds(), Reason: in.Reason, Retained: in.Retained, Pinned: in.Pinned,
		ChangelogSize: in.ChangelogSize,
		Unaligned:     in.Stats.Unaligned, AlignmentMicros: in.Stats.AlignmentMicros, StartDelayMicros: in.Stats.StartDelayMicros,
		SyncMicros: in.Stats.SyncMicros, AsyncMicros: in.Stats.AsyncMicros, PersistedInFlightBytes: in.Stats.InFlightBytes,
		WithoutChannelState: in.WithoutChannelState,
	}
	if !in.Completed.IsZero() {
		out.CompletedUnixMillis = in.Completed.UnixMilli()
	}
	return out
}

// checkpointStatus is CheckpointInfo.status as an enum. The daemon's
// "in-progress" and "completing" are in progress to a client.
func checkpointStatus(s string) pb.CheckpointStatus {
	switch s {
	case "in_progress", "in-progress", "completing":
		return pb.CheckpointStatus_CHECKPOINT_STATUS_IN_PROGRESS
	case "completed":
		return pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED
	case "aborted":
		return pb.CheckpointStatus_CHECKPOINT_STATUS_ABORTED
	case "declined":
		return pb.CheckpointStatus_CHECKPOINT_STATUS_DECLINED
	case "expired":
		return pb.CheckpointStatus_CHECKPOINT_STATUS_EXPIRED
	}
	return pb.CheckpointStatus_CHECKPOINT_STATUS_UNSPECIFIED
}

// abortReason is the reason text the daemon parses: reason_code, when set,
// names the cause, and reason is the explanation after it.
func abortReason(req *pb.AbortCheckpointRequest) (string, error) {
	var name string
	switch c := req.GetReasonCode(); c {
	case pb.AbortReason_ABORT_REASON_UNSPECIFIED:
		return req.GetReason(), nil
	case pb.AbortReason_ABORT_REASON_ABORTED:
		name = "aborted"
	case pb.AbortReason_ABORT_REASON_DECLINED:
		name = "declined"
	case pb.AbortReason_ABORT_REASON_EXPIRED:
		name = "expired"
	default:
		return "", fmt.Errorf("api: abort checkpoint %d of job %s: %w: unknown reason_code %d",
			req.GetCheckpointId(), req.GetJob(), backend.ErrInvalidArgument, c)
	}
	if text := req.GetReason(); text != "" {
		return name + ": " + text, nil
	}
	return name, nil
}

// AbortCheckpoint implements pb.StatedServer.
func (s *Server) AbortCheckpoint(ctx context.Context, req *pb.AbortCheckpointRequest) (*pb.AbortCheckpointResponse, error) {
	reason, err := abortReason(req)
	if err != nil {
		return nil, toStatus(err)
	}
	if err := s.d.AbortCheckpoint(ctx, req.GetJob(), req.GetCheckpointId(), reason); err != nil {
		return nil, toStatus(err)
	}
	return &pb.AbortCheckpointResponse{}, nil
}

// ListCheckpoints implements pb.StatedServer.
func (s *Server) ListCheckpoints(ctx context.Context, req *pb.ListCheckpointsRequest) (*pb.ListCheckpointsResponse, error) {
	infos, err := s.d.ListCheckpoints(ctx, req.GetJob())
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &pb.ListCheckpointsResponse{}
	for _, in := range infos {
		resp.Checkpoints = append(resp.Checkpoints, infoToPB(in))
	}
	return resp, nil
}

// TriggerSavepoint implements pb.StatedServer.
func (s *Server) TriggerSavepoint(ctx context.Context, req *pb.TriggerSavepointRequest) (*pb.TriggerSavepointResponse, error) {
	native := req.GetFormat() == pb.SavepointFormat_SAVEPOINT_FORMAT_NATIVE
	// As the unary Snapshot: the savepoint reads the live instances, which
	// have not applied the batch requests still in flight on their
	// streams, and only the client knows that it waited for them (issue
	// 37: a savepoint sent behind unanswered batches held a fraction of
	// the writes sent before it). A cluster's savepoint copies a completed
	// checkpoint, which its barriers ordered.
	if !req.GetBatchesAnswered() && !s.d.Config().SharedCatalog {
		return nil, status.Errorf(codes.FailedPrecondition,
			"stated: savepoint of job %s: a savepoint is not ordered with the batch streams, so it would miss requests still in flight; "+
				"wait for the response of every batch request it must cover, then set batches_answered "+
				"(or take a checkpoint with snapshot barriers and restore that)", req.GetJob())
	}
	sp, err := s.d.TriggerSavepoint(ctx, req.GetJob(), native, req.GetCheckpointId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.TriggerSavepointResponse{Path: sp.Dir, Size: sp.Size, Tasks: int32(sp.Tasks)}, nil
}

// PlanRescale implements pb.StatedServer.
func (s *Server) PlanRescale(ctx context.Context, req *pb.PlanRescaleRequest) (*pb.PlanRescaleResponse, error) {
	plan, m, err := s.d.PlanRescale(ctx, req.GetJob(), req.GetOperator(), req.GetCheckpointId(), req.GetSavepoint(), int(req.GetNewParallelism()))
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &pb.PlanRescaleResponse{CheckpointId: m.CheckpointID, MaxParallelism: int32(plan.MaxParallelism),
		OldParallelism: int32(plan.OldParallelism), NewParallelism: int32(plan.NewParallelism)}
	for _, st := range plan.Subtasks {
		ps := &pb.RescaleSubtask{Index: int32(st.Index), KeyGroups: protocol.KeyGroupsToPB(st.KeyGroups)}
		for _, src := range st.Sources {
			ps.Sources = append(ps.Sources, &pb.RescaleSource{Task: protocol.TaskToPB(src.Handle.Task), KeyGroups: protocol.KeyGroupsToPB(src.Handle.KeyGroups),
				Overlap: protocol.KeyGroupsToPB(src.Overlap), Backend: string(src.Handle.Backend), BackendKind: backendKindToPB(src.Handle.Backend)})
		}
		resp.Subtasks = append(resp.Subtasks, ps)
	}
	return resp, nil
}

// CloseInstance implements pb.StatedServer.
func (s *Server) CloseInstance(ctx context.Context, req *pb.CloseRequest) (*pb.CloseResponse, error) {
	if err := s.d.CloseInstance(req.GetInstanceId(), req.GetJob()); err != nil {
		return nil, toStatus(err)
	}
	return &pb.CloseResponse{}, nil
}

// Batch implements pb.StatedServer. Requests and responses go through the
// hand codec of api/internal/wire (the protobuf encoding of stated.proto,
// without a message per operation); batchStream serves the stream once its
// first request has named the instance.
func (s *Server) Batch(stream pb.Stated_BatchServer) error {
	first, err := s.recvFirst(stream)
	if err != nil || first == nil {
		return err
	}
	hdr, err := wire.DecodeBatch(first.Data, nil)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "stated: %v", err)
	}
	inst, err := s.d.Lookup(hdr.InstanceID, string(hdr.Job))
	if err != nil {
		return toStatus(err)
	}
	release, err := inst.AcquireStream()
	if err != nil {
		return toStatus(err)
	}
	defer release()
	b := &batchStream{
		s: s, stream: stream, inst: inst,
		opsPool: make(chan []wire.Op, s.opts.QueueDepth+2),
		queue:   make(chan request, s.opts.QueueDepth),
	}
	return b.serve(request{raw: first, bt: hdr})
}

// batchStream serves one Batch stream. A reader goroutine (receive)
// receives and decodes requests into a bounded queue (so a client that
// sends faster than its instance applies is held back by gRPC flow
// control, and only it); the handler goroutine (serve) applies and answers
// them in order (respond), which overlaps the receiving of the next
// request with the applying of this one.
type batchStream struct {
	s      *Server
	stream pb.Stated_BatchServer
	inst   *daemon.Instance

	// Requests are decoded where they are received (by the reader), so
	// that decoding the next request overlaps applying this one. The
	// decoded operations are views into the request's pooled buffer: the
	// backends copy what they keep, so the buffer goes back once the
	// request is applied, and its slice of operations to opsPool for the
	// reader to decode into again. At most QueueDepth+2 such slices exist
	// (queued, being applied, being decoded).
	opsPool chan []wire.Op
	// queue holds the requests received and not yet applied; the reader
	// closes it when it ends.
	queue chan request
	// readErr is the reader's error, written before queue is closed.
	readErr error

	// unapplied counts requests received and not yet answered. When the
	// reader receives one while it is zero, the handler is idle and the
	// reader answers it itself: a client with one batch in flight (one
	// operation per round trip) then pays no goroutine hand-off. Order is
	// kept: the reader only goes inline when nothing is queued or running.
	unapplied atomic.Int64
	// inlineMu is held while the reader answers a request; drained, set
	// under it when Drain ends the stream, stops the reader from answering
	// one after the handler has returned.
	inlineMu sync.Mutex
	drained  bool
	// lastOut is the size hint of the next response (the last one's size,
	// plus an eighth). respond uses it, and only one goroutine responds at
	// a time (unapplied).
	lastOut int
}

// serve answers first, then every request the reader receives, until the
// stream ends, a request cannot be answered, or Drain ends the stream.
func (b *batchStream) serve(first request) error {
	b.unapplied.Store(1)
	b.queue <- first
	go b.receive()
	for {
		select {
		case req, ok := <-b.queue:
			if !ok {
				return b.readErr
			}
			if err := b.respond(req); err != nil {
				// unapplied stays up: the reader never goes inline again.
				return err
			}
			b.unapplied.Add(-1)
		case <-b.s.draining:
			b.inlineMu.Lock()
			b.drained = true
			b.inlineMu.Unlock()
			return status.Errorf(codes.Unavailable,
				"stated: the daemon is shutting down: batch stream of %s ended; requests not answered were not applied", b.inst.Task)
		}
	}
}

// receive is the reader goroutine. Owned by the handler (serve): it ends
// when the stream ends, which the handler's return brings about at the
// latest.
func (b *batchStream) receive() {
	defer close(b.queue)
	ctx := b.stream.Context()
	for {
		raw := &wire.Raw{Pooled: true}
		if err := b.stream.RecvMsg(raw); err != nil {
			if !errors.Is(err, io.EOF) {
				b.readErr = err
			}
			return
		}
		req := b.decode(raw)
		if b.unapplied.Add(1) == 1 {
			b.inlineMu.Lock()
			if b.drained {
				b.inlineMu.Unlock()
				raw.Free()
				return
			}
			err := b.respond(req)
			b.inlineMu.Unlock()
			b.unapplied.Add(-1)
			if err != nil {
				b.readErr = err
				return
			}
			continue
		}
		select {
		case b.queue <- req:
		case <-ctx.Done():
			raw.Free()
			return
		}
	}
}

// decode decodes raw into a slice of operations from opsPool.
func (b *batchStream) decode(raw *wire.Raw) request {
	var ops []wire.Op
	select {
	case ops = <-b.opsPool:
	default:
	}
	bt, err := wire.DecodeBatch(raw.Data, ops)
	return request{raw: raw, bt: bt, err: err}
}

// respond applies req and sends its response; an error ends the stream.
// req's buffer and operations go back to their pools.
func (b *batchStream) respond(req request) error {
	defer func() {
		req.raw.Free()
		select {
		case b.opsPool <- req.bt.Ops:
		default:
		}
	}()
	bt, inst := &req.bt, b.inst
	if req.err != nil {
		return status.Errorf(codes.InvalidArgument, "stated: batch of %s: %v", inst.Task, req.err)
	}
	if (len(bt.InstanceID) > 0 && string(bt.InstanceID) != string(inst.ID)) || (len(bt.Job) > 0 && string(bt.Job) != inst.Task.Job) {
		return status.Errorf(codes.InvalidArgument,
			"stated: batch %d names another instance or job than the stream's first request (instance %s of %s); open one stream per instance",
			bt.Seq, inst.IDString(), inst.Task)
	}
	out := b.s.applyBatch(b.stream.Context(), inst, bt, b.lastOut)
	b.lastOut = len(out.Data) + len(out.Data)/8
	return b.stream.SendMsg(out)
}

// request is a received BatchRequest, decoded (err: it is malformed).
type request struct {
	raw *wire.Raw
	bt  wire.Batch
	err error
}

// recvFirst receives the first request of a batch stream, waiting at most
// FirstBatchTimeout; nil, nil: the client ended the stream first. RecvMsg
// ends only with the stream, which the handler's return brings about: on
// timeout, the receiving goroutine (owned by the handler) ends then and
// frees what it may still have received.
func (s *Server) recvFirst(stream grpc.ServerStream) (*wire.Raw, error) {
	first := &wire.Raw{Pooled: true}
	got := make(chan error)
	abandoned := make(chan struct{})
	go func() {
		err := stream.RecvMsg(first)
		select {
		case got <- err:
		case <-abandoned:
			if err == nil {
				first.Free()
			}
		}
	}()
	timer := time.NewTimer(s.opts.FirstBatchTimeout)
	defer timer.Stop()
	select {
	case err := <-got:
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return first, nil
	case <-s.draining:
		close(abandoned)
		return nil, status.Error(codes.Unavailable, "stated: the daemon is shutting down")
	case <-timer.C:
		close(abandoned)
		return nil, status.Errorf(codes.DeadlineExceeded,
			"stated: no batch request within %s of opening the stream: the first request names the instance "+
				"(instance_id and job; it may carry no operations) and must come right after the stream opens", s.opts.FirstBatchTimeout)
	}
}
