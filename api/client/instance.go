package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"google.golang.org/grpc"

	"github.com/statedhq/stated/api/internal/wire"
	"github.com/statedhq/stated/api/protocol"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
)

// batch is a set of operations sent in one request, encoded as they are
// issued (api/internal/wire): an operation costs a few appends, and the
// caller's slices are copied into the encoding at once.
type batch struct {
	in   *Instance
	seq  uint64
	buf  []byte  // BatchRequest.ops, encoded
	orig *[]byte // the pooled buffer buf started in
	n    int     // operations in buf
	sent atomic.Bool
	done chan struct{}
	// Set before done is closed: the response and where its non-empty
	// results are, by ascending index (see pb.BatchResponse). A result is
	// decoded when its future is read; its byte slices are views into
	// resp, which the batch owns.
	resp []byte
	refs []wire.ResultRef
	err  error

	cbMu      sync.Mutex
	cbs       []func()
	completed bool
}

// result decodes the result of operation i into r (the empty result if
// the daemon sent none).
func (b *batch) result(i int, r *wire.Result) error {
	refs := b.refs
	j := sort.Search(len(refs), func(j int) bool { return int(refs[j].Index) >= i })
	if j < len(refs) && int(refs[j].Index) == i {
		if err := wire.DecodeResult(b.resp, refs[j], r); err != nil {
			return status.Errorf(codes.Internal, "client: %v", err)
		}
	}
	return nil
}

// validRefs checks that results fit a batch of n operations.
func validRefs(refs []wire.ResultRef, n int) bool {
	for j := range refs {
		if int(refs[j].Index) >= n || (j > 0 && refs[j].Index <= refs[j-1].Index) {
			return false
		}
	}
	return true
}

func (b *batch) then(fn func()) {
	b.cbMu.Lock()
	if !b.completed {
		b.cbs = append(b.cbs, fn)
		b.cbMu.Unlock()
		return
	}
	b.cbMu.Unlock()
	b.in.cb.push(fn)
}

// finish publishes the response (or err) and queues the callbacks.
func (b *batch) finish(resp []byte, refs []wire.ResultRef, err error) {
	b.resp, b.refs, b.err = resp, refs, err
	b.cbMu.Lock()
	b.completed = true
	cbs := b.cbs
	b.cbs = nil
	b.cbMu.Unlock()
	close(b.done)
	if len(cbs) > 0 {
		b.in.cb.push(cbs...)
	}
}

// Instance is an open backend instance of one task. All methods are safe
// for concurrent use.
type Instance struct {
	c         *Client
	opts      Options
	task      backend.TaskID
	id        []byte
	maxPar    int
	keyGroups backend.KeyGroupRange
	states    []backend.StateDescriptor
	restored  uint64
	changelog bool
	maxValue  int
	// protoVersion and maxViews are the daemon's OpenResponse
	// protocol_version and max_views_per_instance.
	protoVersion uint32
	maxViews     int

	stream    grpc.ClientStream
	transport string
	cancel    context.CancelFunc
	cb        *runner
	timer     *time.Timer

	mu  sync.Mutex
	cur *batch
	// taken is the batch last taken from cur to be sent: with cur, the
	// newest batch, which an operation failing before it is sent orders
	// its callback after (Future.Then).
	taken    *batch
	lastSize int // bytes of the last batch sent, plus headroom
	closed   bool
	firstErr error

	// sendMu orders batches: it is held from taking a batch to sending it.
	sendMu  sync.Mutex
	seq     uint64
	last    *batch      // last batch sent
	pending chan *batch // sent, awaiting response, in order

	dead     chan struct{}
	deadOnce sync.Once
	deadErr  error
	recvDone chan struct{}
}

