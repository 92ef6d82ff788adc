package client

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api/internal/wire"
	"github.com/statedhq/stated/api/protocol"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
)

// The operations below return at once. key and namespace address the
// entry (namespace nil: the default one); the key group is computed from
// key. Slices passed in may be reused by the caller as soon as the call
// returns (they are encoded at once); slices in results belong to the
// caller.

// issue checks op locally, encodes it and returns its future.
func issue[T any](in *Instance, op *wire.Op, dec func(*wire.Result) (T, error), operands ...[]byte) Future[T] {
	switch pb.OpType(op.Type) {
	case pb.OpType_OP_TYPE_TIMER_POLL:
	case pb.OpType_OP_TYPE_OPERATOR_SET, pb.OpType_OP_TYPE_OPERATOR_APPEND, pb.OpType_OP_TYPE_OPERATOR_GET:
		// Not keyed: no key group to check.
		if err := in.checkSizes(op.State, op.Values); err != nil {
			return failed[T](in, err)
		}
	default:
		kg, err := in.check(op.State, op.Key, operands...)
		if err == nil {
			// List elements are operands too.
			err = in.checkSizes(op.State, op.Values)
		}
		if err != nil {
			return failed[T](in, err)
		}
		op.KeyGroup = kg
	}
	b, i, err := in.add(op)
	if err != nil {
		return failed[T](in, err)
	}
	return Future[T]{b: b, i: i, dec: dec}
}

// Get reads a value state.
func (in *Instance) Get(state string, key, ns []byte) Future[Value] {
	op := wire.Op{Type: int32(pb.OpType_OP_TYPE_GET), State: state, Key: key, Namespace: ns}
	return issue(in, &op, decValue, ns)
}

// Put sets a value state.
func (in *Instance) Put(state string, key, ns, value []byte) Future[struct{}] {
	op := wire.Op{Type: int32(pb.OpType_OP_TYPE_PUT), State: state, Key: key, Namespace: ns, Value: value}
	return issue(in, &op, decNone, ns, value)
}

// Delete clears the entry of a value, list, map or aggregate state.
func (in *Instance) Delete(state string, key, ns []byte) Future[struct{}] {
	op := wire.Op{Type: int32(pb.OpType_OP_TYPE_DELETE), State: state, Key: key, Namespace: ns}
	return issue(in, &op, decNone, ns)
}

// ListAppend appends values to a list state without reading it.
func (in *Instance) ListAppend(state string, key, ns []byte, values ...[]byte) Future[struct{}] {
	op := wire.Op{Type: int32(pb.OpType_OP_TYPE_LIST_APPEND), State: state, Key: key, Namespace: ns, Values: values}
	return issue(in, &op, decNone, ns)
}

// ListGet reads a list state in append order.
func (in *Instance) ListGet(state string, key, ns []byte) Future[[][]byte] {
	op := wire.Op{Type: int32(pb.OpType_OP_TYPE_LIST_GET), State: state, Key: key, Namespace: ns}
	return issue(in, &op, decList, ns)
}

// MapGet reads one entry of a map state.
func (in *Instance) MapGet(state string, key, ns, userKey []byte) Future[Value] {
	op := wire.Op{Type: int32(pb.OpType_OP_TYPE_MAP_GET), State: state, Key: key, Namespace: ns, UserKey: userKey}
	return issue(in, &op, decValue, ns, userKey)
}

// MapPut sets one entry of a map state.
func (in *Instance) MapPut(state string, key, ns, userKey, value []byte) Future[struct{}] {
	op := wire.Op{Type: int32(pb.OpType_OP_TYPE_MAP_PUT), State: state, Key: key, Namespace: ns, UserKey: userKey, Value: value}
	return issue(in, &op, decNone, ns, userKey, value)
}

// MapRemove removes one entry of a map state.
func (in *Instance) MapRemove(state string, key, ns, userKey []byte) Future[struct{}] {
	op := wire.Op{Type: int32(pb.OpType_OP_TYPE_MAP_REMOVE), State: state, Key: key, Namespace: ns, UserKey: userKey}
	return issue(in, &op, decNone, ns, userKey)
}

// MapContains reports whether a map state has an entry for userKey.
func (in *Instance) MapContains(state string, key, ns, userKey []byte) Future[bool] {
	op := wire.Op{Type: int32(pb.OpType_OP_TYPE_MAP_CONTAINS), State: state, Key: key, Namespace: ns, UserKey: userKey}
	return issue(in, &op, decBool, ns, userKey)
}

// MapIterate returns up to limit entries (<= 0: the daemon's page size)
// with user keys after after (nil: from the first), in bytewise order.
func (in *Instance) MapIterate(state string, key, ns, after []byte, limit int) Future[MapPage] {
	op := wire.Op{Type: int32(pb.OpType_OP_TYPE_MAP_ITERATE), State: state, Key: key, Namespace: ns, UserKey: after,
		Limit: int32(min(limit, 1<<30))}
	return issue(in, &op, decPage, ns, after)
}

// MapAll reads a whole map state page by page (a blocking helper).
func (in *Instance) MapAll(ctx context.Context, state string, key, ns []byte) ([]backend.MapEntry, error) {
	var out []backend.MapEntry
	var after []byte
	for {
		p, err := in.MapIterate(state, key, ns, after, 0).Wait(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Entries...)
		if !p.More || len(p.Entries) == 0 {
			return out, nil
		}
		after = p.Entries[len(p.Entries)-1].UserKey
	}
}

