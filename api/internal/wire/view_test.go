package wire

import (
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/statedhq/stated/api/statedpb"
)

// The view barrier and outcome round-trip with the generated code.
func TestViewBarrierMatchesGenerated(t *testing.T) {
	for _, idle := range []int64{0, 1, 300000} {
		b := AppendBatchHeader(nil, 7, []byte("inst"), "job")
		b = AppendViewBarrier(b, ViewBarrier{IdleTimeoutMillis: idle})
		var req pb.BatchRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			t.Fatal(err)
		}
		if req.GetView() == nil || req.GetView().GetIdleTimeoutMillis() != idle {
			t.Fatalf("generated code reads view %v, want idle %d", req.GetView(), idle)
		}
		gen, err := proto.Marshal(&pb.BatchRequest{Seq: 7, View: &pb.ViewBarrier{IdleTimeoutMillis: idle}})
		if err != nil {
			t.Fatal(err)
		}
		bt, err := DecodeBatch(gen, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bt.HasView || bt.View.IdleTimeoutMillis != idle || bt.HasSnapshot {
			t.Fatalf("decoded %+v, want a view barrier with idle %d", bt, idle)
		}
	}
	bt, err := DecodeBatch(AppendBatchHeader(nil, 1, nil, ""), nil)
	if err != nil || bt.HasView {
		t.Fatalf("a request without a view barrier decodes as %+v, %v", bt, err)
	}
	outcome, err := proto.Marshal(&pb.ViewOutcome{View: &pb.ViewInfo{ViewId: []byte("v1")}})
	if err != nil {
		t.Fatal(err)
	}
	resp := AppendViewOutcome(AppendResponseSeq(nil, 3), outcome)
	got, ok, err := ResponseView(resp)
	if err != nil || !ok || string(got) != string(outcome) {
		t.Fatalf("ResponseView = %x, %v, %v; want %x", got, ok, err, outcome)
	}
	var r pb.BatchResponse
	if err := proto.Unmarshal(resp, &r); err != nil || string(r.GetView().GetView().GetViewId()) != "v1" {
		t.Fatalf("generated code reads %v, %v", r.GetView(), err)
	}
	if _, ok, _ := ResponseView(AppendResponseSeq(nil, 3)); ok {
		t.Fatal("a response without a view outcome reports one")
	}
}
