package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api/protocol"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/internal/tlsconf"
)

// Defaults of Options.
const (
	DefaultMaxBatchOps   = 1000
	DefaultMaxBatchBytes = 1 << 20
	DefaultFlushDelay    = 200 * time.Microsecond
	DefaultMaxInFlight   = 64
)

// Options configure a Client.
type Options struct {
	// Token is sent on every call when set; the daemon requires it on TCP
	// (unless it asks for client certificates instead).
	Token string
	// TLS, when set, makes the connection TLS with this configuration:
	// RootCAs verify the daemon (--tls-cert), Certificates are presented
	// to a daemon that asks for them (--tls-client-ca). Build it from PEM
	// files with LoadTLS. Default nil: plaintext.
	TLS *tls.Config
	// AllowPlaintextToken sends Token without TLS to an address that is
	// not loopback, where anyone on the network path can read it.
	// Default false: Dial refuses.
	AllowPlaintextToken bool
	// MaxBatchOps sends a batch when it holds this many operations.
	// Default DefaultMaxBatchOps (capped by the daemon's limit).
	MaxBatchOps int
	// MaxBatchBytes sends a batch when its operands reach this many bytes.
	// Default DefaultMaxBatchBytes (capped by the daemon's message limit).
	MaxBatchBytes int
	// FlushDelay sends a batch this long after its first operation if
	// nothing else sent it earlier. Default DefaultFlushDelay.
	FlushDelay time.Duration
	// MaxInFlight bounds the batches per instance sent and not yet
	// answered; issuing operations blocks while it is reached
	// (back-pressure). Default DefaultMaxInFlight.
	MaxInFlight int
	// KeyHash is the 32-bit hash whose key group an operation's key falls
	// into. Default FNV1a32.
	KeyHash func(key []byte) int32
	// DialOptions are added to the gRPC dial options.
	DialOptions []grpc.DialOption
	// NoBatchSocket keeps every instance's batch stream on the Batch call
	// even when the daemon names its batch socket (docs/protocol.md, "The
	// batch socket"). Default false: the batch socket, whose round trips
	// cost about a third.
	NoBatchSocket bool
}

func (o *Options) ensureDefaults() {
	if o.MaxBatchOps <= 0 {
		o.MaxBatchOps = DefaultMaxBatchOps
	}
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if o.FlushDelay <= 0 {
		o.FlushDelay = DefaultFlushDelay
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.KeyHash == nil {
		o.KeyHash = FNV1a32
	}
}

// FNV1a32 is the default key hash: 32-bit FNV-1a of key, as a signed int32.
func FNV1a32(key []byte) int32 {
	h := fnv.New32a()
	_, _ = h.Write(key)
	return int32(h.Sum32())
}

// Client is a connection to a stated daemon. It is safe for concurrent use.
type Client struct {
	cc   *grpc.ClientConn
	rpc  pb.StatedClient
	opts Options

	mu        sync.Mutex
	closed    bool
	instances map[*Instance]struct{} // open: neither closed nor abandoned
}

type tokenCreds string

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{protocol.TokenHeader: "Bearer " + string(t)}, nil
}

func (tokenCreds) RequireTransportSecurity() bool { return false }

// Target turns an address into a gRPC target: "unix://..." and other URLs
// pass through, "host:port" is TCP, anything else is a Unix socket path.
func Target(addr string) (string, error) {
	if strings.Contains(addr, "://") || strings.HasPrefix(addr, "unix:") {
		return addr, nil
	}
	if !strings.Contains(addr, "/") && strings.Contains(addr, ":") {
		return "passthrough:///" + addr, nil
	}
	abs, err := filepath.Abs(addr)
	if err != nil {
		return "", fmt.Errorf("client: socket path %q: %w", addr, err)
	}
	return "unix://" + abs, nil
}

// tcpHost returns the host of a TCP target as Target builds them and as
// gRPC's resolvers name them ("dns:///host:port", "passthrough:///...");
// false for Unix sockets and targets it does not recognise.
func tcpHost(target string) (string, bool) {
	for _, p := range []string{"passthrough:///", "dns:///", "ipv4:", "ipv6:"} {
		if strings.HasPrefix(target, p) {
			host, _, err := net.SplitHostPort(strings.TrimPrefix(target, p))
			return host, err == nil
		}
	}
	return "", false
}

