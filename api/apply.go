package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/statedhq/stated/api/internal/wire"
	"github.com/statedhq/stated/api/protocol"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/daemon"
)

// latencySample: in batches of many operations, one in this many is timed.
const latencySample = 4

// apply runs every operation of bt in order and returns the encoded
// BatchResponse (only non-empty results, see stated.proto), in a buffer of
// gRPC's pool that goes back to it once sent. sizeHint is the expected
// response size (the stream's last one), to allocate it once.
func (s *Server) apply(inst *daemon.Instance, bt *wire.Batch, sizeHint int) *wire.Raw {
	return s.applyBatch(context.Background(), inst, bt, sizeHint)
}

// applyBatch is apply, then the request's snapshot barrier if it has one,
// under ctx (the stream's).
func (s *Server) applyBatch(ctx context.Context, inst *daemon.Instance, bt *wire.Batch, sizeHint int) *wire.Raw {
	orig := wire.OutBuffer(min(max(sizeHint, 64), s.opts.MaxMessageSize))
	a := batchApply{s: s, inst: inst, out: *orig}
	applied := a.run(bt)
	switch {
	case !bt.HasSnapshot:
	case !applied:
		// A snapshot now would miss the operations sent before it.
		a.out = wire.AppendSnapshotOutcome(a.out, encodeOutcome(&pb.SnapshotOutcome{Code: uint32(codes.ResourceExhausted),
			Error: fmt.Sprintf("stated: snapshot %d of %s not taken: the operations of its request were refused (more than %d)",
				bt.Snapshot.CheckpointID, inst.Task, s.opts.MaxBatchOps)}))
	default:
		a.out = wire.AppendSnapshotOutcome(a.out, s.barrier(ctx, inst, bt.Snapshot))
	}
	if bt.HasView {
		a.out = wire.AppendViewOutcome(a.out, s.viewBarrier(inst, bt, applied))
	}
	return wire.NewOutgoing(orig, a.out)
}

// batchApply is the application of one batch: the response it builds and
// what its operations share. One goroutine uses it, for one batch.
type batchApply struct {
	s    *Server
	inst *daemon.Instance
	ops  []wire.Op
	// out is the encoded response so far.
	out []byte
	// budget is what out may still grow by: read results that do not fit
	// fail (or, for pages, are cut), so the response stays within
	// MaxMessageSize. Sizes are the exact encoded ones. full is the
	// budget of an empty response.
	budget, full int
	// every: the latency of every every-th operation is timed.
	every  int
	states stateCache
	tally  daemon.OpTally
	// serialReads: a run of reads of this batch could not be made in
	// parallel; the batch's later runs are not tried (see readParallel).
	serialReads bool
}

// run applies bt's operations; false: it refused the whole batch.
func (a *batchApply) run(bt *wire.Batch) bool {
	s, inst := a.s, a.inst
	m := s.d.Metrics()
	m.Batches.Add(1)
	a.ops = bt.Ops
	if len(a.ops) > s.opts.MaxBatchOps {
		m.BatchesRejected.Add(1)
		r := wire.Result{Code: uint32(codes.ResourceExhausted), Error: fmt.Sprintf(
			"stated: batch %d of %s has %d operations, more than the daemon's limit of %d; none was applied",
			bt.Seq, inst.Task, len(a.ops), s.opts.MaxBatchOps)}
		for i := range a.ops {
			r.Index = uint32(i)
			a.out = wire.AppendResult(a.out, &r)
		}
		a.out = wire.AppendResponseSeq(a.out, bt.Seq)
		return false
	}
	a.full = s.opts.MaxMessageSize - wire.MaxSeqSize
	a.budget = a.full
	a.tally = inst.Ops.Tally()
	// Reading the clock costs as much as a fast operation: time every
	// operation of small batches, every latencySample-th of large ones
	// (the histogram then samples; the counters stay exact).
	a.every = 1
	if len(a.ops) >= 4*latencySample {
		a.every = latencySample
	}
	// Both group interfaces are optional (see backend.Grouper): they save
	// a backend with a per-write commit or lock cost (lsm: a Pebble batch
	// per write) that cost once per run of operations. A backend without
	// them (heap, file) gets every operation through its own method, one
	// by one, with the same results.
	grouper, _ := inst.Backend.(backend.Grouper)
	reader, _ := inst.Backend.(backend.ReadGrouper)
	ops := a.ops
	for i := 0; i < len(ops); {
		if reader != nil && readable(ops[i].Type) {
			j := i + 1
			for j < len(ops) && readable(ops[j].Type) {
				j++
			}
			if j-i >= minGroup {
				if i += a.readGroup(reader, i, j); i == j {
					continue
				}
				// ops[i] needs the backend's own method: it goes the
				// single-operation way below.
			}
		}
		if grouper != nil && groupable(ops[i].Type) {
			j := i + 1
			for j < len(ops) && groupable(ops[j].Type) {
				j++
			}
			if j-i >= minGroup {
				a.group(grouper, i, j)
				i = j
				continue
			}
		}
		a.one(i)
		i++
	}
	a.tally.Flush()
	a.out = wire.AppendResponseSeq(a.out, bt.Seq)
	return true
}

