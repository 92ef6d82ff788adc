package api_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/statedhq/stated/api/statedpb"
)

// TestDocumentedBehaviours pins what docs/protocol.md tells a client
// author (issue 37, item 5), through the wire: a timer registered twice
// fires once; union lists come back whole to every subtask also at the
// same parallelism, split lists to their own subtask; the heap snapshot
// cap shows at completion, not at the barrier.
func TestDocumentedBehaviours(t *testing.T) {
	ctx := ctxT(t)
	h := startDaemon(t, harnessOpts{})
	rpc := rawConn(t, h)
	states := []*pb.StateDescriptor{{Name: "v", Kind: pb.StateKind_STATE_KIND_VALUE}, {Name: "t", Kind: pb.StateKind_STATE_KIND_TIMERS}}

	t.Run("timer registered twice fires once", func(t *testing.T) {
		_, ws := openWire(t, rpc, &pb.OpenRequest{Task: &pb.TaskId{Job: "twice", Operator: "op"}, Parallelism: 1,
			BackendKind: pb.BackendKind_BACKEND_KIND_FILE, States: states})
		reg := &pb.Op{Type: pb.OpType_OP_TYPE_TIMER_REGISTER, State: "t", KeyGroup: uint32(keyGroupOf("k")), Key: []byte("k"), Timestamp: 5}
		res, _ := ws.do(&pb.BatchRequest{Ops: []*pb.Op{reg, reg, {Type: pb.OpType_OP_TYPE_TIMER_POLL, State: "t", Timestamp: 10}}})
		if len(res[2].Timers) != 1 || res[2].More {
			t.Fatalf("poll: %v", res[2])
		}
	})

	t.Run("operator state on a restore at the same parallelism", func(t *testing.T) {
		const job = "opstate"
		var streams []*wireStream
		for sub := range 2 {
			tk := &pb.TaskId{Job: job, Operator: "op", Subtask: int32(sub)}
			_, ws := openWire(t, rpc, &pb.OpenRequest{Task: tk, Parallelism: 2, BackendKind: pb.BackendKind_BACKEND_KIND_FILE, States: states})
			streams = append(streams, ws)
			res, resp := ws.do(&pb.BatchRequest{Ops: []*pb.Op{
				{Type: pb.OpType_OP_TYPE_OPERATOR_SET, State: "u", Values: [][]byte{[]byte(fmt.Sprint("u", sub))}, OperatorMode: pb.OperatorStateMode_OPERATOR_STATE_MODE_UNION},
				{Type: pb.OpType_OP_TYPE_OPERATOR_SET, State: "s", Values: [][]byte{[]byte(fmt.Sprint("s", sub))}, OperatorMode: pb.OperatorStateMode_OPERATOR_STATE_MODE_SPLIT},
			}, Snapshot: &pb.SnapshotBarrier{CheckpointId: 1}})
			if res[0].Code != 0 || res[1].Code != 0 || resp.Snapshot.GetCode() != 0 {
				t.Fatal(res, resp.Snapshot)
			}
		}
		if _, err := rpc.CompleteCheckpoint(ctx, &pb.CompleteCheckpointRequest{Job: job, CheckpointId: 1}); err != nil {
			t.Fatal(err)
		}
		for sub := range 2 {
			tk := &pb.TaskId{Job: job, Operator: "op", Subtask: int32(sub)}
			_, ws := openWire(t, rpc, &pb.OpenRequest{Task: tk, Parallelism: 2, BackendKind: pb.BackendKind_BACKEND_KIND_FILE, States: states,
				Replace: true, Restore: &pb.RestoreSource{Source: &pb.RestoreSource_Latest{Latest: true}}})
			res, _ := ws.do(&pb.BatchRequest{Ops: []*pb.Op{{Type: pb.OpType_OP_TYPE_OPERATOR_GET, State: "u"}, {Type: pb.OpType_OP_TYPE_OPERATOR_GET, State: "s"}}})
			if got := string(bytes.Join(res[0].Values, []byte(","))); got != "u0,u1" {
				t.Errorf("subtask %d: union list %q, want every subtask's elements", sub, got)
			}
			if got := string(bytes.Join(res[1].Values, []byte(","))); got != fmt.Sprint("s", sub) {
				t.Errorf("subtask %d: split list %q, want its own", sub, got)
			}
		}
	})

	t.Run("heap snapshot cap shows at completion", func(t *testing.T) {
		const job = "heapcap"
		tk := &pb.TaskId{Job: job, Operator: "op"}
		_, ws := openWire(t, rpc, &pb.OpenRequest{Task: tk, Parallelism: 1, BackendKind: pb.BackendKind_BACKEND_KIND_HEAP, States: states})
		value := strings.Repeat("x", 1<<20)
		for i := range 6 { // 6 MiB, past the 5 MiB default cap
			if res, _ := ws.do(&pb.BatchRequest{Ops: []*pb.Op{putOp(fmt.Sprint("big", i), value)}}); res[0].Code != 0 {
				t.Fatal(res[0])
			}
		}
		if _, resp := ws.do(&pb.BatchRequest{Snapshot: &pb.SnapshotBarrier{CheckpointId: 1}}); resp.Snapshot.GetCode() != 0 {
			t.Fatalf("barrier: %v (the cap should show at completion)", resp.Snapshot)
		}
		_, err := rpc.CompleteCheckpoint(ctx, &pb.CompleteCheckpointRequest{Job: job, CheckpointId: 1})
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("complete: %v, want FAILED_PRECONDITION", err)
		}
		if msg := status.Convert(err).Message(); !strings.Contains(msg, "heapcap/op/0") || !strings.Contains(msg, "cap on heap snapshots") {
			t.Fatalf("complete: %q does not name the task and the cap", msg)
		}
	})
}