// loopbackHost reports whether host is this machine only.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// LoadTLS builds Options.TLS from PEM files: caFile verifies the daemon
// (empty: the system's roots); certFile and keyFile, both or neither, are
// the client's certificate for a daemon that requires one.
func LoadTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	c, err := tlsconf.ClientConfig(tlsconf.Client{CAFile: caFile, CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return c, nil
}

// Dial connects to the daemon at addr (see Target). The connection is
// established lazily, on the first call.
func Dial(addr string, opts Options) (*Client, error) {
	opts.ensureDefaults()
	target, err := Target(addr)
	if err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if opts.TLS != nil {
		creds = credentials.NewTLS(opts.TLS)
	} else if opts.Token != "" && !opts.AllowPlaintextToken {
		if host, ok := tcpHost(target); ok && !loopbackHost(host) {
			return nil, fmt.Errorf("client: %s is not a loopback address and the connection has no TLS: the token would cross the network in the clear (set Options.TLS, or AllowPlaintextToken to accept that)", addr)
		}
	}
	dopts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(math.MaxInt32)),
		// Batches are large: big socket buffers cut system calls, and
		// windows of a few batches keep flow control off the hot path.
		grpc.WithReadBufferSize(protocol.SocketBufferSize), grpc.WithWriteBufferSize(protocol.SocketBufferSize),
		grpc.WithInitialWindowSize(protocol.StreamWindow), grpc.WithInitialConnWindowSize(protocol.ConnWindow),
	}
	if opts.Token != "" {
		dopts = append(dopts, grpc.WithPerRPCCredentials(tokenCreds(opts.Token)))
	}
	unary, stream := noDaemonHint(addr, target)
	dopts = append(dopts, grpc.WithChainUnaryInterceptor(unary), grpc.WithChainStreamInterceptor(stream))
	cc, err := grpc.NewClient(target, append(dopts, opts.DialOptions...)...)
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", addr, err)
	}
	return &Client{cc: cc, rpc: pb.NewStatedClient(cc), opts: opts, instances: map[*Instance]struct{}{}}, nil
}

// RPC returns the generated stub, for calls this package does not wrap.
func (c *Client) RPC() pb.StatedClient { return c.rpc }

// Conn returns the underlying gRPC connection.
func (c *Client) Conn() *grpc.ClientConn { return c.cc }

// Close closes the connection. Open instances stop working (the daemon
// keeps them until they are closed or replaced): Close abandons each (see
// Instance.Abandon), so that it returns once their goroutines have ended;
// callbacks already queued run first, and pending operations fail with
// codes.Unavailable or Canceled. Do not call it from a callback: it waits
// for the goroutine that runs them.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	ins := make([]*Instance, 0, len(c.instances))
	for in := range c.instances {
		ins = append(ins, in)
	}
	c.instances = nil
	c.mu.Unlock()
	for _, in := range ins {
		in.stop()
	}
	return c.cc.Close()
}

// register adds an instance that Close must stop.
func (c *Client) register(in *Instance) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return status.Errorf(codes.Canceled, "client: open %s: the client is closed", in.task)
	}
	c.instances[in] = struct{}{}
	return nil
}

func (c *Client) unregister(in *Instance) {
	c.mu.Lock()
	delete(c.instances, in)
	c.mu.Unlock()
}

// Restore names what an instance restores from.
type Restore struct {
	// Exactly one of Latest, CheckpointID and Savepoint.
	Latest       bool
	CheckpointID uint64
	Savepoint    string
	// Claim takes ownership of the checkpoint (the job's retention deletes
	// it once subsumed); NoClaim never modifies it (the first new
	// checkpoint shares no file with it). Set at most one. Neither lets the
	// daemon choose: claim for Latest (a failover of the same job, so
	// restarts do not pile up pinned checkpoints), no-claim for an
	// explicit CheckpointID. Savepoints are never claimed.
	Claim, NoClaim bool
	// AllowFallback, with Latest: when the newest checkpoints are damaged,
	// restore the newest intact one instead of failing with DataLoss (the
	// daemon logs and counts it).
	AllowFallback bool
	// WithoutChannelState, when set, is the id of the checkpoint the
	// restore resolves to: its keyed and operator state are restored, its
	// channel state (in-flight data) is skipped and lost. For a checkpoint
	// whose channel state is damaged (Open fails with DataLoss naming it).
	WithoutChannelState uint64
}