// newInstance starts the instance's batch stream and binds it: the first
// request names the instance (the daemon ends a stream that does not
// within its protocol.ServerOptions.FirstBatchTimeout), so it goes out at once,
// without operations, and its answer says the daemon took the stream.
func newInstance(ctx context.Context, c *Client, task backend.TaskID, resp *pb.OpenResponse) (*Instance, error) {
	opts := c.opts
	if n := int(resp.GetMaxBatchOps()); n > 0 && opts.MaxBatchOps > n {
		opts.MaxBatchOps = n
	}
	// Leave room for framing and the per-op overhead under the daemon's
	// message limit.
	if n := int(resp.GetMaxMessageSize()) / 2; n > 0 && opts.MaxBatchBytes > n {
		opts.MaxBatchBytes = n
	}
	sctx, cancel := context.WithCancel(context.Background())
	var stream grpc.ClientStream
	transport := TransportGRPC
	if path := resp.GetBatchSocket(); path != "" && !opts.NoBatchSocket {
		// Named only to a client on the daemon's Unix socket. One that
		// cannot be reached (another mount of the socket's directory)
		// leaves the stream on gRPC.
		limit := max(2*int(resp.GetMaxMessageSize()), 64<<20)
		if s, err := dialBatchSocket(sctx, path, limit); err == nil {
			stream, transport = s, TransportBatchSocket
		}
	}
	var err error
	if stream == nil {
		// The generated stub would encode a message per operation; the
		// stream carries the same protobuf bytes, encoded by hand
		// (api/internal/wire).
		stream, err = c.cc.NewStream(sctx, &pb.Stated_ServiceDesc.Streams[0], pb.Stated_Batch_FullMethodName,
			grpc.ForceCodecV2(wire.NewCodec()))
		if err != nil {
			cancel()
			return nil, err
		}
	}
	in := &Instance{
		c: c, opts: opts, task: task, id: resp.GetInstanceId(),
		maxPar:       int(resp.GetMaxParallelism()),
		keyGroups:    backend.KeyGroupRange{Start: int(resp.GetKeyGroups().GetStart()), End: int(resp.GetKeyGroups().GetEnd())},
		restored:     resp.GetRestoredCheckpointId(),
		changelog:    resp.GetChangelog(),
		maxValue:     int(resp.GetMaxValueSize()),
		protoVersion: resp.GetProtocolVersion(), maxViews: int(resp.GetMaxViewsPerInstance()),
		stream: stream, transport: transport, cancel: cancel, cb: newRunner(),
		pending:  make(chan *batch, opts.MaxInFlight),
		dead:     make(chan struct{}),
		recvDone: make(chan struct{}),
	}
	for _, s := range resp.GetStates() {
		in.states = append(in.states, protocol.StateFromPB(s))
	}
	in.timer = time.AfterFunc(time.Hour, in.Flush)
	in.timer.Stop()
	if err := c.register(in); err != nil {
		cancel()
		return nil, err
	}
	go in.recvLoop()
	hello := &batch{in: in, done: make(chan struct{}), orig: wire.OutBuffer(64)}
	hello.buf = *hello.orig
	in.sendMu.Lock()
	in.sendLocked(hello)
	in.sendMu.Unlock()
	select {
	case <-hello.done:
		err = hello.err
	case <-ctx.Done():
		err = status.FromContextError(ctx.Err()).Err()
	}
	if err != nil {
		in.Abandon()
		// Best effort: the daemon would otherwise keep the instance, and a
		// new Open of the task would need Replace.
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, _ = c.rpc.CloseInstance(cctx, &pb.CloseRequest{InstanceId: in.id, Job: task.Job})
		ccancel()
		return nil, fmt.Errorf("client: open %s: batch stream: %w", task, err)
	}
	return in, nil
}

// Transports of an instance's batch stream (Instance.Transport).
const (
	// TransportBatchSocket is the daemon's batch socket.
	TransportBatchSocket = "batch-socket"
	// TransportGRPC is the Batch call.
	TransportGRPC = "grpc"
)

// Transport says how the batch stream reaches the daemon: on its batch
// socket when it names one (to clients on its Unix socket) and
// Options.NoBatchSocket is not set, else (or if the socket cannot be
// reached) on the Batch call.
func (in *Instance) Transport() string { return in.transport }

// Task is the task the instance belongs to.
func (in *Instance) Task() backend.TaskID { return in.task }

// ID is the daemon's name for the instance.
func (in *Instance) ID() []byte { return in.id }

// KeyGroups is the instance's key-group range.
func (in *Instance) KeyGroups() backend.KeyGroupRange { return in.keyGroups }

// MaxParallelism is the job's number of key groups.
func (in *Instance) MaxParallelism() int { return in.maxPar }

// States are the registered states, sorted by name.
func (in *Instance) States() []backend.StateDescriptor {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.states
}

// RestoredCheckpoint is the checkpoint the instance was restored from (0:
// none, or a savepoint).
func (in *Instance) RestoredCheckpoint() uint64 { return in.restored }

// Changelog reports whether the instance is in changelog mode.
func (in *Instance) Changelog() bool { return in.changelog }

// ProtocolVersion is the revision of the protocol the daemon speaks
// (stated.proto, OpenResponse.protocol_version; 0: a daemon from before
// revisions were advertised).
func (in *Instance) ProtocolVersion() uint32 { return in.protoVersion }

