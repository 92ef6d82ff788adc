package api

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/daemon/openers"
	"github.com/statedhq/stated/tiered/memstore"
)

// FuzzBatch feeds arbitrary bytes through the server's codec and, when they
// parse, applies them to a heap instance: nothing a client sends may panic
// the daemon, every result has a code or a value, and a malformed message
// is reported as such.
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
	f.Add([]byte{0x22, 0xff})
	f.Add([]byte{})

	ctx := context.Background()
	store := memstore.New()
	cat, err := catalog.Open(ctx, catalog.Options{Store: store})
	if err != nil {
		f.Fatal(err)
	}
	defer cat.Close()
	set, err := openers.New(openers.Config{})
	if err != nil {
		f.Fatal(err)
	}
	defer set.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := daemon.New(daemon.Config{DataDir: f.TempDir(), Store: store, Catalog: cat, Openers: set.Openers,
		Logger: quiet, MaxValueSize: 1 << 10})
	if err != nil {
		f.Fatal(err)
	}
	defer d.Shutdown(ctx)
	inst, err := d.Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: "j", Operator: "op"},
		KeyGroups: backend.KeyGroupRange{Start: 0, End: 63}, Kind: backend.KindHeap,
		States: []backend.StateDescriptor{
			{Name: "v", Kind: backend.KindValue}, {Name: "l", Kind: backend.KindList}, {Name: "m", Kind: backend.KindMap},
			{Name: "a", Kind: backend.KindAggregate, Aggregate: backend.AggMax, Number: backend.NumFloat64},
			{Name: "t", Kind: backend.KindTimers},
		}})
	if err != nil {
		f.Fatal(err)
	}
	s := NewServer(d, ServerOptions{MaxBatchOps: 64, MaxPage: 16, MaxMessageSize: 1 << 16, Logger: quiet})
	codec := lenientCodec{encoding.GetCodecV2("proto")}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req pb.BatchRequest
		if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &req); err != nil {
			t.Fatalf("the lenient codec failed: %v", err)
		}
		if proto.Unmarshal(data, new(pb.BatchRequest)) != nil {
			if malformed(&req, "batch") == nil {
				t.Fatal("an unparsable message was not reported as malformed")
			}
			return
		}
		resp := s.apply(inst, &req)
		if resp.GetSeq() != req.GetSeq() || len(resp.GetResults()) != len(req.GetOps()) {
			t.Fatalf("response %d with %d results for request %d with %d ops", resp.GetSeq(), len(resp.GetResults()), req.GetSeq(), len(req.GetOps()))
		}
		for i, r := range resp.GetResults() {
			if r.GetCode() != 0 && r.GetError() == "" {
				t.Fatalf("result %d: code %d without a message", i, r.GetCode())
			}
		}
	})
}