// OpenSpec describes an instance to open.
type OpenSpec struct {
	Task backend.TaskID
	// MaxParallelism is the job's number of key groups; 0: 128.
	MaxParallelism int
	// Parallelism, when > 0, derives KeyGroups as Flink assigns them to
	// subtask Task.Subtask of Parallelism subtasks. A restore from state
	// written at another parallelism (a rescale) needs it: the instance
	// then restores the old subtasks' state that overlaps its range, and
	// its operator state redistributed by mode. MaxParallelism must stay
	// the one the state was written with.
	Parallelism int
	// KeyGroups is the instance's range when Parallelism is 0.
	KeyGroups backend.KeyGroupRange
	Backend   backend.Kind
	States    []backend.StateDescriptor
	Restore   *Restore
	// Replace closes an instance already open for the task, once the new
	// one is open: an Open that fails leaves it open and working.
	Replace bool
	// Changelog chooses changelog mode for the instance (default: the
	// daemon's --changelog).
	Changelog Changelog
	// LSM chooses where an lsm instance keeps its SSTs (default: the
	// daemon's --lsm-remote). Only for an lsm Backend.
	LSM LSMMode
	// CheckKeyGroups declares at Open that key groups are computed with the
	// hash stated.proto specifies (the default KeyHash; Open fails with
	// another), and the daemon then refuses any operation whose key group
	// is not its key's, also from other clients of the instance.
	CheckKeyGroups bool
}

// Changelog is an instance's choice of changelog mode: every change logged
// as it happens, so that a checkpoint only makes the recent changes durable.
type Changelog int

const (
	// ChangelogDefault follows the daemon's --changelog.
	ChangelogDefault Changelog = iota
	// ChangelogOn and ChangelogOff choose for the instance.
	ChangelogOn
	ChangelogOff
)

// LSMMode is an lsm instance's choice of where its SSTs live.
type LSMMode int

const (
	// LSMDefault follows the daemon's --lsm-remote.
	LSMDefault LSMMode = iota
	// LSMLocal keeps them on the daemon's disk, uploaded at checkpoints.
	LSMLocal
	// LSMRemote creates them in the checkpoint store from the start; a
	// checkpoint hands them over and a restore references them in place.
	LSMRemote
)

// Open opens an instance and its batch stream.
func (c *Client) Open(ctx context.Context, spec OpenSpec) (*Instance, error) {
	maxPar := spec.MaxParallelism
	if maxPar == 0 {
		maxPar = backend.DefaultMaxParallelism
	}
	kg := spec.KeyGroups
	if spec.Parallelism > 0 {
		if err := backend.ValidateParallelism(maxPar, spec.Parallelism); err != nil {
			return nil, fmt.Errorf("client: open %s: %w", spec.Task, err)
		}
		kg = backend.KeyGroupRangeForOperator(maxPar, spec.Parallelism, spec.Task.Subtask)
	}
	req := &pb.OpenRequest{
		Task:           protocol.TaskToPB(spec.Task),
		KeyGroups:      &pb.KeyGroupRange{Start: int32(kg.Start), End: int32(kg.End)},
		MaxParallelism: int32(maxPar),
		Parallelism:    int32(max(spec.Parallelism, 0)),
		Backend:        string(spec.Backend),
		Replace:        spec.Replace,
	}
	switch spec.Changelog {
	case ChangelogDefault:
	case ChangelogOn:
		req.Changelog = pb.ChangelogMode_CHANGELOG_MODE_ON
	case ChangelogOff:
		req.Changelog = pb.ChangelogMode_CHANGELOG_MODE_OFF
	default:
		return nil, status.Errorf(codes.InvalidArgument, "client: open %s: changelog choice %d", spec.Task, spec.Changelog)
	}
	switch spec.LSM {
	case LSMDefault:
	case LSMLocal:
		req.LsmMode = pb.LsmMode_LSM_MODE_LOCAL
	case LSMRemote:
		req.LsmMode = pb.LsmMode_LSM_MODE_REMOTE
	default:
		return nil, status.Errorf(codes.InvalidArgument, "client: open %s: lsm mode %d", spec.Task, spec.LSM)
	}
	for _, s := range spec.States {
		req.States = append(req.States, protocol.StateToPB(s))
	}
	if r := spec.Restore; r != nil {
		if r.Claim && r.NoClaim {
			return nil, status.Errorf(codes.InvalidArgument, "client: open %s: a restore is either claim or no-claim, not both", spec.Task)
		}
		rs := &pb.RestoreSource{AllowFallback: r.AllowFallback, WithoutChannelStateCheckpointId: r.WithoutChannelState}
		switch {
		case r.Claim:
			rs.Mode = pb.RestoreMode_RESTORE_MODE_CLAIM
		case r.NoClaim:
			rs.Mode = pb.RestoreMode_RESTORE_MODE_NO_CLAIM
		}
		switch {
		case r.Savepoint != "":
			rs.Source = &pb.RestoreSource_Savepoint{Savepoint: r.Savepoint}
		case r.CheckpointID != 0:
			rs.Source = &pb.RestoreSource_CheckpointId{CheckpointId: r.CheckpointID}
		default:
			rs.Source = &pb.RestoreSource_Latest{Latest: true}
		}
		req.Restore = rs
	}
	if spec.CheckKeyGroups {
		// Functions compare only through reflect.
		if reflect.ValueOf(c.opts.KeyHash).Pointer() != reflect.ValueOf(FNV1a32).Pointer() {
			return nil, status.Errorf(codes.InvalidArgument,
				"client: open %s: CheckKeyGroups declares the key hash stated.proto specifies, which Options.KeyHash replaces", spec.Task)
		}
		req.KeyHash = pb.KeyHash_KEY_HASH_FNV1A_MURMUR
	}
	resp, err := c.rpc.Open(ctx, req)
	if err != nil {
		return nil, err
	}
	return newInstance(ctx, c, spec.Task, resp)
}

