package api_test

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api/client"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
)

// rawConn is a connection through the generated stubs only, as a client
// written from stated.proto alone would have: nothing of api/client's
// waiting.
func rawConn(t *testing.T, h *harness) pb.StatedClient {
	t.Helper()
	target, err := client.Target(h.sock)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return pb.NewStatedClient(cc)
}

func putOp(key string, value string) *pb.Op {
	kg := backend.KeyGroupForHash(client.FNV1a32([]byte(key)), backend.DefaultMaxParallelism)
	return &pb.Op{Type: pb.OpType_OP_TYPE_PUT, State: "v", KeyGroup: uint32(kg), Key: []byte(key), Value: []byte(value)}
}

func getOp(key string) *pb.Op {
	op := putOp(key, "")
	op.Type, op.Value = pb.OpType_OP_TYPE_GET, nil
	return op
}

// TestSnapshotBarrierOrdered: a client sends batches of writes, a snapshot
// barrier and more writes on its batch stream, all without waiting for a
// single response, round after round. Every checkpoint holds every write
// sent before its barrier and none sent after it: the restored state says
// so key by key. (The unary Snapshot, called the same way, missed nearly
// all of them: issue 17.)
func TestSnapshotBarrierOrdered(t *testing.T) {
	ctx := ctxT(t)
	const rounds, batches, perBatch = 30, 8, 250
	h := startDaemon(t, harnessOpts{})
	rpc := rawConn(t, h)
	tk := &pb.TaskId{Job: "order", Operator: "op", Subtask: 0}
	all := &pb.KeyGroupRange{Start: 0, End: backend.DefaultMaxParallelism - 1}
	states := []*pb.StateDescriptor{{Name: "v", Kind: pb.StateKind_STATE_KIND_VALUE}}
	for _, kind := range []pb.BackendKind{pb.BackendKind_BACKEND_KIND_FILE, pb.BackendKind_BACKEND_KIND_LSM} {
		job := "order-" + strings.ToLower(kind.String())
		tk.Job = job
		open, err := rpc.Open(ctx, &pb.OpenRequest{Task: tk, KeyGroups: all, BackendKind: kind, States: states})
		if err != nil {
			t.Fatal(err)
		}
		stream, err := rpc.Batch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seq := uint64(0)
		send := func(req *pb.BatchRequest) {
			seq++
			req.Seq = seq
			if seq == 1 {
				req.InstanceId, req.Job = open.InstanceId, job
			}
			if err := stream.Send(req); err != nil {
				t.Fatal(err)
			}
		}
		for r := 1; r <= rounds; r++ {
			for b := range batches {
				req := &pb.BatchRequest{}
				for i := range perBatch {
					req.Ops = append(req.Ops, putOp(fmt.Sprintf("k%d", b*perBatch+i), fmt.Sprint(r)))
				}
				send(req)
			}
			// The barrier rides with the last writes of the round: those
			// are in too; the writes of the next round are not.
			send(&pb.BatchRequest{Ops: []*pb.Op{putOp("last", fmt.Sprint(r))}, Snapshot: &pb.SnapshotBarrier{CheckpointId: uint64(r)}})
		}
		// Only now read every response, in order.
		for i := uint64(1); i <= seq; i++ {
			resp, err := stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if resp.Seq != i || len(resp.Results) != 0 {
				t.Fatalf("response %d: %v", i, resp)
			}
			isBarrier := i%(batches+1) == 0
			if (resp.Snapshot != nil) != isBarrier {
				t.Fatalf("response %d: snapshot outcome %v, barrier %v", i, resp.Snapshot, isBarrier)
			}
			if isBarrier && resp.Snapshot.Code != 0 {
				t.Fatalf("barrier %d: %v", i/(batches+1), resp.Snapshot)
			}
		}
		if err := stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		for r := 1; r <= rounds; r++ {
			if _, err := rpc.CompleteCheckpoint(ctx, &pb.CompleteCheckpointRequest{Job: job, CheckpointId: uint64(r)}); err != nil {
				t.Fatal(err)
			}
		}
		// Retention keeps the last few: each must hold exactly its round.
		list, err := rpc.ListCheckpoints(ctx, &pb.ListCheckpointsRequest{Job: job})
		if err != nil {
			t.Fatal(err)
		}
		checked := 0
		for _, ci := range list.Checkpoints {
			if !ci.Retained {
				continue
			}
			if ci.State != pb.CheckpointStatus_CHECKPOINT_STATUS_COMPLETED {
				t.Fatalf("checkpoint %d: state %v, status %q", ci.CheckpointId, ci.State, ci.Status)
			}
			checked++
			want := fmt.Sprint(ci.CheckpointId)
			re, err := rpc.Open(ctx, &pb.OpenRequest{Task: tk, KeyGroups: all, BackendKind: kind, States: states, Replace: true,
				Restore: &pb.RestoreSource{Source: &pb.RestoreSource_CheckpointId{CheckpointId: ci.CheckpointId}}})
			if err != nil {
				t.Fatal(err)
			}
			get := &pb.BatchRequest{InstanceId: re.InstanceId, Job: job, Seq: 1, Ops: []*pb.Op{getOp("last")}}
			for k := range batches * perBatch {
				get.Ops = append(get.Ops, getOp(fmt.Sprintf("k%d", k)))
			}
			s, err := rpc.Batch(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Send(get); err != nil {
				t.Fatal(err)
			}
			resp, err := s.Recv()
			if err != nil {
				t.Fatal(err)
			}
			_ = s.CloseSend()
			if len(resp.Results) != len(get.Ops) {
				t.Fatalf("checkpoint %d: %d of %d keys found", ci.CheckpointId, len(resp.Results), len(get.Ops))
			}
			for _, res := range resp.Results {
				if !res.Found || string(res.Value) != want {
					t.Fatalf("checkpoint %d: key %s holds %q (found %v), want round %s",
						ci.CheckpointId, get.Ops[res.Index].Key, res.Value, res.Found, want)
				}
			}
		}
		if checked == 0 {
			t.Fatal("no retained checkpoint to check")
		}
	}
}

// TestSnapshotBarrierFailures: a barrier that cannot be taken fails alone,
// in its response, and the stream goes on; one whose request's operations
// were refused is not taken (it would miss them).
func TestSnapshotBarrierFailures(t *testing.T) {
	ctx := ctxT(t)
	h := startDaemon(t, harnessOpts{})
	rpc := rawConn(t, h)
	tk := &pb.TaskId{Job: "bfail", Operator: "op", Subtask: 0}
	open, err := rpc.Open(ctx, &pb.OpenRequest{Task: tk, Parallelism: 1, BackendKind: pb.BackendKind_BACKEND_KIND_HEAP,
		States: []*pb.StateDescriptor{{Name: "v", Kind: pb.StateKind_STATE_KIND_VALUE}}})
	if err != nil {
		t.Fatal(err)
	}
	if open.MaxBatchOps <= 0 || open.MaxMessageSize <= 0 || open.StreamQueueDepth <= 0 || open.MaxPage <= 0 ||
		open.BackendKind != pb.BackendKind_BACKEND_KIND_HEAP || open.FirstBatchTimeoutMillis <= 0 || open.MaxOperatorStateBytes <= 0 {
		t.Fatalf("limits not advertised: %v", open)
	}
	s, err := rpc.Batch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exchange := func(req *pb.BatchRequest) *pb.BatchResponse {
		t.Helper()
		if err := s.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// Id 0 is invalid; the write with it is applied all the same.
	resp := exchange(&pb.BatchRequest{InstanceId: open.InstanceId, Job: tk.Job, Seq: 1, Ops: []*pb.Op{putOp("a", "1")},
		Snapshot: &pb.SnapshotBarrier{}})
	if resp.Snapshot == nil || codes.Code(resp.Snapshot.Code) != codes.InvalidArgument || !strings.Contains(resp.Snapshot.Error, "id 0") {
		t.Fatalf("barrier with id 0: %v", resp.Snapshot)
	}
	// Too many operations: none applied, so no snapshot.
	big := &pb.BatchRequest{Seq: 2, Snapshot: &pb.SnapshotBarrier{CheckpointId: 1}}
	for i := range open.MaxBatchOps + 1 {
		big.Ops = append(big.Ops, putOp(fmt.Sprint("b", i), "x"))
	}
	resp = exchange(big)
	if resp.Snapshot == nil || codes.Code(resp.Snapshot.Code) != codes.ResourceExhausted || len(resp.Results) != len(big.Ops) {
		t.Fatalf("barrier after refused operations: %v, %d results", resp.Snapshot, len(resp.Results))
	}
	// The stream is alive and id 1 still free: taken with wait, sizes known.
	resp = exchange(&pb.BatchRequest{Seq: 3, Ops: []*pb.Op{getOp("a")}, Snapshot: &pb.SnapshotBarrier{CheckpointId: 1, Wait: true}})
	if resp.Snapshot.GetCode() != 0 || resp.Snapshot.GetResult().GetFiles() == 0 || len(resp.Results) != 1 || string(resp.Results[0].Value) != "1" {
		t.Fatalf("barrier 1: %v, results %v", resp.Snapshot, resp.Results)
	}
	// A second snapshot of the same id by the same task fails alone.
	resp = exchange(&pb.BatchRequest{Seq: 4, Snapshot: &pb.SnapshotBarrier{CheckpointId: 1}})
	if codes.Code(resp.Snapshot.GetCode()) != codes.InvalidArgument {
		t.Fatalf("second barrier 1: %v", resp.Snapshot)
	}
	// The unary Snapshot refuses unless the client says it waited.
	_, err = rpc.Snapshot(ctx, &pb.SnapshotRequest{InstanceId: open.InstanceId, Job: tk.Job, CheckpointId: 2})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "barrier") {
		t.Fatalf("unary Snapshot without batches_answered: %v", err)
	}
	if _, err := rpc.Snapshot(ctx, &pb.SnapshotRequest{InstanceId: open.InstanceId, Job: tk.Job, CheckpointId: 2, BatchesAnswered: true}); err != nil {
		t.Fatal(err)
	}
	// Enums and their strings agree; a mismatch is refused.
	_, err = rpc.Open(ctx, &pb.OpenRequest{Task: &pb.TaskId{Job: "bfail", Operator: "op2"}, Parallelism: 1,
		Backend: "lsm", BackendKind: pb.BackendKind_BACKEND_KIND_HEAP})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "different backends") {
		t.Fatalf("open with disagreeing backend fields: %v", err)
	}
	if _, err := rpc.AbortCheckpoint(ctx, &pb.AbortCheckpointRequest{Job: tk.Job, CheckpointId: 2,
		ReasonCode: pb.AbortReason_ABORT_REASON_DECLINED, Reason: "disk full"}); err != nil {
		t.Fatal(err)
	}
	list, err := rpc.ListCheckpoints(ctx, &pb.ListCheckpointsRequest{Job: tk.Job})
	if err != nil {
		t.Fatal(err)
	}
	var got *pb.CheckpointInfo
	for _, ci := range list.Checkpoints {
		if ci.CheckpointId == 2 {
			got = ci
		}
	}
	if got.GetState() != pb.CheckpointStatus_CHECKPOINT_STATUS_DECLINED || got.GetStatus() != "declined" || !strings.Contains(got.GetReason(), "disk full") {
		t.Fatalf("aborted checkpoint 2: %v", got)
	}
}
