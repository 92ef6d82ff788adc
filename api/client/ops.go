package client

import (
	"context"

	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
)

// The operations below return at once. key and namespace address the
// entry (namespace nil: the default one); the key group is computed from
// key. Slices passed in may be reused by the caller as soon as the call
// returns; slices in results belong to the caller.

// Get reads a value state.
func (in *Instance) Get(state string, key, ns []byte) Future[Value] {
	kg, err := in.check(state, key, ns)
	if err != nil {
		return failed[Value](in, err)
	}
	b, op, err := in.begin()
	if err != nil {
		return failed[Value](in, err)
	}
	op.Type, op.State, op.KeyGroup, op.Key, op.Namespace = pb.OpType_OP_TYPE_GET, state, kg, b.copy(key), b.copy(ns)
	return Future[Value]{b: b, i: in.commit(b, len(state)+len(key)+len(ns)), dec: decValue}
}

// Put sets a value state.
func (in *Instance) Put(state string, key, ns, value []byte) Future[struct{}] {
	kg, err := in.check(state, key, ns, value)
	if err != nil {
		return failed[struct{}](in, err)
	}
	b, op, err := in.begin()
	if err != nil {
		return failed[struct{}](in, err)
	}
	op.Type, op.State, op.KeyGroup, op.Key, op.Namespace = pb.OpType_OP_TYPE_PUT, state, kg, b.copy(key), b.copy(ns)
	op.Value = b.copy(value)
	return Future[struct{}]{b: b, i: in.commit(b, len(state)+len(key)+len(ns)+len(value)), dec: decNone}
}

// Delete clears the entry of a value, list, map or aggregate state.
func (in *Instance) Delete(state string, key, ns []byte) Future[struct{}] {
	return in.keyOnly(pb.OpType_OP_TYPE_DELETE, state, key, ns)
}

func (in *Instance) keyOnly(t pb.OpType, state string, key, ns []byte) Future[struct{}] {
	kg, err := in.check(state, key, ns)
	if err != nil {
		return failed[struct{}](in, err)
	}
	b, op, err := in.begin()
	if err != nil {
		return failed[struct{}](in, err)
	}
	op.Type, op.State, op.KeyGroup, op.Key, op.Namespace = t, state, kg, b.copy(key), b.copy(ns)
	return Future[struct{}]{b: b, i: in.commit(b, len(state)+len(key)+len(ns)), dec: decNone}
}

// ListAppend appends values to a list state without reading it.
func (in *Instance) ListAppend(state string, key, ns []byte, values ...[]byte) Future[struct{}] {
	kg, err := in.check(state, key, append([][]byte{ns}, values...)...)
	if err != nil {
		return failed[struct{}](in, err)
	}
	b, op, err := in.begin()
	if err != nil {
		return failed[struct{}](in, err)
	}
	op.Type, op.State, op.KeyGroup, op.Key, op.Namespace = pb.OpType_OP_TYPE_LIST_APPEND, state, kg, b.copy(key), b.copy(ns)
	size := len(state) + len(key) + len(ns)
	op.Values = make([][]byte, len(values))
	for i, v := range values {
		op.Values[i] = b.copy(v)
		if op.Values[i] == nil {
			op.Values[i] = []byte{}
		}
		size += len(v) + 2
	}
	return Future[struct{}]{b: b, i: in.commit(b, size), dec: decNone}
}

// ListGet reads a list state in append order.
func (in *Instance) ListGet(state string, key, ns []byte) Future[[][]byte] {
	kg, err := in.check(state, key, ns)
	if err != nil {
		return failed[[][]byte](in, err)
	}
	b, op, err := in.begin()
	if err != nil {
		return failed[[][]byte](in, err)
	}
	op.Type, op.State, op.KeyGroup, op.Key, op.Namespace = pb.OpType_OP_TYPE_LIST_GET, state, kg, b.copy(key), b.copy(ns)
	return Future[[][]byte]{b: b, i: in.commit(b, len(state)+len(key)+len(ns)), dec: decList}
}

func (in *Instance) mapOp(t pb.OpType, state string, key, ns, userKey, value []byte, limit int) (*batch, int, error) {
	kg, err := in.check(state, key, ns, userKey, value)
	if err != nil {
		return nil, 0, err
	}
	b, op, err := in.begin()
	if err != nil {
		return nil, 0, err
	}
	op.Type, op.State, op.KeyGroup, op.Key, op.Namespace = t, state, kg, b.copy(key), b.copy(ns)
	op.UserKey, op.Value, op.Limit = b.copy(userKey), b.copy(value), int32(min(limit, 1<<30))
	return b, in.commit(b, len(state)+len(key)+len(ns)+len(userKey)+len(value)), nil
}

// MapGet reads one entry of a map state.
func (in *Instance) MapGet(state string, key, ns, userKey []byte) Future[Value] {
	b, i, err := in.mapOp(pb.OpType_OP_TYPE_MAP_GET, state, key, ns, userKey, nil, 0)
	if err != nil {
		return failed[Value](in, err)
	}
	return Future[Value]{b: b, i: i, dec: decValue}
}