// CompleteCheckpoint completes checkpoint id of job once every task in
// this daemon has snapshotted it (or, with tasks, those tasks).
func (c *Client) CompleteCheckpoint(ctx context.Context, job string, id uint64, tasks ...backend.TaskID) (*pb.CheckpointInfo, error) {
	req := &pb.CompleteCheckpointRequest{Job: job, CheckpointId: id}
	for _, t := range tasks {
		req.Tasks = append(req.Tasks, protocol.TaskToPB(t))
	}
	resp, err := c.rpc.CompleteCheckpoint(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.GetCheckpoint(), nil
}

// AbortCheckpoint aborts checkpoint id of job; reason starts with
// "declined", "expired" or "aborted".
func (c *Client) AbortCheckpoint(ctx context.Context, job string, id uint64, reason string) error {
	_, err := c.rpc.AbortCheckpoint(ctx, &pb.AbortCheckpointRequest{Job: job, CheckpointId: id, Reason: reason})
	return err
}

// ListCheckpoints lists the checkpoints of job.
func (c *Client) ListCheckpoints(ctx context.Context, job string) ([]*pb.CheckpointInfo, error) {
	resp, err := c.rpc.ListCheckpoints(ctx, &pb.ListCheckpointsRequest{Job: job})
	if err != nil {
		return nil, err
	}
	return resp.GetCheckpoints(), nil
}

// TriggerSavepoint writes a savepoint of every open instance of job in the
// daemon and returns its path (pass it as Restore.Savepoint). Canonical
// savepoints (native false) restore into any backend kind; native ones copy
// the backends' files of a snapshot taken with checkpointID, an id the job
// has not used.
//
// The savepoint holds every operation issued before the call on this
// client's instances of job: it first waits until they are applied (Sync),
// then tells the daemon so (stated.proto, batches_answered). Instances of
// the job opened by other clients must be synced by their owners first.
func (c *Client) TriggerSavepoint(ctx context.Context, job string, native bool, checkpointID uint64) (string, error) {
	format := pb.SavepointFormat_SAVEPOINT_FORMAT_CANONICAL
	if native {
		format = pb.SavepointFormat_SAVEPOINT_FORMAT_NATIVE
	}
	c.mu.Lock()
	var ins []*Instance
	for in := range c.instances {
		if in.task.Job == job {
			ins = append(ins, in)
		}
	}
	c.mu.Unlock()
	for _, in := range ins {
		// An instance that failed or was closed meanwhile has nothing
		// more to apply; its error is its own (Err), not the savepoint's.
		if err := in.Sync(ctx); err != nil && ctx.Err() != nil {
			return "", status.FromContextError(ctx.Err()).Err()
		}
	}
	resp, err := c.rpc.TriggerSavepoint(ctx, &pb.TriggerSavepointRequest{Job: job, Format: format, CheckpointId: checkpointID, BatchesAnswered: true})
	if err != nil {
		return "", err
	}
	return resp.GetPath(), nil
}

// PlanRescale says what each subtask of operator of job would restore
// from at newParallelism: its key-group range and the old subtasks'
// handles that overlap it (the restore base first). from names the
// checkpoint (Latest, CheckpointID) or Savepoint; its claim fields do not
// apply. It changes nothing.
func (c *Client) PlanRescale(ctx context.Context, job, operator string, from Restore, newParallelism int) (*pb.PlanRescaleResponse, error) {
	req := &pb.PlanRescaleRequest{Job: job, Operator: operator, NewParallelism: int32(min(max(newParallelism, 0), math.MaxInt32)),
		CheckpointId: from.CheckpointID, Savepoint: from.Savepoint}
	if from.Latest {
		req.CheckpointId = 0
	}
	return c.rpc.PlanRescale(ctx, req)
}

// errClosed fails operations on a closed instance.
var errClosed = errors.New("client: instance closed")
