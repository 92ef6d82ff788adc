package wire

import (
	"bytes"
	"fmt"
	"math"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"pgregory.net/rapid"

	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
)

func genBytes(t *rapid.T, label string) []byte {
	return rapid.SliceOfN(rapid.Byte(), 0, 6).Draw(t, label)
}

func genOp(t *rapid.T) *pb.Op {
	op := &pb.Op{
		Type:       pb.OpType(rapid.Int32Range(-2, 20).Draw(t, "type")),
		State:      rapid.StringMatching(`[a-z]{0,5}`).Draw(t, "state"),
		KeyGroup:   rapid.Uint32().Draw(t, "kg"),
		Key:        genBytes(t, "key"),
		Namespace:  genBytes(t, "ns"),
		UserKey:    genBytes(t, "uk"),
		Value:      genBytes(t, "value"),
		NumberType: pb.NumberType(rapid.Int32Range(-1, 3).Draw(t, "nt")),
		IntValue:   rapid.Int64().Draw(t, "int"),
		FloatValue: rapid.SampledFrom([]float64{0, math.Copysign(0, -1), 1.5, -3, math.Inf(1)}).Draw(t, "float"),
		Timestamp:  rapid.Int64().Draw(t, "ts"),
		Limit:      rapid.Int32().Draw(t, "limit"),
		// Enums accept unknown values, negative ones too.
		OperatorMode: pb.OperatorStateMode(rapid.Int32Range(-1, 3).Draw(t, "opmode")),
	}
	for range rapid.IntRange(0, 3).Draw(t, "nvalues") {
		op.Values = append(op.Values, genBytes(t, "v"))
	}
	return op
}

func sameBytes(a, b []byte) bool { return bytes.Equal(a, b) }

func checkOp(t *rapid.T, got *Op, want *pb.Op) {
	if got.Type != int32(want.Type) || string(got.StateBytes) != want.State || got.KeyGroup != want.KeyGroup ||
		!sameBytes(got.Key, want.Key) || !sameBytes(got.Namespace, want.Namespace) || !sameBytes(got.UserKey, want.UserKey) ||
		!sameBytes(got.Value, want.Value) || got.NumberType != int32(want.NumberType) || got.IntValue != want.IntValue ||
		math.Float64bits(got.FloatValue) != math.Float64bits(want.FloatValue) || got.Timestamp != want.Timestamp ||
		got.Limit != want.Limit || got.OperatorMode != int32(want.OperatorMode) || len(got.Values) != len(want.Values) {
		t.Fatalf("decoded %+v, want %v", got, want)
	}
	for i := range got.Values {
		if !sameBytes(got.Values[i], want.Values[i]) {
			t.Fatalf("value %d: %q, want %q", i, got.Values[i], want.Values[i])
		}
	}
}

// The hand encoding of requests is the generated code's, both ways.
func TestBatchRequestMatchesProto(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		req := &pb.BatchRequest{InstanceId: genBytes(t, "id"), Job: rapid.StringMatching(`[a-z]{0,4}`).Draw(t, "job"),
			Seq: rapid.Uint64().Draw(t, "seq")}
		for range rapid.IntRange(0, 5).Draw(t, "nops") {
			req.Ops = append(req.Ops, genOp(t))
		}
		if rapid.Bool().Draw(t, "barrier") {
			// An empty barrier (id 0, no wait) is still a barrier.
			req.Snapshot = &pb.SnapshotBarrier{CheckpointId: rapid.Uint64Range(0, 1<<40).Draw(t, "ckpt"), Wait: rapid.Bool().Draw(t, "wait"),
				FullCheckpoint: rapid.Bool().Draw(t, "full")}
			if rapid.Bool().Draw(t, "stats") {
				req.Snapshot.Stats = &pb.TaskCheckpointStats{Unaligned: rapid.Bool().Draw(t, "unaligned"),
					AlignmentMicros: rapid.Int64().Draw(t, "align"), StartDelayMicros: rapid.Int64().Draw(t, "delay")}
			}
		}
		// generated -> hand decoder
		data, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		bt, err := DecodeBatch(data, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !sameBytes(bt.InstanceID, req.InstanceId) || string(bt.Job) != req.Job || bt.Seq != req.Seq || len(bt.Ops) != len(req.Ops) {
			t.Fatalf("header %+v vs %v", bt, req)
		}
		for i := range bt.Ops {
			checkOp(t, &bt.Ops[i], req.Ops[i])
		}
		if bt.HasSnapshot != (req.Snapshot != nil) || bt.Snapshot.CheckpointID != req.Snapshot.GetCheckpointId() || bt.Snapshot.Wait != req.Snapshot.GetWait() ||
			bt.Snapshot.Full != req.Snapshot.GetFullCheckpoint() {
			t.Fatalf("barrier %v %+v, want %v", bt.HasSnapshot, bt.Snapshot, req.Snapshot)
		}
		st := req.Snapshot.GetStats()
		if bt.Snapshot.HasStats != (st != nil) || bt.Snapshot.Stats != (Stats{st.GetUnaligned(), st.GetAlignmentMicros(), st.GetStartDelayMicros()}) {
			t.Fatalf("barrier stats %+v, want %v", bt.Snapshot, st)
		}
		// hand encoder -> generated decoder, byte for byte what the
		// generated encoder writes (deterministic, canonical).
		var b []byte
		for _, op := range req.Ops {
			b = AppendOp(b, &Op{Type: int32(op.Type), State: op.State, KeyGroup: op.KeyGroup, Key: op.Key, Namespace: op.Namespace,
				UserKey: op.UserKey, Value: op.Value, Values: op.Values, NumberType: int32(op.NumberType), IntValue: op.IntValue,
				FloatValue: op.FloatValue, Timestamp: op.Timestamp, Limit: op.Limit, OperatorMode: int32(op.OperatorMode)})
		}
		b = AppendBatchHeader(b, req.Seq, req.InstanceId, req.Job)
		if req.Snapshot != nil {
			br := Barrier{CheckpointID: req.Snapshot.CheckpointId, Wait: req.Snapshot.Wait, Full: req.Snapshot.FullCheckpoint}
			if st := req.Snapshot.Stats; st != nil {
				br.HasStats, br.Stats = true, Stats{st.Unaligned, st.AlignmentMicros, st.StartDelayMicros}
			}
			b = AppendSnapshotBarrier(b, br)
		}
		var back pb.BatchRequest
		if err := proto.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&back, req) {
			t.Fatalf("hand-encoded request decodes to %v, want %v", &back, req)
		}
	})
}

