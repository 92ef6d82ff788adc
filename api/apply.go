package api

import (
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/daemon"
)

// resultOverhead approximates the framing bytes of one result entry.
const resultOverhead = 16

// apply runs every operation of req in order and returns their results.
func (s *Server) apply(inst *daemon.Instance, req *pb.BatchRequest) *pb.BatchResponse {
	m := s.d.Metrics()
	m.Batches.Add(1)
	ops := req.GetOps()
	resp := &pb.BatchResponse{Seq: req.GetSeq(), Results: make([]*pb.Result, len(ops))}
	slab := make([]pb.Result, len(ops))
	for i := range slab {
		resp.Results[i] = &slab[i]
	}
	if len(ops) > s.opts.MaxBatchOps {
		m.BatchesRejected.Add(1)
		msg := fmt.Sprintf("stated: batch %d of %s has %d operations, more than the daemon's limit of %d; none was applied",
			req.GetSeq(), inst.Task, len(ops), s.opts.MaxBatchOps)
		for i := range slab {
			slab[i].Code, slab[i].Error = uint32(codes.ResourceExhausted), msg
		}
		return resp
	}
	// budget bounds the payload read operations put into the response.
	budget := s.opts.MaxMessageSize
	tally := inst.Ops.Tally()
	t0 := time.Now()
	for i, op := range ops {
		sk := inst.StateKind(op.GetState())
		budget -= s.applyOp(inst, op, &slab[i], budget)
		t1 := time.Now()
		tally.Add(sk, daemon.Op(op.GetType()), t1.Sub(t0), slab[i].Code != 0)
		t0 = t1
	}
	tally.Flush()
	return resp
}

// opError fills r with the failure of op, naming the job, task, state and
// key group.
func opError(inst *daemon.Instance, op *pb.Op, r *pb.Result, code codes.Code, err error) {
	*r = pb.Result{Code: uint32(code)}
	kg := ""
	if op.GetType() != pb.OpType_OP_TYPE_TIMER_POLL {
		kg = fmt.Sprintf(", key group %d", op.GetKeyGroup())
	}
	r.Error = fmt.Sprintf("stated: %s on state %q%s of task %s: %v", daemon.Op(op.GetType()), op.GetState(), kg, inst.Task, err)
}

// checkSizes rejects operands over the instance's value size limit before
// the backend sees them.
func checkSizes(inst *daemon.Instance, op *pb.Op) error {
	limit := inst.MaxValueSize()
	check := func(what string, n int) error {
		if n > limit {
			return fmt.Errorf("%s of %d bytes exceeds the daemon's limit of %d bytes (--max-value-size)", what, n, limit)
		}
		return nil
	}
	if err := check("key", len(op.GetKey())); err != nil {
		return err
	}
	if err := check("namespace", len(op.GetNamespace())); err != nil {
		return err
	}
	if err := check("user key", len(op.GetUserKey())); err != nil {
		return err
	}
	if err := check("value", len(op.GetValue())); err != nil {
		return err
	}
	for _, v := range op.GetValues() {
		if err := check("list element", len(v)); err != nil {
			return err
		}
	}
	return nil
}