// MaxViews is the number of read views the instance may hold at once (0:
// not advertised, a daemon before ViewsProtocolVersion).
func (in *Instance) MaxViews() int { return in.maxViews }

// KeyGroup returns the key group of key (see the package doc).
func (in *Instance) KeyGroup(key []byte) int {
	return backend.KeyGroupForHash(in.opts.KeyHash(key), in.maxPar)
}

// Err returns the first error of an operation (or of the stream) since the
// last call, and clears it. Fire-and-forget writers check it periodically.
func (in *Instance) Err() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	err := in.firstErr
	in.firstErr = nil
	return err
}

func (in *Instance) noteErr(err error) {
	in.mu.Lock()
	if in.firstErr == nil {
		in.firstErr = err
	}
	in.mu.Unlock()
}

// check validates an operation locally: the key group must be the
// instance's and operands within the daemon's size limit.
func (in *Instance) check(state string, key []byte, operands ...[]byte) (uint32, error) {
	if err := in.checkSizes(state, operands); err != nil {
		return 0, err
	}
	if len(key) > in.maxValue {
		return 0, status.Errorf(codes.ResourceExhausted,
			"client: key of %d bytes for state %q of task %s exceeds the daemon's limit of %d bytes", len(key), state, in.task, in.maxValue)
	}
	kg := in.KeyGroup(key)
	if !in.keyGroups.Contains(kg) {
		return 0, status.Errorf(codes.InvalidArgument,
			"client: key %q of state %q falls into key group %d, outside the range %s of task %s (records must be routed with the same key hash)",
			truncate(key), state, kg, in.keyGroups, in.task)
	}
	return uint32(kg), nil
}

func (in *Instance) checkSizes(state string, operands [][]byte) error {
	for _, x := range operands {
		if len(x) > in.maxValue {
			return status.Errorf(codes.ResourceExhausted,
				"client: operand of %d bytes for state %q of task %s exceeds the daemon's limit of %d bytes",
				len(x), state, in.task, in.maxValue)
		}
	}
	return nil
}

func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// add encodes op into the current batch and returns the batch and the
// op's index in it; it sends the batch if that made it full.
func (in *Instance) add(op *wire.Op) (*batch, int, error) {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return nil, 0, status.Error(codes.FailedPrecondition, errClosed.Error())
	}
	select {
	case <-in.dead:
		in.mu.Unlock()
		return nil, 0, in.deadErr
	default:
	}
	b := in.cur
	if b == nil {
		// Start at the size the last batch reached, so that a steady stream
		// of full batches never regrows its buffer.
		b = &batch{in: in, done: make(chan struct{}), orig: wire.OutBuffer(min(in.opts.MaxBatchBytes+64, max(in.lastSize, 256)))}
		b.buf = *b.orig
		in.cur = b
		in.timer.Reset(in.opts.FlushDelay)
	}
	b.buf = wire.AppendOp(b.buf, op)
	i := b.n
	b.n++
	full := b.n >= in.opts.MaxBatchOps || len(b.buf) >= in.opts.MaxBatchBytes
	in.mu.Unlock()
	if full {
		in.flushBatch(b)
	}
	return b, i, nil
}

// Flush sends the operations issued so far without waiting for results.
func (in *Instance) Flush() {
	in.sendMu.Lock()
	in.mu.Lock()
	b := in.cur
	in.cur = nil
	if b != nil {
		in.taken = b
	}
	in.mu.Unlock()
	if b != nil {
		in.sendLocked(b)
	}
	in.sendMu.Unlock()
}

// flushBatch sends b if it has not gone out yet.
func (in *Instance) flushBatch(b *batch) {
	if b.sent.Load() {
		return
	}
	in.sendMu.Lock()
	in.mu.Lock()
	if in.cur != b {
		in.mu.Unlock()
		in.sendMu.Unlock()
		return
	}
	in.cur = nil
	in.taken = b
	in.mu.Unlock()
	in.sendLocked(b)
	in.sendMu.Unlock()
}

// latest is the newest batch: the open one, else the one last taken to be
// sent (nil before the first).
func (in *Instance) latest() *batch {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cur != nil {
		return in.cur
	}
	return in.taken
}