func genResult(t *rapid.T, index uint32) *Result {
	r := &Result{Index: index, Code: rapid.Uint32Range(0, 16).Draw(t, "code"), Error: rapid.StringMatching(`[a-z ]{0,6}`).Draw(t, "err"),
		Found: rapid.Bool().Draw(t, "found"), Value: genBytes(t, "value"), More: rapid.Bool().Draw(t, "more"),
		OperatorMode: rapid.Int32Range(-1, 3).Draw(t, "opmode")}
	if rapid.Bool().Draw(t, "num") {
		r.Number = backend.Number{Type: backend.NumberType(rapid.IntRange(1, 2).Draw(t, "nt")), Int: rapid.Int64().Draw(t, "i"),
			Float: rapid.Float64().Draw(t, "f")}
	}
	for range rapid.IntRange(0, 2).Draw(t, "nv") {
		r.Values = append(r.Values, genBytes(t, "v"))
	}
	for range rapid.IntRange(0, 2).Draw(t, "ne") {
		r.Entries = append(r.Entries, backend.MapEntry{UserKey: genBytes(t, "euk"), Value: genBytes(t, "ev")})
	}
	for range rapid.IntRange(0, 2).Draw(t, "nt") {
		r.Timers = append(r.Timers, backend.Timer{KeyGroup: rapid.IntRange(0, 1<<15).Draw(t, "tkg"), Key: genBytes(t, "tk"),
			Namespace: genBytes(t, "tns"), Timestamp: rapid.Int64().Draw(t, "tts")})
	}
	return r
}