// one applies ops[i] through the backend's own method.
func (a *batchApply) one(i int) {
	o := a.begin(i, true)
	a.applyOp(o.op, o.state, &o.r, a.budget == a.full)
	a.end(&o, sinceBegin)
}

// opRun is one operation on its way from the batch to the response.
type opRun struct {
	op    *wire.Op
	state string
	kind  backend.StateKind
	r     wire.Result
	timed bool      // one of the operations whose latency is sampled
	t0    time.Time // when a timed operation began, if begin read the clock
}

// sinceBegin, as end's took, times an operation from its begin.
const sinceBegin = time.Duration(-1)

// begin starts ops[i]: its state, an empty result, whether it is timed
// and, with clock, when it began (a group times its operations together
// and reads no clock per operation).
func (a *batchApply) begin(i int, clock bool) opRun {
	op := &a.ops[i]
	state, sk := a.states.get(a.inst, op.StateBytes)
	o := opRun{op: op, state: state, kind: sk, r: wire.Result{Index: uint32(i)}, timed: i%a.every == 0}
	if o.timed && clock {
		o.t0 = time.Now()
	}
	return o
}

// end counts o in the tally, with took as its latency when it is timed
// (sinceBegin: the time since begin), and appends its result.
func (a *batchApply) end(o *opRun, took time.Duration) {
	a.count(o, took)
	a.result(&o.r)
}

// count is end without the result.
func (a *batchApply) count(o *opRun, took time.Duration) {
	failed := o.r.Code != 0
	if o.timed {
		if took == sinceBegin {
			took = time.Since(o.t0)
		}
		a.tally.Add(o.kind, daemon.Op(o.op.Type), took, failed)
	} else {
		a.tally.Count(o.kind, daemon.Op(o.op.Type), failed)
	}
}

// result appends r to the response unless it is empty.
func (a *batchApply) result(r *wire.Result) {
	if r.Empty() {
		return
	}
	n := len(a.out)
	a.out = wire.AppendResult(a.out, r)
	a.budget -= len(a.out) - n
}

// tooBig is the error of a read result of n bytes that does not fit the
// rest of the budget.
func (a *batchApply) tooBig(n int) error {
	return fmt.Errorf("result of %d bytes does not fit the %d-byte message limit with the rest of the batch; send it in a smaller batch", n, a.s.opts.MaxMessageSize)
}

// minGroup is the shortest run of blind writes applied as a group: a
// lone write takes the single-operation path.
const minGroup = 2

// groupable reports whether an operation of type t is a blind write that
// the backend can apply within a group (backend.GroupWriter). Timer
// deletes are not: they are ordered with polls (daemon.Instance).
func groupable(t int32) bool {
	switch daemon.Op(t) {
	case daemon.OpPut, daemon.OpDelete, daemon.OpListAppend, daemon.OpMapPut, daemon.OpMapRemove, daemon.OpTimerRegister:
		return true
	}
	return false
}

