package api

import (
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/statedhq/stated/api/internal/wire"
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
	orig := wire.OutBuffer(min(max(sizeHint, 64), s.opts.MaxMessageSize))
	out := s.applyTo(*orig, inst, bt)
	return wire.NewOutgoing(orig, out)
}

func (s *Server) applyTo(out []byte, inst *daemon.Instance, bt *wire.Batch) []byte {
	m := s.d.Metrics()
	m.Batches.Add(1)
	ops := bt.Ops
	if len(ops) > s.opts.MaxBatchOps {
		m.BatchesRejected.Add(1)
		r := wire.Result{Code: uint32(codes.ResourceExhausted), Error: fmt.Sprintf(
			"stated: batch %d of %s has %d operations, more than the daemon's limit of %d; none was applied",
			bt.Seq, inst.Task, len(ops), s.opts.MaxBatchOps)}
		for i := range ops {
			r.Index = uint32(i)
			out = wire.AppendResult(out, &r)
		}
		return wire.AppendResponseSeq(out, bt.Seq)
	}
	// budget bounds the payload read operations put into the response.
	budget := s.opts.MaxMessageSize
	tally := inst.Ops.Tally()
	// Reading the clock costs as much as a fast operation: time every
	// operation of small batches, every latencySample-th of large ones
	// (the histogram then samples; the counters stay exact).
	every := 1
	if len(ops) >= 4*latencySample {
		every = latencySample
	}
	for i := range ops {
		op := &ops[i]
		state, sk := inst.State(op.StateBytes)
		var r wire.Result
		timed := i%every == 0
		var t0 time.Time
		if timed {
			t0 = time.Now()
		}
		budget -= s.applyOp(inst, op, state, &r, budget)
		if timed {
			tally.Add(sk, daemon.Op(op.Type), time.Since(t0), r.Code != 0)
		} else {
			tally.Count(sk, daemon.Op(op.Type), r.Code != 0)
		}
		if !r.Empty() {
			r.Index = uint32(i)
			out = wire.AppendResult(out, &r)
		}
	}
	tally.Flush()
	return wire.AppendResponseSeq(out, bt.Seq)
}

// opError fills r with the failure of op, naming the job, task, state and
// key group.
func opError(inst *daemon.Instance, op *wire.Op, state string, r *wire.Result, code codes.Code, err error) {
	*r = wire.Result{Code: uint32(code)}
	kg, what := "", "state"
	switch daemon.Op(op.Type) {
	case daemon.OpTimerPoll:
	case daemon.OpOperatorSet, daemon.OpOperatorAppend, daemon.OpOperatorGet:
		what = "operator state"
	default:
		kg = fmt.Sprintf(", key group %d", op.KeyGroup)
	}
	r.Error = fmt.Sprintf("stated: %s on %s %q%s of task %s: %v", daemon.Op(op.Type), what, state, kg, inst.Task, err)
}

// OperatorModeFromPB maps stated.v1.OperatorStateMode to the backend's
// mode ("" for unspecified).
func OperatorModeFromPB(m pb.OperatorStateMode) (backend.OperatorStateMode, error) {
	switch m {
	case pb.OperatorStateMode_OPERATOR_STATE_MODE_UNSPECIFIED:
		return "", nil
	case pb.OperatorStateMode_OPERATOR_STATE_MODE_SPLIT:
		return backend.OperatorSplit, nil
	case pb.OperatorStateMode_OPERATOR_STATE_MODE_UNION:
		return backend.OperatorUnion, nil
	}
	return "", fmt.Errorf("%w: unknown operator state mode %d", backend.ErrInvalidArgument, m)
}

