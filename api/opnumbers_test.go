package api_test

import (
	"strings"
	"testing"

	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/daemon"
)

// The daemon.Op of an operation is its wire OpType number (apply
// dispatches on daemon.Op(op.Type)), so the two numberings must not drift.
// The names come from stated.proto's descriptor: OP_TYPE_MAP_GET is
// daemon.Op "map_get".
func TestOpNumbers(t *testing.T) {
	values := pb.OpType(0).Descriptor().Values()
	inProto := map[daemon.Op]bool{}
	for i := range values.Len() {
		v := values.Get(i)
		n, name := v.Number(), string(v.Name())
		if n == 0 {
			continue // OP_TYPE_UNSPECIFIED: no operation
		}
		want := strings.ToLower(strings.TrimPrefix(name, "OP_TYPE_"))
		if n > 255 {
			t.Errorf("%s = %d does not fit daemon.Op", name, n)
			continue
		}
		op := daemon.Op(n)
		inProto[op] = true
		if got := op.String(); got != want {
			t.Errorf("%s = %d, but daemon.Op(%d) is %q, want %q", name, n, n, got, want)
		}
	}
	for n := range 256 {
		op := daemon.Op(n)
		if op.String() != "unknown" && !inProto[op] {
			t.Errorf("daemon.Op(%d) %q has no OpType in stated.proto", n, op)
		}
	}
	// The constants apply dispatches on, each with the OpType it stands
	// for (the names above pin daemon's name table; this pins its
	// constants).
	for op, typ := range map[daemon.Op]pb.OpType{
		daemon.OpGet: pb.OpType_OP_TYPE_GET, daemon.OpPut: pb.OpType_OP_TYPE_PUT,
		daemon.OpDelete: pb.OpType_OP_TYPE_DELETE, daemon.OpListAppend: pb.OpType_OP_TYPE_LIST_APPEND,
		daemon.OpListGet: pb.OpType_OP_TYPE_LIST_GET, daemon.OpMapGet: pb.OpType_OP_TYPE_MAP_GET,
		daemon.OpMapPut: pb.OpType_OP_TYPE_MAP_PUT, daemon.OpMapRemove: pb.OpType_OP_TYPE_MAP_REMOVE,
		daemon.OpMapContains: pb.OpType_OP_TYPE_MAP_CONTAINS, daemon.OpMapIterate: pb.OpType_OP_TYPE_MAP_ITERATE,
		daemon.OpAggregateAdd: pb.OpType_OP_TYPE_AGGREGATE_ADD, daemon.OpAggregateGet: pb.OpType_OP_TYPE_AGGREGATE_GET,
		daemon.OpTimerRegister: pb.OpType_OP_TYPE_TIMER_REGISTER, daemon.OpTimerDelete: pb.OpType_OP_TYPE_TIMER_DELETE,
		daemon.OpTimerPoll: pb.OpType_OP_TYPE_TIMER_POLL, daemon.OpOperatorSet: pb.OpType_OP_TYPE_OPERATOR_SET,
		daemon.OpOperatorAppend: pb.OpType_OP_TYPE_OPERATOR_APPEND, daemon.OpOperatorGet: pb.OpType_OP_TYPE_OPERATOR_GET,
	} {
		if int32(op) != int32(typ) {
			t.Errorf("the daemon.Op constant of %s is %d, want %d", typ, op, typ)
		}
	}
}