// stateCache remembers the last state name a batch resolved: the
// operations of a batch mostly name one state.
type stateCache struct {
	raw  []byte
	name string
	kind backend.StateKind
	ok   bool
}

func (c *stateCache) get(inst *daemon.Instance, raw []byte) (string, backend.StateKind) {
	if c.ok && bytes.Equal(raw, c.raw) {
		return c.name, c.kind
	}
	c.name, c.kind = inst.State(raw)
	c.raw, c.ok = raw, true
	return c.name, c.kind
}

// groupFailure is the error of one operation of a group.
type groupFailure struct {
	i    int
	code codes.Code
	err  error
}

// group applies the blind writes ops[from:to] as one group: under one
// hold of the backend's writer lock and, for lsm, in one Pebble batch,
// committed before the group returns (so before any later read of the
// batch, before the response, and before another stream or a snapshot can
// see the state). Each operation gets its own result: its own validation
// error, or the commit's error if the commit fails. The operations' time
// is the group's, spread evenly over them.
func (a *batchApply) group(g backend.Grouper, from, to int) {
	var fails []groupFailure
	t0 := time.Now()
	commitErr := g.Group(func(w backend.GroupWriter) {
		for i := from; i < to; i++ {
			op := &a.ops[i]
			state, _ := a.states.get(a.inst, op.StateBytes)
			if code, err := a.groupOp(w, op, state); err != nil {
				fails = append(fails, groupFailure{i: i, code: code, err: err})
			}
		}
	})
	per := time.Since(t0) / time.Duration(to-from)
	f := 0
	for i := from; i < to; i++ {
		o := a.begin(i, false)
		switch {
		case f < len(fails) && fails[f].i == i:
			a.fail(o.op, o.state, &o.r, fails[f].code, fails[f].err)
			f++
		case commitErr != nil:
			a.fail(o.op, o.state, &o.r, Code(commitErr), commitErr)
		}
		// Only failures: a blind write that succeeds has no result.
		a.end(&o, per)
	}
}

// readable reports whether an operation of type t is a point read a
// backend.GroupReader makes.
func readable(t int32) bool {
	switch daemon.Op(t) {
	case daemon.OpGet, daemon.OpMapGet, daemon.OpMapContains:
		return true
	}
	return false
}

// readGroup makes the point reads ops[from:to] under one hold of the
// backend's reader lock, in order, encoding each result as it goes (with
// the same budget rule as applyOp). It returns how many it made: it stops
// before a read the group cannot make (backend.ErrNotInGroup). A long run
// on a backend that can share the hold between goroutines is made on
// several (readParallel), with the same response.
func (a *batchApply) readGroup(g backend.ReadGrouper, from, to int) int {
	if pg, ok := g.(backend.ParallelReadGrouper); ok && !a.serialReads {
		if n := a.s.readWorkers(to - from); n > 1 {
			return a.readParallel(pg, n, from, to)
		}
	}
	made := to - from
	g.ReadGroup(func(rd backend.GroupReader) { made = a.reads(rd, from, to) })
	return made
}

// reads makes the point reads ops[from:to] through rd, in order, and
// returns how many it made (see readGroup).
func (a *batchApply) reads(rd backend.GroupReader, from, to int) int {
	for i := from; i < to; i++ {
		o := a.begin(i, true)
		op, state, r := o.op, o.state, &o.r
		if code, err := a.check(op); err != nil {
			a.fail(op, state, r, code, err)
		} else {
			k := backend.Key{KeyGroup: int(op.KeyGroup), Key: op.Key, Namespace: op.Namespace}
			var err error
			switch daemon.Op(op.Type) {
			case daemon.OpGet:
				r.Value, r.Found, err = rd.Get(state, k)
			case daemon.OpMapGet:
				r.Value, r.Found, err = rd.MapGet(state, k, op.UserKey)
			case daemon.OpMapContains:
				r.Found, err = rd.MapContains(state, k, op.UserKey)
			}
			if errors.Is(err, backend.ErrNotInGroup) {
				return i - from
			}
			switch {
			case err != nil:
				a.fail(op, state, r, Code(err), err)
			case r.Found:
				// The common result, encoded without the generic
				// encoder's pass over every field of Result.
				if n := wire.FoundResultSize(r.Index, len(r.Value)); n > a.budget {
					a.fail(op, state, r, codes.ResourceExhausted, a.tooBig(n))
				} else {
					a.count(&o, sinceBegin)
					a.out = wire.AppendFoundResult(a.out, r.Index, r.Value)
					a.budget -= n
					continue
				}
			}
		}
		a.end(&o, sinceBegin)
	}
	return to - from
}

