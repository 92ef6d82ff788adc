package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
)

// opOverhead approximates the encoded bytes of an operation besides its
// operands.
const opOverhead = 24

// arenaChunk is the size of the buffers operands are copied into.
const arenaChunk = 64 << 10

// batch is a set of operations sent in one request.
type batch struct {
	in    *Instance
	seq   uint64
	ops   []*pb.Op
	slab  []pb.Op // current chunk of op structs; ops point into chunks
	arena []byte
	size  int
	sent  atomic.Bool
	done  chan struct{}
	// Set before done is closed.
	results []*pb.Result
	err     error

	cbMu      sync.Mutex
	cbs       []func()
	completed bool
}

func (b *batch) newOp() *pb.Op {
	if len(b.slab) == cap(b.slab) {
		b.slab = make([]pb.Op, 0, min(256, max(8, 2*len(b.ops))))
	}
	b.slab = b.slab[:len(b.slab)+1]
	op := &b.slab[len(b.slab)-1]
	b.ops = append(b.ops, op)
	return op
}

// copy keeps x in the batch: callers may reuse their slices once the
// operation returns.
func (b *batch) copy(x []byte) []byte {
	if len(x) == 0 {
		return nil
	}
	if len(x) > arenaChunk/4 {
		return append([]byte(nil), x...)
	}
	if len(b.arena)+len(x) > cap(b.arena) {
		b.arena = make([]byte, 0, arenaChunk)
	}
	n := len(b.arena)
	b.arena = append(b.arena, x...)
	return b.arena[n:len(b.arena):len(b.arena)]
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

// finish publishes the results (or err) and queues the callbacks.
func (b *batch) finish(results []*pb.Result, err error) {
	b.results, b.err = results, err
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
	maxValue  int

	stream pb.Stated_BatchClient
	cancel context.CancelFunc
	cb     *runner
	timer  *time.Timer

	mu       sync.Mutex
	cur      *batch
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

func newInstance(c *Client, task backend.TaskID, resp *pb.OpenResponse) (*Instance, error) {
	opts := c.opts
	if n := int(resp.GetMaxBatchOps()); n > 0 && opts.MaxBatchOps > n {
		opts.MaxBatchOps = n
	}
	// Leave room for framing and the per-op overhead under the daemon's
	// message limit.
	if n := int(resp.GetMaxMessageSize()) / 2; n > 0 && opts.MaxBatchBytes > n {
		opts.MaxBatchBytes = n
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := c.rpc.Batch(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	in := &Instance{
		c: c, opts: opts, task: task, id: resp.GetInstanceId(),
		maxPar:    int(resp.GetMaxParallelism()),
		keyGroups: backend.KeyGroupRange{Start: int(resp.GetKeyGroups().GetStart()), End: int(resp.GetKeyGroups().GetEnd())},
		restored:  resp.GetRestoredCheckpointId(),
		maxValue:  int(resp.GetMaxValueSize()),
		stream:    stream, cancel: cancel, cb: newRunner(),
		pending:  make(chan *batch, opts.MaxInFlight),
		dead:     make(chan struct{}),
		recvDone: make(chan struct{}),
	}
	for _, s := range resp.GetStates() {
		in.states = append(in.states, api.StateFromPB(s))
	}
	in.timer = time.AfterFunc(time.Hour, in.Flush)
	in.timer.Stop()
	go in.recvLoop()
	return in, nil
}

// Task is the task the instance belongs to.
func (in *Instance) Task() backend.TaskID { return in.task }

// ID is the daemon's name for the instance.
func (in *Instance) ID() []byte { return in.id }

// KeyGroups is the instance's key-group range.
func (in *Instance) KeyGroups() backend.KeyGroupRange { return in.keyGroups }

// MaxParallelism is the job's number of key groups.
func (in *Instance) MaxParallelism() int { return in.maxPar }

// States are the registered states, sorted by name.
func (in *Instance) States() []backend.StateDescriptor { return in.states }

// RestoredCheckpoint is the checkpoint the instance was restored from (0:
// none, or a savepoint).
func (in *Instance) RestoredCheckpoint() uint64 { return in.restored }

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
	for _, x := range operands {
		if len(x) > in.maxValue {
			return 0, status.Errorf(codes.ResourceExhausted,
				"client: operand of %d bytes for state %q of task %s exceeds the daemon's limit of %d bytes",
				len(x), state, in.task, in.maxValue)
		}
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

func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// begin returns the op to fill in the current batch, with in.mu held.
func (in *Instance) begin() (*batch, *pb.Op, error) {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return nil, nil, status.Error(codes.FailedPrecondition, errClosed.Error())
	}
	select {
	case <-in.dead:
		in.mu.Unlock()
		return nil, nil, in.deadErr
	default:
	}
	b := in.cur
	if b == nil {
		b = &batch{in: in, done: make(chan struct{})}
		in.cur = b
		in.timer.Reset(in.opts.FlushDelay)
	}
	return b, b.newOp(), nil
}

// commit ends what begin started: it releases in.mu and sends the batch if
// it is full. It returns the op's index.
func (in *Instance) commit(b *batch, size int) int {
	i := len(b.ops) - 1
	b.size += size + opOverhead
	full := len(b.ops) >= in.opts.MaxBatchOps || b.size >= in.opts.MaxBatchBytes
	in.mu.Unlock()
	if full {
		in.flushBatch(b)
	}
	return i
}

// Flush sends the operations issued so far without waiting for results.
func (in *Instance) Flush() {
	in.sendMu.Lock()
	in.mu.Lock()
	b := in.cur
	in.cur = nil
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
	in.mu.Unlock()
	in.sendLocked(b)
	in.sendMu.Unlock()
}

// sendLocked sends b; the caller holds sendMu.
func (in *Instance) sendLocked(b *batch) {
	b.sent.Store(true)
	in.seq++
	b.seq = in.seq
	in.last = b
	select {
	case <-in.dead:
		b.finish(nil, in.deadErr)
		return
	default:
	}
	// Blocks while MaxInFlight batches await their responses.
	select {
	case in.pending <- b:
	case <-in.dead:
		b.finish(nil, in.deadErr)
		return
	}
	req := &pb.BatchRequest{Seq: b.seq, Ops: b.ops}
	if b.seq == 1 {
		req.InstanceId, req.Job = in.id, in.task.Job
	}
	if err := in.stream.Send(req); err != nil && !errors.Is(err, io.EOF) {
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
		resp, err := in.stream.Recv()
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
		if b == nil || resp.GetSeq() != b.seq || len(resp.GetResults()) != len(b.ops) {
			err := status.Errorf(codes.Internal, "client: response %d does not match the pending batch of %s", resp.GetSeq(), in.task)
			if b != nil {
				b.finish(nil, err)
			}
			in.markDead(err)
			in.cancel()
			break
		}
		for _, r := range resp.GetResults() {
			if r.GetCode() != 0 {
				in.noteErr(resultErr(r))
				break
			}
		}
		b.finish(resp.GetResults(), nil)
	}
	in.noteErr(in.deadErr)
	// Fail what was sent and will never be answered. sendMu keeps new
	// batches out of pending meanwhile; later ones see dead.
	in.sendMu.Lock()
	for {
		select {
		case b := <-in.pending:
			b.finish(nil, in.deadErr)
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

// Snapshot takes checkpoint id of the instance: it applies every operation
// issued before (Sync), then runs the synchronous part in the daemon. With
// wait it also waits for the upload.
func (in *Instance) Snapshot(ctx context.Context, id uint64, wait bool) (*pb.SnapshotResponse, error) {
	if err := in.Sync(ctx); err != nil {
		return nil, err
	}
	return in.c.rpc.Snapshot(ctx, &pb.SnapshotRequest{InstanceId: in.id, Job: in.task.Job, CheckpointId: id, Wait: wait})
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
	_, err := in.c.rpc.Close(ctx, &pb.CloseRequest{InstanceId: in.id, Job: in.task.Job})
	if err != nil {
		return err
	}
	if syncErr != nil && status.Code(syncErr) != codes.Unavailable {
		return syncErr
	}
	return nil
}

// Abandon ends the stream without closing the instance in the daemon (a
// task that stops and leaves its instance to be replaced).
func (in *Instance) Abandon() {
	in.mu.Lock()
	in.closed = true
	in.mu.Unlock()
	in.timer.Stop()
	in.cancel()
	<-in.recvDone
	in.cb.close()
}