// OperatorModeToPB is the inverse of OperatorModeFromPB.
func OperatorModeToPB(m backend.OperatorStateMode) pb.OperatorStateMode {
	switch m {
	case backend.OperatorSplit:
		return pb.OperatorStateMode_OPERATOR_STATE_MODE_SPLIT
	case backend.OperatorUnion:
		return pb.OperatorStateMode_OPERATOR_STATE_MODE_UNION
	}
	return pb.OperatorStateMode_OPERATOR_STATE_MODE_UNSPECIFIED
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

// applyOp runs one operation into r and returns the response bytes it used.
func (s *Server) applyOp(inst *daemon.Instance, op *wire.Op, state string, r *wire.Result, budget int) int {
	if err := checkSizes(inst, op); err != nil {
		opError(inst, op, state, r, codes.ResourceExhausted, err)
		return len(r.Error)
	}
	b := inst.Backend
	k := backend.Key{KeyGroup: int(op.KeyGroup), Key: op.Key, Namespace: op.Namespace}
	var err error
	used := 16
	switch daemon.Op(op.Type) {
	case daemon.OpGet:
		r.Value, r.Found, err = b.Get(state, k)
		used += len(r.Value)
	case daemon.OpPut:
		err = b.Put(state, k, op.Value)
	case daemon.OpDelete:
		err = b.Delete(state, k)
	case daemon.OpListAppend:
		if len(op.Values) == 0 {
			err = fmt.Errorf("%w: list append without values", backend.ErrInvalidArgument)
			break
		}
		err = b.ListAppend(state, k, op.Values...)
	case daemon.OpListGet:
		r.Values, err = b.ListGet(state, k)
		for _, v := range r.Values {
			used += len(v) + 4
		}
	case daemon.OpMapGet:
		r.Value, r.Found, err = b.MapGet(state, k, op.UserKey)
		used += len(r.Value)
	case daemon.OpMapPut:
		err = b.MapPut(state, k, op.UserKey, op.Value)
	case daemon.OpMapRemove:
		err = b.MapRemove(state, k, op.UserKey)
	case daemon.OpMapContains:
		r.Found, err = b.MapContains(state, k, op.UserKey)
	case daemon.OpMapIterate:
		return s.mapIterate(inst, op, state, r, k, budget)
	case daemon.OpAggregateAdd:
		err = b.AggregateAdd(state, k, backend.Number{Type: backend.NumberType(op.NumberType), Int: op.IntValue, Float: op.FloatValue})
	case daemon.OpAggregateGet:
		var n backend.Number
		n, r.Found, err = b.AggregateGet(state, k)
		if r.Found {
			r.Number = n
		}
	case daemon.OpTimerRegister:
		err = b.RegisterTimer(state, backend.Timer{KeyGroup: k.KeyGroup, Key: k.Key, Namespace: k.Namespace, Timestamp: op.Timestamp})
	case daemon.OpTimerDelete:
		err = b.DeleteTimer(state, backend.Timer{KeyGroup: k.KeyGroup, Key: k.Key, Namespace: k.Namespace, Timestamp: op.Timestamp})
	case daemon.OpTimerPoll:
		limit := int(op.Limit)
		if limit <= 0 || limit > s.opts.MaxPage {
			limit = s.opts.MaxPage
		}
		// Polled timers are removed: they always go out, whatever the
		// budget (the send limit is far above it).
		r.Timers, err = b.PollTimers(state, op.Timestamp, limit)
		for _, t := range r.Timers {
			used += len(t.Key) + len(t.Namespace) + 24
		}
		if err == nil {
			return used
		}
	case daemon.OpOperatorSet, daemon.OpOperatorAppend:
		var mode backend.OperatorStateMode
		if mode, err = OperatorModeFromPB(pb.OperatorStateMode(op.OperatorMode)); err != nil {
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
		r.Values, r.OperatorMode = l.Elements, int32(OperatorModeToPB(l.Mode))
		for _, v := range r.Values {
			used += len(v) + 4
		}
	default:
		err = fmt.Errorf("%w: unknown operation type %d", backend.ErrInvalidArgument, op.Type)
	}
	if err != nil {
		opError(inst, op, state, r, Code(err), err)
		return len(r.Error)
	}
	if used > budget {
		// A read whose result does not fit: it changed nothing, so fail it
		// and let the client retry it in a smaller batch.
		opError(inst, op, state, r, codes.ResourceExhausted,
			fmt.Errorf("result of %d bytes does not fit the %d-byte message limit with the rest of the batch; send it in a smaller batch", used, s.opts.MaxMessageSize))
		return len(r.Error)
	}
	return used
}

// mapIterate pages a map, cutting the page where the message budget ends
// (with more set), so a page never fails for size.
func (s *Server) mapIterate(inst *daemon.Instance, op *wire.Op, state string, r *wire.Result, k backend.Key, budget int) int {
	limit := int(op.Limit)
	if limit <= 0 || limit > s.opts.MaxPage {
		limit = s.opts.MaxPage
	}
	var after []byte
	if len(op.UserKey) > 0 {
		after = op.UserKey
	}
	entries, more, err := inst.Backend.MapIterate(state, k, after, limit)
	if err != nil {
		opError(inst, op, state, r, Code(err), err)
		return len(r.Error)
	}
	used := 16
	for i, e := range entries {
		n := len(e.UserKey) + len(e.Value) + 8
		if used+n > budget && i > 0 {
			entries, more = entries[:i], true
			break
		}
		if used+n > budget {
			opError(inst, op, state, r, codes.ResourceExhausted,
				fmt.Errorf("map entry of %d bytes does not fit the %d-byte message limit with the rest of the batch; send the iteration in a smaller batch", n, s.opts.MaxMessageSize))
			return len(r.Error)
		}
		used += n
	}
	r.Entries, r.More = entries, more
	return used
}