// AggregateAdd merges v into an aggregate state; v must have the state's
// number type.
func (in *Instance) AggregateAdd(state string, key, ns []byte, v backend.Number) Future[struct{}] {
	op := wire.Op{Type: int32(pb.OpType_OP_TYPE_AGGREGATE_ADD), State: state, Key: key, Namespace: ns,
		NumberType: int32(v.Type), IntValue: v.Int, FloatValue: v.Float}
	return issue(in, &op, decNone, ns)
}

// AggregateGet reads an aggregate state.
func (in *Instance) AggregateGet(state string, key, ns []byte) Future[Aggregate] {
	op := wire.Op{Type: int32(pb.OpType_OP_TYPE_AGGREGATE_GET), State: state, Key: key, Namespace: ns}
	return issue(in, &op, decAggregate, ns)
}

// RegisterTimer adds a timer (key, namespace, timestamp); registering an
// existing one is a no-op.
func (in *Instance) RegisterTimer(state string, key, ns []byte, timestamp int64) Future[struct{}] {
	op := wire.Op{Type: int32(pb.OpType_OP_TYPE_TIMER_REGISTER), State: state, Key: key, Namespace: ns, Timestamp: timestamp}
	return issue(in, &op, decNone, ns)
}

// DeleteTimer removes a timer; removing an absent one is not an error.
func (in *Instance) DeleteTimer(state string, key, ns []byte, timestamp int64) Future[struct{}] {
	op := wire.Op{Type: int32(pb.OpType_OP_TYPE_TIMER_DELETE), State: state, Key: key, Namespace: ns, Timestamp: timestamp}
	return issue(in, &op, decNone, ns)
}

// PollTimers removes and returns up to limit (<= 0: the daemon's page
// size) timers of the state with timestamp <= watermark, in timestamp
// order. Fewer come back when more would not fit the daemon's message
// limit; those stay registered: poll until a poll returns none, or use
// PollTimerPage and poll while More is set.
func (in *Instance) PollTimers(state string, watermark int64, limit int) Future[[]backend.Timer] {
	op := wire.Op{Type: int32(pb.OpType_OP_TYPE_TIMER_POLL), State: state, Timestamp: watermark, Limit: int32(min(limit, 1<<30))}
	return issue(in, &op, decTimers)
}

// TimerPage is one TIMER_POLL's answer.
type TimerPage struct {
	Timers []backend.Timer
	// More: due timers remain (the page was full, or cut at the message
	// limit); poll again with the same watermark.
	More bool
}

// PollTimerPage is PollTimers with the daemon's More: a client that polls
// while More is set fires every due timer without an extra empty poll.
func (in *Instance) PollTimerPage(state string, watermark int64, limit int) Future[TimerPage] {
	op := wire.Op{Type: int32(pb.OpType_OP_TYPE_TIMER_POLL), State: state, Timestamp: watermark, Limit: int32(min(limit, 1<<30))}
	return issue(in, &op, func(r *wire.Result) (TimerPage, error) {
		if err := resultErr(r); err != nil {
			return TimerPage{}, err
		}
		return TimerPage{Timers: r.Timers, More: r.More}, nil
	})
}

// Operator (non-keyed) state: named lists of the instance, kept by the
// daemon, carried by every snapshot and restored on Open; after a change of
// parallelism a split list's elements are dealt out round-robin to the new
// subtasks, and every new subtask gets all elements of a union list. All
// lists of an instance hold at most backend.MaxOperatorStateBytes.

// SetOperatorList replaces operator list name with values; no values
// removes it. mode "" keeps the list's mode (split for a new list).
func (in *Instance) SetOperatorList(name string, mode backend.OperatorStateMode, values ...[]byte) Future[struct{}] {
	op := wire.Op{Type: int32(pb.OpType_OP_TYPE_OPERATOR_SET), State: name, Values: values, OperatorMode: int32(protocol.OperatorModeToPB(mode))}
	if err := checkMode(mode); err != nil {
		return failed[struct{}](in, err)
	}
	return issue(in, &op, decNone)
}

// AppendOperatorList appends values to operator list name, creating it
// with mode (split if "") if needed; a mode other than the list's fails.
func (in *Instance) AppendOperatorList(name string, mode backend.OperatorStateMode, values ...[]byte) Future[struct{}] {
	op := wire.Op{Type: int32(pb.OpType_OP_TYPE_OPERATOR_APPEND), State: name, Values: values, OperatorMode: int32(protocol.OperatorModeToPB(mode))}
	if err := checkMode(mode); err != nil {
		return failed[struct{}](in, err)
	}
	return issue(in, &op, decNone)
}

// GetOperatorList reads operator list name: its elements in order and its
// mode (Mode "" and no elements if the instance has no such list).
func (in *Instance) GetOperatorList(name string) Future[backend.OperatorList] {
	op := wire.Op{Type: int32(pb.OpType_OP_TYPE_OPERATOR_GET), State: name}
	return issue(in, &op, func(r *wire.Result) (backend.OperatorList, error) {
		if err := resultErr(r); err != nil {
			return backend.OperatorList{}, err
		}
		l := backend.OperatorList{Name: name}
		if r.Found {
			mode, err := protocol.OperatorModeFromPB(pb.OperatorStateMode(r.OperatorMode))
			if err != nil {
				return backend.OperatorList{}, status.Errorf(codes.Internal, "client: operator state %q: %v", name, err)
			}
			l.Mode, l.Elements = mode, r.Values
		}
		return l, nil
	})
}

func checkMode(mode backend.OperatorStateMode) error {
	if mode != "" && mode != backend.OperatorSplit && mode != backend.OperatorUnion {
		return status.Errorf(codes.InvalidArgument, "client: operator state mode %q (want split, union or empty)", mode)
	}
	return nil
}