// MapPut sets one entry of a map state.
func (in *Instance) MapPut(state string, key, ns, userKey, value []byte) Future[struct{}] {
	b, i, err := in.mapOp(pb.OpType_OP_TYPE_MAP_PUT, state, key, ns, userKey, value, 0)
	if err != nil {
		return failed[struct{}](in, err)
	}
	return Future[struct{}]{b: b, i: i, dec: decNone}
}

// MapRemove removes one entry of a map state.
func (in *Instance) MapRemove(state string, key, ns, userKey []byte) Future[struct{}] {
	b, i, err := in.mapOp(pb.OpType_OP_TYPE_MAP_REMOVE, state, key, ns, userKey, nil, 0)
	if err != nil {
		return failed[struct{}](in, err)
	}
	return Future[struct{}]{b: b, i: i, dec: decNone}
}

// MapContains reports whether a map state has an entry for userKey.
func (in *Instance) MapContains(state string, key, ns, userKey []byte) Future[bool] {
	b, i, err := in.mapOp(pb.OpType_OP_TYPE_MAP_CONTAINS, state, key, ns, userKey, nil, 0)
	if err != nil {
		return failed[bool](in, err)
	}
	return Future[bool]{b: b, i: i, dec: decBool}
}

// MapIterate returns up to limit entries (<= 0: the daemon's page size)
// with user keys after after (nil: from the first), in bytewise order.
func (in *Instance) MapIterate(state string, key, ns, after []byte, limit int) Future[MapPage] {
	b, i, err := in.mapOp(pb.OpType_OP_TYPE_MAP_ITERATE, state, key, ns, after, nil, limit)
	if err != nil {
		return failed[MapPage](in, err)
	}
	return Future[MapPage]{b: b, i: i, dec: decPage}
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
	kg, err := in.check(state, key, ns)
	if err != nil {
		return failed[struct{}](in, err)
	}
	b, op, err := in.begin()
	if err != nil {
		return failed[struct{}](in, err)
	}
	op.Type, op.State, op.KeyGroup, op.Key, op.Namespace = pb.OpType_OP_TYPE_AGGREGATE_ADD, state, kg, b.copy(key), b.copy(ns)
	op.NumberType, op.IntValue, op.FloatValue = pb.NumberType(v.Type), v.Int, v.Float
	return Future[struct{}]{b: b, i: in.commit(b, len(state)+len(key)+len(ns)+16), dec: decNone}
}

// AggregateGet reads an aggregate state.
func (in *Instance) AggregateGet(state string, key, ns []byte) Future[Aggregate] {
	kg, err := in.check(state, key, ns)
	if err != nil {
		return failed[Aggregate](in, err)
	}
	b, op, err := in.begin()
	if err != nil {
		return failed[Aggregate](in, err)
	}
	op.Type, op.State, op.KeyGroup, op.Key, op.Namespace = pb.OpType_OP_TYPE_AGGREGATE_GET, state, kg, b.copy(key), b.copy(ns)
	return Future[Aggregate]{b: b, i: in.commit(b, len(state)+len(key)+len(ns)), dec: decAggregate}
}

// RegisterTimer adds a timer (key, namespace, timestamp); registering an
// existing one is a no-op.
func (in *Instance) RegisterTimer(state string, key, ns []byte, timestamp int64) Future[struct{}] {
	return in.timerOp(pb.OpType_OP_TYPE_TIMER_REGISTER, state, key, ns, timestamp)
}

// DeleteTimer removes a timer; removing an absent one is not an error.
func (in *Instance) DeleteTimer(state string, key, ns []byte, timestamp int64) Future[struct{}] {
	return in.timerOp(pb.OpType_OP_TYPE_TIMER_DELETE, state, key, ns, timestamp)
}

func (in *Instance) timerOp(t pb.OpType, state string, key, ns []byte, timestamp int64) Future[struct{}] {
	kg, err := in.check(state, key, ns)
	if err != nil {
		return failed[struct{}](in, err)
	}
	b, op, err := in.begin()
	if err != nil {
		return failed[struct{}](in, err)
	}
	op.Type, op.State, op.KeyGroup, op.Key, op.Namespace = t, state, kg, b.copy(key), b.copy(ns)
	op.Timestamp = timestamp
	return Future[struct{}]{b: b, i: in.commit(b, len(state)+len(key)+len(ns)+8), dec: decNone}
}

// PollTimers removes and returns up to limit (<= 0: the daemon's page
// size) timers of the state with timestamp <= watermark, in timestamp
// order.
func (in *Instance) PollTimers(state string, watermark int64, limit int) Future[[]backend.Timer] {
	b, op, err := in.begin()
	if err != nil {
		return failed[[]backend.Timer](in, err)
	}
	op.Type, op.State, op.Timestamp, op.Limit = pb.OpType_OP_TYPE_TIMER_POLL, state, watermark, int32(min(limit, 1<<30))
	return Future[[]backend.Timer]{b: b, i: in.commit(b, len(state)+16), dec: decTimers}
}