// sendLocked sends b; the caller holds sendMu.
func (in *Instance) sendLocked(b *batch) {
	b.sent.Store(true)
	in.seq++
	b.seq = in.seq
	in.last = b
	select {
	case <-in.dead:
		b.finish(nil, nil, in.deadErr)
		return
	default:
	}
	// Blocks while MaxInFlight batches await their responses.
	select {
	case in.pending <- b:
	case <-in.dead:
		b.finish(nil, nil, in.deadErr)
		return
	}
	data := b.buf
	in.mu.Lock()
	in.lastSize = len(data) + len(data)/8 + 64
	in.mu.Unlock()
	if b.seq == 1 {
		data = wire.AppendBatchHeader(data, b.seq, in.id, in.task.Job)
	} else {
		data = wire.AppendBatchHeader(data, b.seq, nil, "")
	}
	// gRPC may still read data after SendMsg returns, and then returns the
	// buffer to its pool: the batch lets go of it.
	raw := wire.NewOutgoing(b.orig, data)
	b.buf, b.orig = nil, nil
	if err := in.stream.SendMsg(raw); err != nil && !errors.Is(err, io.EOF) {
		// io.EOF means the daemon ended the stream: recvLoop receives its
		// status. Anything else is local; end the stream so recvLoop fails
		// every pending batch with it.
		in.markDead(err)
		in.cancel()
	}
}

func (in *Instance) markDead(err error) {
	in.deadOnce.Do(func() {
		if _, ok := status.FromError(err); !ok {
			err = status.Error(codes.Unavailable, fmt.Sprintf("client: batch stream of %s: %v", in.task, err))
		}
		in.deadErr = err
		close(in.dead)
	})
}

// recvLoop completes batches in order as their responses arrive.
func (in *Instance) recvLoop() {
	defer close(in.recvDone)
	for {
		var raw wire.Raw
		err := in.stream.RecvMsg(&raw)
		var seq uint64
		var refs []wire.ResultRef
		if err == nil {
			seq, refs, err = wire.IndexResponse(raw.Data)
			if err != nil {
				err = status.Errorf(codes.Internal, "client: batch stream of %s: %v", in.task, err)
				in.markDead(err)
				in.cancel()
				break
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = status.Errorf(codes.Unavailable, "client: the daemon ended the batch stream of %s", in.task)
			}
			in.markDead(err)
			break
		}
		var b *batch
		select {
		case b = <-in.pending:
		default:
		}
		if b == nil || seq != b.seq || !validRefs(refs, b.n) {
			err := status.Errorf(codes.Internal, "client: response %d does not match the pending batch of %s", seq, in.task)
			if b != nil {
				b.finish(nil, nil, err)
			}
			in.markDead(err)
			in.cancel()
			break
		}
		for _, ref := range refs {
			// Decode the first failure for Err.
			var r wire.Result
			if ref.Failed && wire.DecodeResult(raw.Data, ref, &r) == nil {
				in.noteErr(resultErr(&r))
				break
			}
		}
		b.finish(raw.Data, refs, nil)
	}
	in.noteErr(in.deadErr)
	// Fail what was sent and will never be answered. sendMu keeps new
	// batches out of pending meanwhile; later ones see dead.
	in.sendMu.Lock()
	for {
		select {
		case b := <-in.pending:
			b.finish(nil, nil, in.deadErr)
			continue
		default:
		}
		break
	}
	in.sendMu.Unlock()
}

