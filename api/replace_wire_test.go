package api_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/statedhq/stated/api/statedpb"
)

// TestFailedReplaceLeavesInstance (issue 37): an Open with replace that
// fails (a restore at another max parallelism, a checkpoint that does not
// exist, a bad state descriptor) leaves the instance it was to replace
// open and working; only a successful replace closes it. Raw gRPC.
func TestFailedReplaceLeavesInstance(t *testing.T) {
	ctx := ctxT(t)
	h := startDaemon(t, harnessOpts{})
	rpc := rawConn(t, h)
	states := []*pb.StateDescriptor{{Name: "v", Kind: pb.StateKind_STATE_KIND_VALUE}}
	for _, kind := range []pb.BackendKind{pb.BackendKind_BACKEND_KIND_FILE, pb.BackendKind_BACKEND_KIND_LSM} {
		job := "replace-" + kind.String()
		tk := &pb.TaskId{Job: job, Operator: "op"}
		spec := func() *pb.OpenRequest {
			return &pb.OpenRequest{Task: tk, Parallelism: 1, BackendKind: kind, States: states}
		}
		_, ws := openWire(t, rpc, spec())
		res, resp := ws.do(&pb.BatchRequest{Ops: []*pb.Op{putOp("a", "1")}, Snapshot: &pb.SnapshotBarrier{CheckpointId: 1}})
		if res[0].Code != 0 || resp.Snapshot.GetCode() != 0 {
			t.Fatalf("put and barrier: %v, %v", res[0], resp.Snapshot)
		}
		if _, err := rpc.CompleteCheckpoint(ctx, &pb.CompleteCheckpointRequest{Job: job, CheckpointId: 1,
			Tasks: []*pb.TaskId{tk}}); err != nil {
			t.Fatal(err)
		}
		ws.do(&pb.BatchRequest{Ops: []*pb.Op{putOp("a", "2")}})
		failing := []struct {
			name string
			req  func() *pb.OpenRequest
			code codes.Code
		}{
			{"another max parallelism", func() *pb.OpenRequest {
				r := spec()
				r.MaxParallelism, r.Restore = 256, &pb.RestoreSource{Source: &pb.RestoreSource_Latest{Latest: true}}
				return r
			}, codes.FailedPrecondition},
			{"a checkpoint that does not exist", func() *pb.OpenRequest {
				r := spec()
				r.Restore = &pb.RestoreSource{Source: &pb.RestoreSource_CheckpointId{CheckpointId: 99}}
				return r
			}, codes.NotFound},
			{"a state with no kind", func() *pb.OpenRequest {
				r := spec()
				r.States = []*pb.StateDescriptor{{Name: "v"}}
				return r
			}, codes.InvalidArgument},
		}
		for _, f := range failing {
			req := f.req()
			req.Replace = true
			_, err := rpc.Open(ctx, req)
			if status.Code(err) != f.code {
				t.Fatalf("%v: replace with %s: %v, want %v", kind, f.name, err, f.code)
			}
			// The running instance still works: it reads its own latest
			// write and takes writes.
			res, _ := ws.do(&pb.BatchRequest{Ops: []*pb.Op{getOp("a"), putOp("b", "x")}})
			if res[0].Code != 0 || string(res[0].Value) != "2" || res[1].Code != 0 {
				t.Fatalf("%v: after a failed replace (%s): get %v, put %v", kind, f.name, res[0], res[1])
			}
		}
		// A replace that succeeds closes it.
		req := spec()
		req.Replace, req.Restore = true, &pb.RestoreSource{Source: &pb.RestoreSource_Latest{Latest: true}}
		if _, err := rpc.Open(ctx, req); err != nil {
			t.Fatal(err)
		}
		res, _ = ws.do(&pb.BatchRequest{Ops: []*pb.Op{getOp("a")}})
		if res[0].Code != uint32(codes.FailedPrecondition) {
			t.Fatalf("%v: the replaced instance answered %v", kind, res[0])
		}
	}
}