// applyOp runs one operation into r and returns the response bytes it used.
func (s *Server) applyOp(inst *daemon.Instance, op *pb.Op, r *pb.Result, budget int) int {
	if err := checkSizes(inst, op); err != nil {
		opError(inst, op, r, codes.ResourceExhausted, err)
		return len(r.Error)
	}
	b := inst.Backend
	state := op.GetState()
	k := backend.Key{KeyGroup: int(op.GetKeyGroup()), Key: op.GetKey(), Namespace: op.GetNamespace()}
	var err error
	used := resultOverhead
	switch op.GetType() {
	case pb.OpType_OP_TYPE_GET:
		r.Value, r.Found, err = b.Get(state, k)
		used += len(r.Value)
	case pb.OpType_OP_TYPE_PUT:
		err = b.Put(state, k, op.GetValue())
	case pb.OpType_OP_TYPE_DELETE:
		err = b.Delete(state, k)
	case pb.OpType_OP_TYPE_LIST_APPEND:
		if len(op.GetValues()) == 0 {
			err = fmt.Errorf("%w: list append without values", backend.ErrInvalidArgument)
			break
		}
		err = b.ListAppend(state, k, op.GetValues()...)
	case pb.OpType_OP_TYPE_LIST_GET:
		r.Values, err = b.ListGet(state, k)
		for _, v := range r.Values {
			used += len(v) + 4
		}
	case pb.OpType_OP_TYPE_MAP_GET:
		r.Value, r.Found, err = b.MapGet(state, k, op.GetUserKey())
		used += len(r.Value)
	case pb.OpType_OP_TYPE_MAP_PUT:
		err = b.MapPut(state, k, op.GetUserKey(), op.GetValue())
	case pb.OpType_OP_TYPE_MAP_REMOVE:
		err = b.MapRemove(state, k, op.GetUserKey())
	case pb.OpType_OP_TYPE_MAP_CONTAINS:
		r.Found, err = b.MapContains(state, k, op.GetUserKey())
	case pb.OpType_OP_TYPE_MAP_ITERATE:
		return s.mapIterate(inst, op, r, k, budget)
	case pb.OpType_OP_TYPE_AGGREGATE_ADD:
		n := backend.Number{Type: backend.NumberType(op.GetNumberType()), Int: op.GetIntValue(), Float: op.GetFloatValue()}
		err = b.AggregateAdd(state, k, n)
	case pb.OpType_OP_TYPE_AGGREGATE_GET:
		var n backend.Number
		n, r.Found, err = b.AggregateGet(state, k)
		if r.Found {
			r.NumberType, r.IntValue, r.FloatValue = pb.NumberType(n.Type), n.Int, n.Float
		}
	case pb.OpType_OP_TYPE_TIMER_REGISTER:
		err = b.RegisterTimer(state, backend.Timer{KeyGroup: k.KeyGroup, Key: k.Key, Namespace: k.Namespace, Timestamp: op.GetTimestamp()})
	case pb.OpType_OP_TYPE_TIMER_DELETE:
		err = b.DeleteTimer(state, backend.Timer{KeyGroup: k.KeyGroup, Key: k.Key, Namespace: k.Namespace, Timestamp: op.GetTimestamp()})
	case pb.OpType_OP_TYPE_TIMER_POLL:
		limit := int(op.GetLimit())
		if limit <= 0 || limit > s.opts.MaxPage {
			limit = s.opts.MaxPage
		}
		var ts []backend.Timer
		// Polled timers are removed: they always go out, whatever the
		// budget (the send limit is far above it).
		ts, err = b.PollTimers(state, op.GetTimestamp(), limit)
		if err == nil {
			r.Timers = make([]*pb.Timer, len(ts))
			for i, t := range ts {
				r.Timers[i] = &pb.Timer{KeyGroup: uint32(t.KeyGroup), Key: t.Key, Namespace: t.Namespace, Timestamp: t.Timestamp}
				used += len(t.Key) + len(t.Namespace) + 24
			}
		}
	default:
		err = fmt.Errorf("%w: unknown operation type %d", backend.ErrInvalidArgument, int32(op.GetType()))
	}
	if err != nil {
		opError(inst, op, r, Code(err), err)
		return len(r.Error)
	}
	if used > budget && op.GetType() != pb.OpType_OP_TYPE_TIMER_POLL {
		// A read whose result does not fit: it changed nothing, so fail it
		// and let the client retry it in a smaller batch.
		opError(inst, op, r, codes.ResourceExhausted,
			fmt.Errorf("result of %d bytes does not fit the %d-byte message limit with the rest of the batch; send it in a smaller batch", used, s.opts.MaxMessageSize))
		return len(r.Error)
	}
	return used
}

// mapIterate pages a map, cutting the page where the message budget ends
// (with more set), so a page never fails for size.
func (s *Server) mapIterate(inst *daemon.Instance, op *pb.Op, r *pb.Result, k backend.Key, budget int) int {
	limit := int(op.GetLimit())
	if limit <= 0 || limit > s.opts.MaxPage {
		limit = s.opts.MaxPage
	}
	var after []byte
	if len(op.GetUserKey()) > 0 {
		after = op.GetUserKey()
	}
	entries, more, err := inst.Backend.MapIterate(op.GetState(), k, after, limit)
	if err != nil {
		opError(inst, op, r, Code(err), err)
		return len(r.Error)
	}
	used := resultOverhead
	r.Entries = make([]*pb.MapEntry, 0, len(entries))
	for i, e := range entries {
		n := len(e.UserKey) + len(e.Value) + 8
		if used+n > budget && i > 0 {
			more = true
			break
		}
		if used+n > budget {
			opError(inst, op, r, codes.ResourceExhausted,
				fmt.Errorf("map entry of %d bytes does not fit the %d-byte message limit with the rest of the batch; send the iteration in a smaller batch", n, s.opts.MaxMessageSize))
			return len(r.Error)
		}
		used += n
		r.Entries = append(r.Entries, &pb.MapEntry{UserKey: e.UserKey, Value: e.Value})
	}
	r.More = more
	return used
}