// readParallel is readGroup on n goroutines, for a run long enough to pay
// for them (readWorkers): the daemon runs beside its tasks with cores of
// its own, and a batch's reads are independent of each other. The run is
// cut into chunks of readChunk reads that n workers (the batch's goroutine
// and n-1 others, each a batchApply of its own encoding into a buffer of
// its own, with a reader of its own, all under one hold of the reader
// lock) take in order as they become free, so a worker that the machine
// delays holds back at most one chunk. The chunks' encodings are then
// appended in order, so the response is byte for byte the one reads would
// give. Two cases need the order only one goroutine gives, and both are
// rare: a chunk that stops at a read the group cannot make (later chunks
// were read too early), and a run whose results do not all fit the
// response. Then the workers' results are dropped, uncounted, and reads
// makes the run, and the rest of the batch's runs, on one goroutine. A
// worker takes chunks in order, so the results already in its budget are
// all of reads before the one it makes: its budget is never less than
// reads has at that read, so it fails every read reads fails, and one it
// lets through that reads would fail makes the chunks too large together.
// Chunks that fit together were thus encoded as reads encodes them.
func (a *batchApply) readParallel(g backend.ParallelReadGrouper, n, from, to int) int {
	a.s.parallelReadRuns.Add(1)
	made := 0
	size := a.s.readChunk
	chunks := make([]readSpan, (to-from+size-1)/size)
	for c := range chunks {
		chunks[c].w = -1 // not taken
	}
	workers := make([]batchApply, n)
	for w := range workers {
		workers[w] = batchApply{s: a.s, inst: a.inst, ops: a.ops, out: getPartBuf(), budget: a.budget, full: a.full,
			every: a.every, tally: a.inst.Ops.Tally()}
	}
	defer func() {
		for w := range workers {
			putPartBuf(workers[w].out)
		}
	}()
	var next atomic.Int64
	work := func(w int, rd backend.GroupReader) {
		wa := &workers[w]
		for {
			c := int(next.Add(1) - 1)
			if c >= len(chunks) {
				return
			}
			lo := from + c*size
			hi := min(lo+size, to)
			start := len(wa.out)
			short := wa.reads(rd, lo, hi) < hi-lo
			chunks[c] = readSpan{w: w, start: start, end: len(wa.out), short: short}
			if short {
				// The run is made again on one goroutine anyway.
				next.Store(int64(len(chunks)))
				return
			}
		}
	}
	g.ReadGroups(n, func(rs []backend.GroupReader) {
		var wg sync.WaitGroup
		for w := 1; w < n; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				work(w, rs[w])
			}()
		}
		work(0, rs[0])
		wg.Wait()
		bytes := 0
		for _, c := range chunks {
			if c.short || c.w < 0 {
				bytes = math.MaxInt
				break
			}
			bytes += c.end - c.start
		}
		if bytes > a.budget {
			a.serialReads = true
			made = a.reads(rs[0], from, to)
			return
		}
		for _, c := range chunks {
			a.out = append(a.out, workers[c.w].out[c.start:c.end]...)
		}
		for w := range workers {
			workers[w].tally.Flush()
		}
		a.budget -= bytes
		made = to - from
	})
	return made
}

// readChunk is the number of reads a worker of readParallel takes at once:
// enough to make taking one cheap, few enough that a worker the machine
// delays holds back little.
const readChunk = 32