// The hand encoding of responses is the generated code's, both ways.
func TestBatchResponseMatchesProto(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		seq := rapid.Uint64().Draw(t, "seq")
		var rs []*Result
		var b []byte
		want := &pb.BatchResponse{Seq: seq}
		for i := range rapid.IntRange(0, 4).Draw(t, "n") {
			r := genResult(t, uint32(i*3))
			rs = append(rs, r)
			b = AppendResult(b, r)
			pr := &pb.Result{Index: r.Index, Code: r.Code, Error: r.Error, Found: r.Found, Value: r.Value, Values: r.Values,
				More: r.More, NumberType: pb.NumberType(r.Number.Type), IntValue: r.Number.Int, FloatValue: r.Number.Float,
				OperatorMode: pb.OperatorStateMode(r.OperatorMode)}
			for _, e := range r.Entries {
				pr.Entries = append(pr.Entries, &pb.MapEntry{UserKey: e.UserKey, Value: e.Value})
			}
			for _, tm := range r.Timers {
				pr.Timers = append(pr.Timers, &pb.Timer{KeyGroup: uint32(tm.KeyGroup), Key: tm.Key, Namespace: tm.Namespace, Timestamp: tm.Timestamp})
			}
			want.Results = append(want.Results, pr)
		}
		b = AppendResponseSeq(b, seq)
		if rapid.Bool().Draw(t, "snapshot") {
			want.Snapshot = &pb.SnapshotOutcome{Code: rapid.Uint32Range(0, 16).Draw(t, "scode")}
			if want.Snapshot.Code == 0 {
				want.Snapshot.Result = &pb.SnapshotResponse{SyncMicros: rapid.Int64Range(0, 1<<40).Draw(t, "sync")}
			}
			enc, err := proto.Marshal(want.Snapshot)
			if err != nil {
				t.Fatal(err)
			}
			b = AppendSnapshotOutcome(b, enc)
		}
		if enc, ok, err := ResponseSnapshot(b); err != nil || ok != (want.Snapshot != nil) {
			t.Fatalf("ResponseSnapshot: %v, found %v, want %v", err, ok, want.Snapshot != nil)
		} else if ok {
			var o pb.SnapshotOutcome
			if err := proto.Unmarshal(enc, &o); err != nil || !proto.Equal(&o, want.Snapshot) {
				t.Fatalf("snapshot outcome %v (%v), want %v", &o, err, want.Snapshot)
			}
		}
		var got pb.BatchResponse
		if err := proto.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&got, want) {
			t.Fatalf("hand-encoded response decodes to %v, want %v", &got, want)
		}
		data, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		gotSeq, dec, err := DecodeResponse(data)
		if err != nil || gotSeq != seq || len(dec) != len(rs) {
			t.Fatalf("decode: %v seq %d results %d", err, gotSeq, len(dec))
		}
		for i := range dec {
			b1 := AppendResult(nil, &dec[i])
			b2 := AppendResult(nil, rs[i])
			if !bytes.Equal(b1, b2) {
				t.Fatalf("result %d does not round-trip: %+v vs %+v", i, dec[i], *rs[i])
			}
		}
	})
}

// Nothing a client or daemon sends may panic the decoders; what the
// generated code accepts, they accept.
func FuzzDecode(f *testing.F) {
	b, _ := proto.Marshal(&pb.BatchRequest{Seq: 3, Job: "j", Ops: []*pb.Op{{Type: 2, State: "v", Key: []byte("k"), Values: [][]byte{{}, {1}}}}})
	f.Add(b)
	b, _ = proto.Marshal(&pb.BatchResponse{Seq: 3, Results: []*pb.Result{{Index: 2, Entries: []*pb.MapEntry{{UserKey: []byte("u")}}, Timers: []*pb.Timer{{Key: []byte("t")}}}}})
	f.Add(b)
	f.Add([]byte{0x22, 0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		_, errB := DecodeBatch(data, nil)
		if proto.Unmarshal(data, new(pb.BatchRequest)) == nil && errB != nil {
			t.Fatalf("generated code accepts a request the hand decoder refuses: %v", errB)
		}
		_, _, errR := DecodeResponse(data)
		if proto.Unmarshal(data, new(pb.BatchResponse)) == nil && errR != nil {
			t.Fatalf("generated code accepts a response the hand decoder refuses: %v", errR)
		}
	})
}

// The hand codec knows these fields; a change to stated.proto that touches
// them fails here until wire.go follows.
func TestSchemaMatchesCodec(t *testing.T) {
	want := map[string][]string{
		"BatchRequest": {"1 instance_id", "2 job", "3 seq", "4 ops", "5 snapshot", "16 view"},
		"ViewBarrier":  {"1 idle_timeout_millis"},
		"LoadRequest":  {"1 instance_id", "2 job", "3 entries"},
		"ViewEntry": {"1 key_group", "2 state_id", "3 state", "4 kind", "5 key", "6 namespace", "7 user_key", "8 value", "9 values",
			"10 number_type", "11 int_value", "12 float_value", "13 timestamp"},
		// The response's snapshot outcome is passed through encoded by the
		// generated code; the barrier is encoded by hand.
		"SnapshotBarrier":     {"1 checkpoint_id", "2 wait", "3 stats", "4 full_checkpoint"},
		"TaskCheckpointStats": {"1 unaligned", "2 alignment_micros", "3 start_delay_micros"},
		"Op":                  {"1 type", "2 state", "3 key_group", "4 key", "5 namespace", "6 user_key", "7 value", "8 values", "9 number_type", "10 int_value", "11 float_value", "12 timestamp", "13 limit", "14 operator_mode"},
		"BatchResponse":       {"1 seq", "2 results", "3 snapshot", "16 view"},
		"Result":              {"1 code", "2 error", "3 found", "4 value", "5 values", "6 entries", "7 more", "8 number_type", "9 int_value", "10 float_value", "11 timers", "12 index", "13 operator_mode"},
		"MapEntry":            {"1 user_key", "2 value"},
		"Timer":               {"1 key_group", "2 key", "3 namespace", "4 timestamp"},
	}
	msgs := pb.File_stated_proto.Messages()
	for name, fields := range want {
		md := msgs.ByName(protoreflectName(name))
		if md == nil {
			t.Fatalf("message %s is gone from stated.proto", name)
		}
		var got []string
		for i := range md.Fields().Len() {
			f := md.Fields().Get(i)
			got = append(got, fmt.Sprintf("%d %s", f.Number(), f.Name()))
		}
		if fmt.Sprint(got) != fmt.Sprint(fields) {
			t.Errorf("%s has fields %v; api/internal/wire encodes %v", name, got, fields)
		}
	}
}