// Sync sends everything issued so far and waits until all of it has been
// applied (successfully or not).
func (in *Instance) Sync(ctx context.Context) error {
	in.Flush()
	in.sendMu.Lock()
	last := in.last
	in.sendMu.Unlock()
	if last == nil {
		return nil
	}
	select {
	case <-last.done:
		if last.err != nil {
			return last.err
		}
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// Snapshot takes checkpoint id of the instance, holding every operation
// issued before it and none issued after: it goes out as a barrier on the
// batch stream (stated.proto, BatchRequest.snapshot), in the batch of the
// operations issued last, and the daemon runs the synchronous part once
// that batch is applied. It returns once the daemon has answered; with
// wait, only once the upload has finished (the stream applies nothing
// else meanwhile).
func (in *Instance) Snapshot(ctx context.Context, id uint64, wait bool) (*pb.SnapshotResponse, error) {
	return in.SnapshotWith(ctx, id, SnapshotOptions{Wait: wait})
}

// SnapshotOptions are the options of SnapshotWith.
type SnapshotOptions struct {
	// Wait: return only once the upload has finished.
	Wait bool
	// Stats, when set, reports how the engine took the task's part of the
	// checkpoint; the checkpoint's statistics (ListCheckpoints, stated
	// checkpoints, metrics) show them.
	Stats *CheckpointStats
	// Full: the snapshot reuses no file of an earlier one (an engine
	// that restored in no-claim mode asks this of its first checkpoint;
	// SnapshotBarrier.full_checkpoint).
	Full bool
}

// CheckpointStats is what an engine reports of a task's part in a
// checkpoint (stated.proto TaskCheckpointStats).
type CheckpointStats struct {
	// Unaligned: the barrier overtook the in-flight buffers (written with
	// WriteChannelState before the snapshot).
	Unaligned bool
	// Alignment: from the first barrier to the last at the task's inputs.
	Alignment time.Duration
	// StartDelay: from the checkpoint's trigger to the first barrier here.
	StartDelay time.Duration
}

// SnapshotWith is Snapshot with options. The channel state written for id
// (WriteChannelState) before it goes into the snapshot.
func (in *Instance) SnapshotWith(ctx context.Context, id uint64, o SnapshotOptions) (*pb.SnapshotResponse, error) {
	br := wire.Barrier{CheckpointID: id, Wait: o.Wait, Full: o.Full}
	if st := o.Stats; st != nil {
		br.HasStats = true
		br.Stats = wire.Stats{Unaligned: st.Unaligned, AlignmentMicros: st.Alignment.Microseconds(), StartDelayMicros: st.StartDelay.Microseconds()}
	}
	b, err := in.sendBarrier(ctx, func(buf []byte) []byte { return wire.AppendSnapshotBarrier(buf, br) })
	if err != nil {
		return nil, err
	}
	enc, ok, err := wire.ResponseSnapshot(b.resp)
	if err == nil && !ok {
		err = errors.New("no snapshot outcome in the response to a barrier")
	}
	var out pb.SnapshotOutcome
	if err == nil {
		err = proto.Unmarshal(enc, &out)
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "client: snapshot %d of %s: %v", id, in.task, err)
	}
	if out.GetCode() != 0 {
		return nil, status.Error(codes.Code(out.GetCode()), out.GetError())
	}
	if out.GetResult() == nil {
		return &pb.SnapshotResponse{}, nil
	}
	return out.GetResult(), nil
}

// sendBarrier ends the batch of the operations issued last with a barrier
// (appended by appendBarrier), sends it and waits for its response: the
// barrier holds every operation issued before it and none after, because
// the batch is out of cur before the barrier is added.
func (in *Instance) sendBarrier(ctx context.Context, appendBarrier func([]byte) []byte) (*batch, error) {
	in.sendMu.Lock()
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		in.sendMu.Unlock()
		return nil, status.Error(codes.FailedPrecondition, errClosed.Error())
	}
	b := in.cur
	in.cur = nil
	if b == nil {
		b = &batch{in: in, done: make(chan struct{}), orig: wire.OutBuffer(64)}
		b.buf = *b.orig
	}
	in.taken = b
	in.mu.Unlock()
	b.buf = appendBarrier(b.buf)
	in.sendLocked(b)
	in.sendMu.Unlock()
	select {
	case <-b.done:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if b.err != nil {
		return nil, b.err
	}
	return b, nil
}

// Close applies what was issued, ends the stream and closes the instance in
// the daemon. Operations issued after Close fail.
func (in *Instance) Close(ctx context.Context) error {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return nil
	}
	in.closed = true
	in.mu.Unlock()
	in.timer.Stop()
	syncErr := in.Sync(ctx)
	in.sendMu.Lock()
	_ = in.stream.CloseSend()
	in.sendMu.Unlock()
	select {
	case <-in.recvDone:
	case <-ctx.Done():
	}
	in.cancel()
	<-in.recvDone
	in.cb.close()
	in.c.unregister(in)
	_, err := in.c.rpc.CloseInstance(ctx, &pb.CloseRequest{InstanceId: in.id, Job: in.task.Job})
	if err != nil {
		return err
	}
	if syncErr != nil && status.Code(syncErr) != codes.Unavailable {
		return syncErr
	}
	return nil
}

// Abandon ends the stream without closing the instance in the daemon (a
// task that stops and leaves its instance to be replaced). It returns once
// the instance's goroutines have ended (callbacks queued until then run
// first). Operations issued after it fail.
func (in *Instance) Abandon() {
	in.stop()
	in.c.unregister(in)
}

// stop ends the stream and the instance's goroutines. Idempotent.
func (in *Instance) stop() {
	in.mu.Lock()
	in.closed = true
	in.mu.Unlock()
	in.timer.Stop()
	in.cancel()
	<-in.recvDone
	in.cb.close()
}