// readSpan is where a chunk of a readParallel run went: worker w (-1: no
// worker took it) encoded its results into out[start:end]; short: it
// stopped at a read the group cannot make.
type readSpan struct {
	w          int
	start, end int
	short      bool
}

// minReadsPerWorker is the fewest reads worth a goroutine of their own:
// starting and joining one costs about a microsecond, a read a few.
const minReadsPerWorker = 64

// readWorkers is how many goroutines make a run of n reads: one per
// minReadsPerWorker reads, at most ReadParallelism.
func (s *Server) readWorkers(n int) int {
	return max(1, min(s.opts.ReadParallelism, n/s.minReadsPerWorker))
}

// partBufs holds the encoding buffers of readParallel's workers.
var partBufs sync.Pool

func getPartBuf() []byte {
	if b, ok := partBufs.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return nil
}

// putPartBuf keeps b for another worker unless it is large (a buffer that
// once held a huge response should not pin that memory).
func putPartBuf(b []byte) {
	if cap(b) == 0 || cap(b) > 1<<20 {
		return
	}
	partBufs.Put(&b)
}

// groupOp makes one blind write of a group (groupable) through w; it
// returns the operation's error and its code.
func (a *batchApply) groupOp(w backend.GroupWriter, op *wire.Op, state string) (codes.Code, error) {
	if code, err := a.check(op); err != nil {
		return code, err
	}
	k := backend.Key{KeyGroup: int(op.KeyGroup), Key: op.Key, Namespace: op.Namespace}
	if err := writeOp(w, op, state, k); err != nil {
		return Code(err), err
	}
	return codes.OK, nil
}

// writeOp makes the blind write op (groupable) through w: the backend
// itself, or the writer of a group.
func writeOp(w backend.GroupWriter, op *wire.Op, state string, k backend.Key) error {
	switch daemon.Op(op.Type) {
	case daemon.OpPut:
		return w.Put(state, k, op.Value)
	case daemon.OpDelete:
		return w.Delete(state, k)
	case daemon.OpListAppend:
		if len(op.Values) == 0 {
			return fmt.Errorf("%w: list append without values", backend.ErrInvalidArgument)
		}
		return w.ListAppend(state, k, op.Values...)
	case daemon.OpMapPut:
		return w.MapPut(state, k, op.UserKey, op.Value)
	case daemon.OpMapRemove:
		return w.MapRemove(state, k, op.UserKey)
	case daemon.OpTimerRegister:
		return w.RegisterTimer(state, backend.Timer{KeyGroup: k.KeyGroup, Key: k.Key, Namespace: k.Namespace, Timestamp: op.Timestamp})
	}
	return fmt.Errorf("stated: operation type %d is not a blind write", op.Type)
}

// fail fills r with the failure of op, naming the job, task, state and
// key group.
func (a *batchApply) fail(op *wire.Op, state string, r *wire.Result, code codes.Code, err error) {
	*r = wire.Result{Index: r.Index, Code: uint32(code)}
	kg, what := "", "state"
	switch daemon.Op(op.Type) {
	case daemon.OpTimerPoll:
	case daemon.OpOperatorSet, daemon.OpOperatorAppend, daemon.OpOperatorGet:
		what = "operator state"
	default:
		kg = fmt.Sprintf(", key group %d", op.KeyGroup)
	}
	r.Error = fmt.Sprintf("stated: %s on %s %q%s of task %s: %v", daemon.Op(op.Type), what, state, kg, a.inst.Task, err)
}

// check validates op before it reaches the backend: its operands' sizes
// and, on an instance that declared the specified key hash at Open, its
// key group.
func (a *batchApply) check(op *wire.Op) (codes.Code, error) {
	if err := checkSizes(a.inst, op); err != nil {
		return codes.ResourceExhausted, err
	}
	if a.inst.VerifyKeyGroups && keyed(op.Type) {
		if kg := protocol.KeyGroup(op.Key, a.inst.MaxParallelism); kg != int(op.KeyGroup) {
			return codes.InvalidArgument, fmt.Errorf("key group %d is not the key's: the key hash declared at open (FNV-1a, then murmur) "+
				"puts key %q in key group %d; the client computes key groups another way", op.KeyGroup, truncateKey(op.Key), kg)
		}
	}
	return codes.OK, nil
}

