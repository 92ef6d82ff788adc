package api

import (
	"context"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/statedhq/stated/api/internal/wire"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/daemon"
)

// FuzzBatch feeds arbitrary bytes to the server's batch decoder and, when
// they parse, applies them to a heap instance: nothing a client sends may
// panic the daemon, the response parses with the generated code, and every
// failed result says why. Each input gets a daemon of its own, so that a
// failure reproduces from its corpus entry alone.
func FuzzBatch(f *testing.F) {
	seed := func(ops ...*pb.Op) []byte {
		b, _ := proto.Marshal(&pb.BatchRequest{Seq: 1, Ops: ops})
		return b
	}
	f.Add(seed(&pb.Op{Type: pb.OpType_OP_TYPE_PUT, State: "v", KeyGroup: 3, Key: []byte("k"), Value: []byte("x")}))
	f.Add(seed(&pb.Op{Type: pb.OpType_OP_TYPE_MAP_ITERATE, State: "m", KeyGroup: 0, Limit: -5}))
	f.Add(seed(&pb.Op{Type: pb.OpType_OP_TYPE_TIMER_POLL, State: "t", Timestamp: 1 << 62}))
	f.Add(seed(&pb.Op{Type: pb.OpType_OP_TYPE_AGGREGATE_ADD, State: "a", KeyGroup: 127, NumberType: 7}))
	f.Add(seed(&pb.Op{Type: pb.OpType_OP_TYPE_LIST_APPEND, State: "l", KeyGroup: 1 << 31}))
	f.Add(seed(&pb.Op{Type: pb.OpType_OP_TYPE_OPERATOR_APPEND, State: "offsets", Values: [][]byte{[]byte("1")}, OperatorMode: 2},
		&pb.Op{Type: pb.OpType_OP_TYPE_OPERATOR_SET, State: "offsets", OperatorMode: 7},
		&pb.Op{Type: pb.OpType_OP_TYPE_OPERATOR_GET, State: "offsets"}))
	f.Add([]byte{0x22, 0xff})
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		bt, err := wire.DecodeBatch(data, nil)
		if err != nil {
			if proto.Unmarshal(data, new(pb.BatchRequest)) == nil {
				t.Fatalf("the generated code accepts a batch the server refuses: %v", err)
			}
			return
		}
		s, inst := newFuzzInstance(t)
		out := s.apply(inst, &bt, 0).Data
		if len(out) > 1<<16 {
			t.Fatalf("response of %d bytes over the 64 KiB message limit", len(out))
		}
		var resp pb.BatchResponse
		if err := proto.Unmarshal(out, &resp); err != nil {
			t.Fatalf("the response does not parse: %v", err)
		}
		if resp.GetSeq() != bt.Seq || len(resp.GetResults()) > len(bt.Ops) {
			t.Fatalf("response %d with %d results for request %d with %d ops", resp.GetSeq(), len(resp.GetResults()), bt.Seq, len(bt.Ops))
		}
		for i, r := range resp.GetResults() {
			if r.GetCode() != 0 && r.GetError() == "" {
				t.Fatalf("result %d: code %d without a message", i, r.GetCode())
			}
			if int(r.GetIndex()) >= len(bt.Ops) || (i > 0 && r.GetIndex() <= resp.GetResults()[i-1].GetIndex()) {
				t.Fatalf("result %d has index %d (of %d ops)", i, r.GetIndex(), len(bt.Ops))
			}
		}
	})
}

// newFuzzInstance opens a heap instance with one state of each kind on a
// daemon of its own (in memory but for its data directory), behind a
// server with small limits; t's cleanup shuts it all down.
func newFuzzInstance(t *testing.T) (*Server, *daemon.Instance) {
	ctx := context.Background()
	d := newTestDaemon(t, 1<<10)
	inst, err := d.Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: "j", Operator: "op"},
		KeyGroups: backend.KeyGroupRange{Start: 0, End: 63}, Kind: backend.KindHeap,
		States: []backend.StateDescriptor{
			{Name: "v", Kind: backend.KindValue}, {Name: "l", Kind: backend.KindList}, {Name: "m", Kind: backend.KindMap},
			{Name: "a", Kind: backend.KindAggregate, Aggregate: backend.AggMax, Number: backend.NumFloat64},
			{Name: "t", Kind: backend.KindTimers},
		}})
	if err != nil {
		t.Fatal(err)
	}
	return NewServer(d, ServerOptions{MaxBatchOps: 64, MaxPage: 16, MaxMessageSize: 1 << 16, Logger: quietLog}), inst
}
