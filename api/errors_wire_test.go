package api_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api"
	pb "github.com/statedhq/stated/api/statedpb"
)

// expectMessage checks a code and that msg names each of want and none of
// notWant.
func expectMessage(t *testing.T, what string, code, wantCode codes.Code, msg string, want []string, notWant ...string) {
	t.Helper()
	if code != wantCode {
		t.Fatalf("%s: code %v (%s), want %v", what, code, msg, wantCode)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("%s: message %q does not name %q", what, msg, w)
		}
	}
	for _, w := range notWant {
		if strings.Contains(msg, w) {
			t.Errorf("%s: message %q says %q", what, msg, w)
		}
	}
}

// TestErrorMessagesNameTheProblem (issue 37, item 4): each error a client
// written from the proto met names what was wrong and what to do, with the
// right code. Raw gRPC.
func TestErrorMessagesNameTheProblem(t *testing.T) {
	ctx := ctxT(t)
	h := startDaemon(t, harnessOpts{server: api.ServerOptions{MaxMessageSize: 256 << 10}})
	rpc := rawConn(t, h)
	states := []*pb.StateDescriptor{{Name: "v", Kind: pb.StateKind_STATE_KIND_VALUE},
		{Name: "sum", Kind: pb.StateKind_STATE_KIND_AGGREGATE, Aggregate: pb.AggregateFunc_AGGREGATE_FUNC_SUM, Number: pb.NumberType_NUMBER_TYPE_INT64}}
	tk := &pb.TaskId{Job: "errs", Operator: "op"}
	open, ws := openWire(t, rpc, &pb.OpenRequest{Task: tk, Parallelism: 2, BackendKind: pb.BackendKind_BACKEND_KIND_HEAP,
		States: states, KeyHash: pb.KeyHash_KEY_HASH_FNV1A_MURMUR})

	t.Run("key group out of range", func(t *testing.T) {
		res, _ := ws.do(&pb.BatchRequest{Ops: []*pb.Op{
			{Type: pb.OpType_OP_TYPE_PUT, State: "v", KeyGroup: 128, Key: []byte("k"), Value: []byte("x")},
			{Type: pb.OpType_OP_TYPE_PUT, State: "v", KeyGroup: 100, Key: []byte("k"), Value: []byte("x")},
		}})
		expectMessage(t, "key group 128 of max 128", codes.Code(res[0].Code), codes.InvalidArgument, res[0].Error,
			[]string{"key group 128 is out of range", "[0,128)", "max_parallelism"}, "another way")
		expectMessage(t, "key group 100 of a [0,63] instance", codes.Code(res[1].Code), codes.InvalidArgument, res[1].Error,
			[]string{"key group 100 is outside this instance's range [0,63]", "subtask that owns it"}, "another way")
	})
	t.Run("aggregate add without number type", func(t *testing.T) {
		key := 0
		for keyGroupOf(fmt.Sprint("k", key)) > int(open.KeyGroups.End) {
			key++
		}
		op := putOp(fmt.Sprint("k", key), "")
		op.Type, op.State, op.Value, op.IntValue = pb.OpType_OP_TYPE_AGGREGATE_ADD, "sum", nil, 3
		res, _ := ws.do(&pb.BatchRequest{Ops: []*pb.Op{op}})
		expectMessage(t, "aggregate add", codes.Code(res[0].Code), codes.InvalidArgument, res[0].Error,
			[]string{"without number_type", "NUMBER_TYPE_INT64", `"sum"`}, "number(0)")
	})
	t.Run("barrier below the last completed checkpoint", func(t *testing.T) {
		for _, id := range []uint64{6} {
			_, resp := ws.do(&pb.BatchRequest{Snapshot: &pb.SnapshotBarrier{CheckpointId: id}})
			if resp.Snapshot.GetCode() != 0 {
				t.Fatal(resp.Snapshot)
			}
		}
		if _, err := rpc.CompleteCheckpoint(ctx, &pb.CompleteCheckpointRequest{Job: tk.Job, CheckpointId: 6, Tasks: []*pb.TaskId{tk}}); err != nil {
			t.Fatal(err)
		}
		_, resp := ws.do(&pb.BatchRequest{Snapshot: &pb.SnapshotBarrier{CheckpointId: 3}})
		expectMessage(t, "barrier 3 after 6", codes.Code(resp.Snapshot.GetCode()), codes.FailedPrecondition, resp.Snapshot.GetError(),
			[]string{"checkpoint 3 of job errs", "already completed checkpoint 6", "above 6"})
		_, err := rpc.AbortCheckpoint(ctx, &pb.AbortCheckpointRequest{Job: tk.Job, CheckpointId: 3})
		expectMessage(t, "abort 3 after 6", status.Code(err), codes.FailedPrecondition, status.Convert(err).Message(),
			[]string{"abort checkpoint 3", "completed checkpoint 6"})
	})
	t.Run("open", func(t *testing.T) {
		base := func(op string) *pb.OpenRequest {
			return &pb.OpenRequest{Task: &pb.TaskId{Job: "errs-open", Operator: op}, Parallelism: 1,
				BackendKind: pb.BackendKind_BACKEND_KIND_HEAP, States: states}
		}
		req := base("nokind")
		req.States = []*pb.StateDescriptor{{Name: "s"}}
		_, err := rpc.Open(ctx, req)
		expectMessage(t, "state with no kind", status.Code(err), codes.InvalidArgument, status.Convert(err).Message(),
			[]string{`state "s" has no kind`, "STATE_KIND_VALUE"}, "kind(0)")
		req = base("noagg")
		req.States = []*pb.StateDescriptor{{Name: "a", Kind: pb.StateKind_STATE_KIND_AGGREGATE}}
		_, err = rpc.Open(ctx, req)
		expectMessage(t, "aggregate with no function or number", status.Code(err), codes.InvalidArgument, status.Convert(err).Message(),
			[]string{"AGGREGATE_FUNC_SUM", "NUMBER_TYPE_INT64"}, "number(0)")
		req = base("nobackend")
		req.BackendKind = pb.BackendKind_BACKEND_KIND_UNSPECIFIED
		_, err = rpc.Open(ctx, req)
		expectMessage(t, "no backend", status.Code(err), codes.InvalidArgument, status.Convert(err).Message(),
			[]string{"no backend", "backend_kind", "BACKEND_KIND_FILE"}, `unknown backend ""`)
	})
	t.Run("oversized request", func(t *testing.T) {
		// gRPC refuses a request over the receive limit and writes the
		// status itself before the handler hears of it, so the message is
		// gRPC's: it names the size and the limit (docs/protocol.md says
		// what to do), and the stream ends.
		_, big := openWire(t, rpc, &pb.OpenRequest{Task: &pb.TaskId{Job: "errs-big", Operator: "op"}, Parallelism: 1,
			BackendKind: pb.BackendKind_BACKEND_KIND_HEAP, States: states})
		big.send(&pb.BatchRequest{Ops: []*pb.Op{putOp("k", string(bytes.Repeat([]byte{'x'}, 300<<10)))}})
		_, err := big.stream.Recv()
		expectMessage(t, "oversized request", status.Code(err), codes.ResourceExhausted, status.Convert(err).Message(),
			[]string{fmt.Sprint(256 << 10)})
	})
}