// keyed reports whether an operation of type t addresses a key (and so
// carries the key's group).
func keyed(t int32) bool {
	switch daemon.Op(t) {
	case daemon.OpTimerPoll, daemon.OpOperatorSet, daemon.OpOperatorAppend, daemon.OpOperatorGet:
		return false
	}
	// An unknown type is refused where it is applied.
	return t >= int32(daemon.OpGet) && t <= int32(daemon.OpOperatorGet)
}

// truncateKey keeps error messages short for long keys.
func truncateKey(k []byte) []byte {
	if len(k) > 64 {
		return k[:64]
	}
	return k
}

// checkSizes rejects operands over the instance's value size limit before
// the backend sees them.
func checkSizes(inst *daemon.Instance, op *wire.Op) error {
	limit := inst.MaxValueSize()
	check := func(what string, n int) error {
		if n > limit {
			return fmt.Errorf("%s of %d bytes exceeds the daemon's limit of %d bytes (--max-value-size)", what, n, limit)
		}
		return nil
	}
	if err := check("key", len(op.Key)); err != nil {
		return err
	}
	if err := check("namespace", len(op.Namespace)); err != nil {
		return err
	}
	if err := check("user key", len(op.UserKey)); err != nil {
		return err
	}
	if err := check("value", len(op.Value)); err != nil {
		return err
	}
	for _, v := range op.Values {
		if err := check("list element", len(v)); err != nil {
			return err
		}
	}
	return nil
}

// applyOp runs one operation into r (whose Index is set); alone says no
// earlier result used any of the budget.
func (a *batchApply) applyOp(op *wire.Op, state string, r *wire.Result, alone bool) {
	inst := a.inst
	if code, err := a.check(op); err != nil {
		a.fail(op, state, r, code, err)
		return
	}
	b := inst.Backend
	k := backend.Key{KeyGroup: int(op.KeyGroup), Key: op.Key, Namespace: op.Namespace}
	var err error
	switch daemon.Op(op.Type) {
	case daemon.OpGet:
		r.Value, r.Found, err = b.Get(state, k)
	case daemon.OpPut, daemon.OpDelete, daemon.OpListAppend, daemon.OpMapPut, daemon.OpMapRemove, daemon.OpTimerRegister:
		err = writeOp(b, op, state, k)
	case daemon.OpListGet:
		r.Values, err = b.ListGet(state, k)
	case daemon.OpMapGet:
		r.Value, r.Found, err = b.MapGet(state, k, op.UserKey)
	case daemon.OpMapContains:
		r.Found, err = b.MapContains(state, k, op.UserKey)
	case daemon.OpMapIterate:
		a.mapIterate(op, state, r, k)
		return
	case daemon.OpAggregateAdd:
		err = b.AggregateAdd(state, k, backend.Number{Type: backend.NumberType(op.NumberType), Int: op.IntValue, Float: op.FloatValue})
	case daemon.OpAggregateGet:
		var n backend.Number
		n, r.Found, err = b.AggregateGet(state, k)
		if r.Found {
			r.Number = n
		}
	case daemon.OpTimerDelete:
		err = inst.DeleteTimer(state, backend.Timer{KeyGroup: k.KeyGroup, Key: k.Key, Namespace: k.Namespace, Timestamp: op.Timestamp})
	case daemon.OpTimerPoll:
		a.pollTimers(op, state, r, alone)
		return
	case daemon.OpOperatorSet, daemon.OpOperatorAppend:
		var mode backend.OperatorStateMode
		if mode, err = protocol.OperatorModeFromPB(pb.OperatorStateMode(op.OperatorMode)); err != nil {
			break
		}
		if daemon.Op(op.Type) == daemon.OpOperatorSet {
			err = inst.OperatorSet(state, mode, op.Values)
		} else {
			err = inst.OperatorAppend(state, mode, op.Values)
		}
	case daemon.OpOperatorGet:
		var l backend.OperatorList
		l, r.Found, err = inst.OperatorGet(state)
		r.Values, r.OperatorMode = l.Elements, int32(protocol.OperatorModeToPB(l.Mode))
	default:
		err = fmt.Errorf("%w: unknown operation type %d", backend.ErrInvalidArgument, op.Type)
	}
	if err != nil {
		a.fail(op, state, r, Code(err), err)
		return
	}
	if !r.Empty() {
		if n := wire.EncodedResultSize(r); n > a.budget {
			// A read whose result does not fit: it changed nothing, so
			// fail it and let the client retry it in a smaller batch.
			a.fail(op, state, r, codes.ResourceExhausted, a.tooBig(n))
		}
	}
}

