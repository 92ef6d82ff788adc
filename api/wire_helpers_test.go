package api_test

// Helpers of the tests that talk to the daemon through the generated stubs
// alone, as a client written from stated.proto would.

import (
	"testing"

	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
)

// wireStream is a batch stream through the generated stubs alone.
type wireStream struct {
	t      *testing.T
	stream pb.Stated_BatchClient
	seq    uint64
}

func openWire(t *testing.T, rpc pb.StatedClient, req *pb.OpenRequest) (*pb.OpenResponse, *wireStream) {
	t.Helper()
	ctx := ctxT(t)
	open, err := rpc.Open(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := rpc.Batch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ws := &wireStream{t: t, stream: stream}
	ws.do(&pb.BatchRequest{InstanceId: open.InstanceId, Job: req.Task.Job})
	return open, ws
}

func (w *wireStream) send(req *pb.BatchRequest) {
	w.t.Helper()
	w.seq++
	req.Seq = w.seq
	if err := w.stream.Send(req); err != nil {
		w.t.Fatal(err)
	}
}

func (w *wireStream) recv() *pb.BatchResponse {
	w.t.Helper()
	resp, err := w.stream.Recv()
	if err != nil {
		w.t.Fatal(err)
	}
	return resp
}

// do sends one request and returns its response with one Result per op.
func (w *wireStream) do(req *pb.BatchRequest) ([]*pb.Result, *pb.BatchResponse) {
	w.t.Helper()
	w.send(req)
	resp := w.recv()
	if resp.Seq != w.seq {
		w.t.Fatalf("response seq %d, want %d", resp.Seq, w.seq)
	}
	res := make([]*pb.Result, len(req.Ops))
	for i := range res {
		res[i] = &pb.Result{Index: uint32(i)}
	}
	for _, r := range resp.Results {
		res[r.Index] = r
	}
	return res, resp
}

var wireBackends = []pb.BackendKind{pb.BackendKind_BACKEND_KIND_HEAP, pb.BackendKind_BACKEND_KIND_FILE, pb.BackendKind_BACKEND_KIND_LSM}

func allKeyGroups() *pb.KeyGroupRange {
	return &pb.KeyGroupRange{Start: 0, End: backend.DefaultMaxParallelism - 1}
}

func keyGroupOf(key string) int {
	return int(putOp(key, "").KeyGroup)
}
