package api_test

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/statedhq/stated/api/statedpb"
)

// TestSavepointAfterUnansweredBatches (issue 37): a TriggerSavepoint sent
// behind batch requests not answered yet is refused (it would miss them,
// as the unary Snapshot would); once every response has arrived, the
// savepoint with batches_answered holds every write sent before it, in
// both formats. Raw gRPC.
func TestSavepointAfterUnansweredBatches(t *testing.T) {
	ctx := ctxT(t)
	h := startDaemon(t, harnessOpts{})
	rpc := rawConn(t, h)
	const job, batches, perBatch = "savepoint-order", 5, 4000
	states := []*pb.StateDescriptor{{Name: "v", Kind: pb.StateKind_STATE_KIND_VALUE}}
	tk := &pb.TaskId{Job: job, Operator: "op"}
	_, ws := openWire(t, rpc, &pb.OpenRequest{Task: tk, Parallelism: 1, BackendKind: pb.BackendKind_BACKEND_KIND_LSM, States: states})
	for b := range batches {
		req := &pb.BatchRequest{}
		for i := range perBatch {
			req.Ops = append(req.Ops, putOp(fmt.Sprintf("k%d", b*perBatch+i), "before"))
		}
		ws.send(req)
	}
	// Nothing answered yet: the savepoint could not see these writes.
	_, err := rpc.TriggerSavepoint(ctx, &pb.TriggerSavepointRequest{Job: job})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("savepoint behind unanswered batches: %v, want FAILED_PRECONDITION", err)
	}
	for range batches {
		if resp := ws.recv(); len(resp.Results) != 0 {
			t.Fatalf("puts: %v", resp.Results)
		}
	}
	for i, format := range []pb.SavepointFormat{pb.SavepointFormat_SAVEPOINT_FORMAT_CANONICAL, pb.SavepointFormat_SAVEPOINT_FORMAT_NATIVE} {
		sp, err := rpc.TriggerSavepoint(ctx, &pb.TriggerSavepointRequest{Job: job, Format: format, BatchesAnswered: true,
			CheckpointId: uint64(10 + i)})
		if err != nil {
			t.Fatal(err)
		}
		to := &pb.TaskId{Job: fmt.Sprintf("from-savepoint-%d", i), Operator: "op"}
		open, rs := openWire(t, rpc, &pb.OpenRequest{Task: to, Parallelism: 1, BackendKind: pb.BackendKind_BACKEND_KIND_LSM, States: states,
			Restore: &pb.RestoreSource{Source: &pb.RestoreSource_Savepoint{Savepoint: sp.Path}}})
		// It reports the checkpoint id the savepoint recorded, which is
		// the source job's; the new job has completed none of its own.
		if open.RestoredCheckpointId != uint64(10+i) || open.LastCompletedCheckpointId != 0 {
			t.Fatalf("%v savepoint: restored_checkpoint_id %d, last_completed_checkpoint_id %d; want %d, 0",
				format, open.RestoredCheckpointId, open.LastCompletedCheckpointId, 10+i)
		}
		get := &pb.BatchRequest{}
		for k := range batches * perBatch {
			get.Ops = append(get.Ops, getOp(fmt.Sprintf("k%d", k)))
		}
		missing := 0
		for start := 0; start < len(get.Ops); start += 5000 {
			res, _ := rs.do(&pb.BatchRequest{Ops: get.Ops[start:min(start+5000, len(get.Ops))]})
			for _, r := range res {
				if r.Code != 0 || string(r.Value) != "before" {
					missing++
				}
			}
		}
		if missing != 0 {
			t.Fatalf("%v savepoint: %d of %d writes sent before it missing", format, missing, batches*perBatch)
		}
	}
}