// mapIterate pages a map, cutting the page where the message budget ends
// (with more set), so a page never fails for size.
func (a *batchApply) mapIterate(op *wire.Op, state string, r *wire.Result, k backend.Key) {
	s, budget := a.s, a.budget
	limit := int(op.Limit)
	if limit <= 0 || limit > s.opts.MaxPage {
		limit = s.opts.MaxPage
	}
	var after []byte
	if len(op.UserKey) > 0 {
		after = op.UserKey
	}
	entries, more, err := a.inst.Backend.MapIterate(state, k, after, limit)
	if err != nil {
		a.fail(op, state, r, Code(err), err)
		return
	}
	// Sized with more set: a cut page sets it.
	base := wire.Result{Index: r.Index, More: true}
	used := 0
	for i, e := range entries {
		n := wire.EntrySize(e)
		if wire.EncodedResultSizeWith(&base, used+n) > budget {
			if i == 0 {
				a.fail(op, state, r, codes.ResourceExhausted,
					fmt.Errorf("map entry of %d bytes does not fit the %d-byte message limit with the rest of the batch; send the iteration in a smaller batch", n, s.opts.MaxMessageSize))
				return
			}
			entries, more = entries[:i], true
			break
		}
		used += n
	}
	r.Entries, r.More = entries, more
}

// pollTimers polls at most as many timers as fit the message budget; the
// others stay registered for the next poll (more is then set). A poll
// that cannot deliver even one timer fails with ResourceExhausted like
// any read, unless it is alone in its batch: a timer larger than the whole
// budget (a key and namespace near MaxValueSize each, with a message limit
// below twice that) is then delivered anyway, so it never blocks the
// timers behind it for good.
func (a *batchApply) pollTimers(op *wire.Op, state string, r *wire.Result, alone bool) {
	s, inst, budget := a.s, a.inst, a.budget
	limit := int(op.Limit)
	if limit <= 0 || limit > s.opts.MaxPage {
		limit = s.opts.MaxPage
	}
	base := wire.Result{Index: r.Index, More: true}
	if wire.EncodedResultSize(&base) > budget {
		a.fail(op, state, r, codes.ResourceExhausted,
			fmt.Errorf("no room for timers within the %d-byte message limit after the rest of the batch; send the poll in a smaller batch", s.opts.MaxMessageSize))
		return
	}
	ts, more, err := inst.PollTimers(state, op.Timestamp, limit, func(ts []backend.Timer) int {
		used := 0
		for i, t := range ts {
			used += wire.TimerSize(t)
			if wire.EncodedResultSizeWith(&base, used) > budget {
				if i == 0 && alone {
					return 1
				}
				return i
			}
		}
		return len(ts)
	})
	if err != nil && len(ts) == 0 {
		a.fail(op, state, r, Code(err), err)
		return
	}
	if err != nil {
		// Polled timers always go out; the error is the daemon's to log.
		s.log.Warn("timer poll", "task", inst.Task.String(), "state", state, "err", err)
	}
	if len(ts) == 0 && more {
		a.fail(op, state, r, codes.ResourceExhausted,
			fmt.Errorf("the next due timer does not fit the %d-byte message limit with the rest of the batch; send the poll in a smaller batch", s.opts.MaxMessageSize))
		return
	}
	r.Timers, r.More = ts, more
}