func protoreflectName(s string) protoreflect.Name { return protoreflect.Name(s) }

// The size functions are exact: a server relies on them to keep a
// response within the message limit.
func TestSizes(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := genResult(t, rapid.Uint32().Draw(t, "index"))
		if got, want := EncodedResultSize(r), len(AppendResult(nil, r)); got != want {
			t.Fatalf("EncodedResultSize %d, encoding %d bytes", got, want)
		}
		base := *r
		base.Timers, base.Entries = nil, nil
		extra := 0
		for _, tm := range r.Timers {
			extra += TimerSize(tm)
		}
		for _, e := range r.Entries {
			extra += EntrySize(e)
		}
		if got, want := EncodedResultSizeWith(&base, extra), len(AppendResult(nil, r)); got != want {
			t.Fatalf("EncodedResultSizeWith %d, encoding %d bytes", got, want)
		}
		seq := rapid.Uint64().Draw(t, "seq")
		if n := len(AppendResponseSeq(nil, seq)); n > MaxSeqSize {
			t.Fatalf("seq %d takes %d bytes", seq, n)
		}
	})
}

// TestFoundResult: AppendFoundResult and FoundResultSize give the bytes and
// size AppendResult and EncodedResultSize give for the same result.
func TestFoundResult(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		index := rapid.Uint32().Draw(t, "index")
		value := rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(t, "value")
		r := &Result{Index: index, Found: true, Value: value}
		got, want := AppendFoundResult([]byte("x"), index, value), AppendResult([]byte("x"), r)
		if !bytes.Equal(got, want) {
			t.Fatalf("AppendFoundResult %x, AppendResult %x", got, want)
		}
		if n := FoundResultSize(index, len(value)); n != EncodedResultSize(r) || n != len(want)-1 {
			t.Fatalf("FoundResultSize %d, EncodedResultSize %d, encoding %d bytes", n, EncodedResultSize(r), len(want)-1)
		}
	})
}

// FuzzNext checks next's inline fast path against protowire (nextSlow) on
// any input: the same field, the same rest, the same error.
func FuzzNext(f *testing.F) {
	for _, seed := range [][]byte{
		{0x08, 0x01}, {0x08, 0x80, 0x01}, {0x08, 0xff, 0x7f}, {0x08, 0x80, 0x80, 0x01},
		{0x12, 0x02, 'a', 'b'}, {0x12, 0x03, 'a'}, {0x12, 0x80, 0x01}, {0x00, 0x01}, {0x0b, 0x00},
		{0x09, 1, 2, 3, 4, 5, 6, 7, 8}, {0x22, 0x00}, {0x7a, 0x01, 0x00, 0x10}, {0x80, 0x01, 0x00},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, grest, gerr := next(data)
		want, wrest, werr := nextSlow(data)
		if (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
			t.Fatalf("next(%x) error %v, want %v", data, gerr, werr)
		}
		if gerr != nil {
			return
		}
		if got.num != want.num || got.typ != want.typ || got.v != want.v || !bytes.Equal(got.b, want.b) ||
			(got.b == nil) != (want.b == nil) || !bytes.Equal(grest, wrest) || len(grest) != len(wrest) {
			t.Fatalf("next(%x) = %+v rest %x, want %+v rest %x", data, got, grest, want, wrest)
		}
	})
}

// Statistics that are all zero (an aligned snapshot without alignment or
// delay) are still a message inside the barrier, as the generated code
// writes them.
func TestBarrierEmptyStats(t *testing.T) {
	b := AppendSnapshotBarrier(nil, Barrier{CheckpointID: 4, HasStats: true})
	want, err := proto.Marshal(&pb.BatchRequest{Snapshot: &pb.SnapshotBarrier{CheckpointId: 4, Stats: &pb.TaskCheckpointStats{}}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("hand encoding %x, generated %x", b, want)
	}
	bt, err := DecodeBatch(b, nil)
	if err != nil || !bt.Snapshot.HasStats || bt.Snapshot.CheckpointID != 4 {
		t.Fatalf("decoded %+v %v", bt.Snapshot, err)
	}
}