// TestRestoreWithoutHandlesForKeyGroups (issue 37): a rescaling restore
// from a checkpoint that holds only some subtasks of the operator fails
// with FAILED_PRECONDITION (it was INVALID_ARGUMENT, which the request did
// not deserve) and lists the key groups no handle holds.
func TestRestoreWithoutHandlesForKeyGroups(t *testing.T) {
	ctx := ctxT(t)
	h := startDaemon(t, harnessOpts{})
	rpc := rawConn(t, h)
	const job = "partial"
	states := []*pb.StateDescriptor{{Name: "v", Kind: pb.StateKind_STATE_KIND_VALUE}}
	t0 := &pb.TaskId{Job: job, Operator: "op", Subtask: 0}
	_, ws := openWire(t, rpc, &pb.OpenRequest{Task: t0, Parallelism: 2, BackendKind: pb.BackendKind_BACKEND_KIND_FILE, States: states})
	if _, resp := ws.do(&pb.BatchRequest{Snapshot: &pb.SnapshotBarrier{CheckpointId: 1}}); resp.Snapshot.GetCode() != 0 {
		t.Fatal(resp.Snapshot)
	}
	// Only subtask 0 of 2 is in the checkpoint.
	if _, err := rpc.CompleteCheckpoint(ctx, &pb.CompleteCheckpointRequest{Job: job, CheckpointId: 1, Tasks: []*pb.TaskId{t0}}); err != nil {
		t.Fatal(err)
	}
	_, err := rpc.Open(ctx, &pb.OpenRequest{Task: &pb.TaskId{Job: job, Operator: "op", Subtask: 1}, Parallelism: 3,
		BackendKind: pb.BackendKind_BACKEND_KIND_FILE, States: states,
		Restore: &pb.RestoreSource{Source: &pb.RestoreSource_Latest{Latest: true}}})
	expectMessage(t, "rescale without every handle", status.Code(err), codes.FailedPrecondition, status.Convert(err).Message(),
		[]string{"no handle of the checkpoint holds key groups [64,127]", "partial/op/0 [0,63]", "every subtask"})
	_, err = rpc.PlanRescale(ctx, &pb.PlanRescaleRequest{Job: job, Operator: "op", NewParallelism: 3})
	expectMessage(t, "plan of a rescale without every handle", status.Code(err), codes.FailedPrecondition, status.Convert(err).Message(),
		[]string{"key groups [64,127]"})
}
