package wire

import (
	"bytes"
	"math"
	"testing"

	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
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

// Load requests round-trip with the generated code, every field of an
// entry included.
func TestLoadMatchesGenerated(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 5).Draw(t, "n")
		var want []backend.LoadEntry
		b := AppendLoadHeader(nil, []byte("inst"), "job")
		for i := 0; i < n; i++ {
			e := backend.LoadEntry{
				KeyGroup:  rapid.IntRange(0, 32767).Draw(t, "kg"),
				State:     rapid.SampledFrom([]string{"", "v", "state"}).Draw(t, "state"),
				Kind:      backend.StateKind(rapid.IntRange(0, 5).Draw(t, "kind")),
				Key:       rapid.SliceOfN(rapid.Byte(), 0, 20).Draw(t, "key"),
				Namespace: rapid.SliceOfN(rapid.Byte(), 0, 5).Draw(t, "ns"),
				UserKey:   rapid.SliceOfN(rapid.Byte(), 0, 5).Draw(t, "uk"),
				Value:     rapid.SliceOfN(rapid.Byte(), 0, 30).Draw(t, "value"),
				Values:    rapid.SliceOfN(rapid.SliceOfN(rapid.Byte(), 0, 5), 0, 3).Draw(t, "values"),
				Timestamp: rapid.Int64().Draw(t, "ts"),
			}
			switch rapid.IntRange(0, 2).Draw(t, "num") {
			case 1:
				e.Number = backend.Int64(rapid.Int64().Draw(t, "int"))
			case 2:
				e.Number = backend.Float64(rapid.Float64().Draw(t, "float"))
			}
			want = append(want, e)
			b = AppendLoadEntry(b, &e)
		}
		var gen pb.LoadRequest
		if err := proto.Unmarshal(b, &gen); err != nil {
			t.Fatal(err)
		}
		if string(gen.GetInstanceId()) != "inst" || gen.GetJob() != "job" || len(gen.GetEntries()) != n {
			t.Fatalf("generated code reads %v", &gen)
		}
		regen, err := proto.Marshal(&gen)
		if err != nil {
			t.Fatal(err)
		}
		for _, data := range [][]byte{b, regen} {
			got, err := DecodeLoad(data, nil)
			if err != nil {
				t.Fatal(err)
			}
			if string(got.InstanceID) != "inst" || string(got.Job) != "job" || len(got.Entries) != n {
				t.Fatalf("decoded %+v", got)
			}
			for i := range want {
				w, g := want[i], got.Entries[i]
				if g.KeyGroup != w.KeyGroup || g.State != w.State || g.Kind != w.Kind || !bytes.Equal(g.Key, w.Key) ||
					!bytes.Equal(g.Namespace, w.Namespace) || !bytes.Equal(g.UserKey, w.UserKey) || !bytes.Equal(g.Value, w.Value) ||
					g.Timestamp != w.Timestamp || g.Number.Type != w.Number.Type || g.Number.Int != w.Number.Int ||
					math.Float64bits(g.Number.Float) != math.Float64bits(w.Number.Float) || len(g.Values) != len(w.Values) {
					t.Fatalf("entry %d decoded as %+v, want %+v", i, g, w)
				}
				for j := range w.Values {
					if !bytes.Equal(g.Values[j], w.Values[j]) {
						t.Fatalf("entry %d element %d decoded as %x, want %x", i, j, g.Values[j], w.Values[j])
					}
				}
			}
		}
	})
	if _, err := DecodeLoad([]byte{0x1a, 0x05, 0x08}, nil); err == nil {
		t.Fatal("a truncated entry decodes")
	}
}

// Nothing a client sends may panic the load decoder; what the generated
// code accepts, it accepts.
func FuzzDecodeLoad(f *testing.F) {
	b, _ := proto.Marshal(&pb.LoadRequest{InstanceId: []byte("i"), Job: "j", Entries: []*pb.ViewEntry{
		{KeyGroup: 3, State: "v", Key: []byte("k"), Values: [][]byte{{}, {1}}, NumberType: 2, FloatValue: 1.5, IntValue: -3, Timestamp: 7}}})
	f.Add(b)
	f.Add([]byte{0x1a, 0x80})
	f.Add([]byte{0x1a, 0x02, 0x58, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := DecodeLoad(data, nil)
		if proto.Unmarshal(data, new(pb.LoadRequest)) == nil && err != nil {
			t.Fatalf("generated code accepts a load request the hand decoder refuses: %v", err)
		}
	})
}
