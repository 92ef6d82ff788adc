package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api/client"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
)

// rawCodec sends bytes as they are: the way to put a malformed message on
// the wire.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*(v.(*[]byte)) = data.Materialize()
	return nil
}

func wantCode(t *testing.T, what string, err error, code codes.Code, msgParts ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: got %v, want code %s", what, err, code)
	}
	for _, p := range msgParts {
		if !strings.Contains(status.Convert(err).Message(), p) {
			t.Fatalf("%s: message %q does not mention %q", what, status.Convert(err).Message(), p)
		}
	}
}

// rejected is the expected failure of one operation: its status code and
// words its message must contain.
type rejected struct {
	code  codes.Code
	parts []string
}

// wantRejected checks that resp holds exactly one result per operation
// sent, in order, each the failure want says.
func wantRejected(t *testing.T, what string, resp *pb.BatchResponse, want ...rejected) {
	t.Helper()
	rs := resp.GetResults()
	if len(rs) != len(want) {
		t.Fatalf("%s: %d results for %d operations: %+v", what, len(rs), len(want), rs)
	}
	for i, r := range rs {
		if r.GetIndex() != uint32(i) {
			t.Fatalf("%s: result %d has index %d", what, i, r.GetIndex())
		}
		if codes.Code(r.GetCode()) != want[i].code {
			t.Fatalf("%s: op %d: code %s %q, want %s", what, i, codes.Code(r.GetCode()), r.GetError(), want[i].code)
		}
		for _, p := range want[i].parts {
			if !strings.Contains(r.GetError(), p) {
				t.Fatalf("%s: op %d: message %q does not mention %q", what, i, r.GetError(), p)
			}
		}
	}
}

// batchOnce sends one batch on a fresh stream and returns the response.
func batchOnce(ctx context.Context, rpc pb.StatedClient, req *pb.BatchRequest) (*pb.BatchResponse, error) {
	st, err := rpc.Batch(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = st.CloseSend() }()
	if err := st.Send(req); err != nil {
		_, rerr := st.Recv()
		if rerr != nil {
			return nil, rerr
		}
		return nil, err
	}
	return st.Recv()
}

func TestBadInput(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	p := start(t, dataDir(t), "--max-value-size", "1KiB", "--max-message-size", "64KiB",
		"--listen", "127.0.0.1:0", "--token", "s3cret")
	if m, err := p.socketMode(); err != nil || m != 0o600 {
		t.Fatalf("socket mode %v (%v), want 0600", m, err)
	}
	c := p.dial(client.Options{})
	rpc := c.RPC()
	states := []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}, {Name: "l", Kind: backend.KindList}}
	in, err := c.Open(ctx, client.OpenSpec{Task: backend.TaskID{Job: "jobA", Operator: "op", Subtask: 0},
		Parallelism: 2, Backend: backend.KindLSM, States: states})
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("k0")
	for in.KeyGroups().Contains(in.KeyGroup(key)) == false {
		key = append(key, 'x')
	}
	kg := uint32(in.KeyGroup(key))
	if _, err := in.Put("v", key, nil, []byte("good")).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	unchanged := func(what string) {
		t.Helper()
		v, err := in.Get("v", key, nil).Wait(ctx)
		if err != nil || string(v.Data) != "good" {
			t.Fatalf("after %s: value %q, %v (state changed or daemon down)", what, v.Data, err)
		}
	}

	t.Run("malformed open", func(t *testing.T) {
		_, err := rpc.Open(ctx, &pb.OpenRequest{})
		wantCode(t, "empty open", err, codes.InvalidArgument, "no task")
		_, err = rpc.Open(ctx, &pb.OpenRequest{Task: &pb.TaskId{Job: "j", Operator: "o"}, KeyGroups: &pb.KeyGroupRange{Start: 0, End: 127}, Backend: "rocks"})
		wantCode(t, "unknown backend", err, codes.InvalidArgument, "rocks")
		_, err = rpc.Open(ctx, &pb.OpenRequest{Task: &pb.TaskId{Job: "j", Operator: "o"}, KeyGroups: &pb.KeyGroupRange{Start: 0, End: 500}, Backend: "file"})
		wantCode(t, "range outside", err, codes.InvalidArgument, "[0,500]")
		_, err = rpc.Open(ctx, &pb.OpenRequest{Task: &pb.TaskId{Job: "../etc", Operator: "o"}, KeyGroups: &pb.KeyGroupRange{Start: 0, End: 1}, Backend: "file"})
		wantCode(t, "bad job name", err, codes.InvalidArgument, "job name")
		_, err = rpc.Open(ctx, &pb.OpenRequest{Task: &pb.TaskId{Job: "j", Operator: "o"}, KeyGroups: &pb.KeyGroupRange{Start: 0, End: 1}, Backend: "file",
			States: []*pb.StateDescriptor{{Name: "a", Kind: pb.StateKind_STATE_KIND_AGGREGATE}}})
		wantCode(t, "aggregate without function", err, codes.InvalidArgument, `state "a"`, "aggregate function")
		// Bytes that are no protobuf message at all.
		var out []byte
		err = c.Conn().Invoke(ctx, "/stated.v1.Stated/Open", []byte{0xff, 0xff, 0xff, 0x07}, &out, grpc.ForceCodecV2(rawCodec{}))
		wantCode(t, "garbage open", err, codes.InvalidArgument, "malformed")
		unchanged("malformed open")
	})

	t.Run("malformed batch", func(t *testing.T) {
		st, err := c.Conn().NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true},
			"/stated.v1.Stated/Batch", grpc.ForceCodecV2(rawCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SendMsg([]byte{0x0a, 0xff}); err != nil { // a length past the end
			t.Fatal(err)
		}
		var out []byte
		err = st.RecvMsg(&out)
		wantCode(t, "garbage batch", err, codes.InvalidArgument, "malformed")
		resp, err := batchOnce(ctx, rpc, &pb.BatchRequest{InstanceId: in.ID(), Job: "jobA", Seq: 1, Ops: []*pb.Op{
			{Type: pb.OpType(99), State: "v", KeyGroup: kg, Key: key},
			{Type: pb.OpType_OP_TYPE_PUT, State: "nope", KeyGroup: kg, Key: key, Value: []byte("x")},
			{Type: pb.OpType_OP_TYPE_LIST_GET, State: "v", KeyGroup: kg, Key: key},
			{Type: pb.OpType_OP_TYPE_LIST_APPEND, State: "l", KeyGroup: kg, Key: key},
		}})
		if err != nil {
			t.Fatal(err)
		}
		wantRejected(t, "malformed operations", resp,
			rejected{codes.InvalidArgument, []string{"jobA/op/0", "unknown operation type 99"}},
			rejected{codes.InvalidArgument, []string{"jobA/op/0", `"nope"`}},
			rejected{codes.InvalidArgument, []string{"jobA/op/0", `"v"`, "list_get"}},
			rejected{codes.InvalidArgument, []string{"jobA/op/0", `"l"`, "without values"}})
		unchanged("malformed batch")
	})

	t.Run("unknown instance", func(t *testing.T) {
		id := make([]byte, 16)
		_, _ = rand.Read(id)
		_, err := batchOnce(ctx, rpc, &pb.BatchRequest{InstanceId: id, Job: "jobA", Seq: 1,
			Ops: []*pb.Op{{Type: pb.OpType_OP_TYPE_GET, State: "v", KeyGroup: kg, Key: key}}})
		wantCode(t, "batch", err, codes.NotFound, "unknown instance")
		_, err = rpc.Snapshot(ctx, &pb.SnapshotRequest{InstanceId: id, Job: "jobA", CheckpointId: 1})
		wantCode(t, "snapshot", err, codes.NotFound)
		_, err = rpc.CloseInstance(ctx, &pb.CloseRequest{InstanceId: id, Job: "jobA"})
		wantCode(t, "close", err, codes.NotFound)
	})

	t.Run("key group outside the range", func(t *testing.T) {
		// Writes through subtask 0 of jobK at key groups it does not own
		// are refused; that nothing was written is checked at the address
		// the write targeted, where it can be read: after a rescale to one
		// subtask, whose range holds every key group, restored from a
		// checkpoint of both subtasks. (Key group 40000 lies beyond every
		// range, so no instance reads it: its check is the status.)
		spec := func(sub, par int) client.OpenSpec {
			return client.OpenSpec{Task: backend.TaskID{Job: "jobK", Operator: "op", Subtask: sub}, Parallelism: par,
				Backend: backend.KindLSM, States: states}
		}
		a, err := c.Open(ctx, spec(0, 2))
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.Open(ctx, spec(1, 2))
		if err != nil {
			t.Fatal(err)
		}
		other := uint32(a.KeyGroups().End + 1)
		if !b.KeyGroups().Contains(int(other)) {
			t.Fatalf("key group %d is not subtask 1's (%s)", other, b.KeyGroups())
		}
		// key lies in a's range (and the same key group as in jobA);
		// keyB is a key of key group other, written by b, its owner.
		keyB := []byte("b0")
		for b.KeyGroup(keyB) != int(other) {
			keyB = append(keyB, 'x')
		}
		if _, err := a.Put("v", key, nil, []byte("good")).Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Put("v", keyB, nil, []byte("fromB")).Wait(ctx); err != nil {
			t.Fatal(err)
		}
		resp, err := batchOnce(ctx, rpc, &pb.BatchRequest{InstanceId: a.ID(), Job: "jobK", Seq: 1, Ops: []*pb.Op{
			{Type: pb.OpType_OP_TYPE_PUT, State: "v", KeyGroup: other, Key: key, Value: []byte("evil")},
			{Type: pb.OpType_OP_TYPE_PUT, State: "v", KeyGroup: 40000, Key: key, Value: []byte("evil")},
		}})
		if err != nil {
			t.Fatal(err)
		}
		wantRejected(t, "out-of-range key groups", resp,
			rejected{codes.InvalidArgument, []string{"jobK/op/0", `"v"`, fmt.Sprintf("key group %d", other)}},
			rejected{codes.InvalidArgument, []string{"jobK/op/0", `"v"`, "key group 40000"}})
		for _, in := range []*client.Instance{a, b} {
			if _, err := in.Snapshot(ctx, 1, true); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.CompleteCheckpoint(ctx, "jobK", 1); err != nil {
			t.Fatal(err)
		}
		all := spec(0, 1)
		all.Replace, all.Restore = true, &client.Restore{Latest: true}
		r, err := c.Open(ctx, all)
		if err != nil {
			t.Fatal(err)
		}
		a.Abandon() // replaced
		if !r.KeyGroups().Contains(int(other)) || !r.KeyGroups().Contains(int(kg)) {
			t.Fatalf("rescaled range %s", r.KeyGroups())
		}
		resp, err = batchOnce(ctx, rpc, &pb.BatchRequest{InstanceId: r.ID(), Job: "jobK", Seq: 1, Ops: []*pb.Op{
			{Type: pb.OpType_OP_TYPE_GET, State: "v", KeyGroup: kg, Key: key},
			{Type: pb.OpType_OP_TYPE_GET, State: "v", KeyGroup: other, Key: keyB},
			// The address the refused write targeted.
			{Type: pb.OpType_OP_TYPE_GET, State: "v", KeyGroup: other, Key: key},
		}})
		if err != nil {
			t.Fatal(err)
		}
		rs := resp.GetResults()
		if len(rs) != 2 || rs[0].GetIndex() != 0 || string(rs[0].GetValue()) != "good" || rs[1].GetIndex() != 1 || string(rs[1].GetValue()) != "fromB" {
			t.Fatalf("after the rescale: results %+v; want good, fromB and nothing at key group %d of %q (the refused write)", rs, other, key)
		}
		for _, in := range []*client.Instance{r, b} {
			if err := in.Close(ctx); err != nil {
				t.Fatal(err)
			}
		}
		unchanged("out-of-range key group")
	})

	t.Run("another job's instance", func(t *testing.T) {
		_, err := batchOnce(ctx, rpc, &pb.BatchRequest{InstanceId: in.ID(), Job: "jobB", Seq: 1,
			Ops: []*pb.Op{{Type: pb.OpType_OP_TYPE_PUT, State: "v", KeyGroup: kg, Key: key, Value: []byte("evil")}}})
		wantCode(t, "batch", err, codes.PermissionDenied, "jobB")
		if strings.Contains(status.Convert(err).Message(), "jobA") {
			t.Fatalf("the message names the owner: %v", err)
		}
		_, err = rpc.Snapshot(ctx, &pb.SnapshotRequest{InstanceId: in.ID(), Job: "jobB", CheckpointId: 5})
		wantCode(t, "snapshot", err, codes.PermissionDenied)
		_, err = rpc.CloseInstance(ctx, &pb.CloseRequest{InstanceId: in.ID(), Job: "jobB"})
		wantCode(t, "close", err, codes.PermissionDenied)
		// A stream bound to jobA may not switch.
		resp, err := func() (*pb.BatchResponse, error) {
			st, err := rpc.Batch(ctx)
			if err != nil {
				return nil, err
			}
			_ = st.Send(&pb.BatchRequest{InstanceId: in.ID(), Job: "jobA", Seq: 1})
			if _, err := st.Recv(); err != nil {
				return nil, err
			}
			_ = st.Send(&pb.BatchRequest{Job: "jobB", Seq: 2, Ops: []*pb.Op{{Type: pb.OpType_OP_TYPE_PUT, State: "v", KeyGroup: kg, Key: key, Value: []byte("evil")}}})
			return st.Recv()
		}()
		wantCode(t, "switching job", err, codes.InvalidArgument, "another instance or job")
		_ = resp
		unchanged("another job")
	})

	t.Run("oversized", func(t *testing.T) {
		resp, err := batchOnce(ctx, rpc, &pb.BatchRequest{InstanceId: in.ID(), Job: "jobA", Seq: 1, Ops: []*pb.Op{
			{Type: pb.OpType_OP_TYPE_PUT, State: "v", KeyGroup: kg, Key: key, Value: bytes.Repeat([]byte("x"), 2000)},
			{Type: pb.OpType_OP_TYPE_PUT, State: "v", KeyGroup: kg, Key: bytes.Repeat([]byte("k"), 2000), Value: []byte("x")},
		}})
		if err != nil {
			t.Fatal(err)
		}
		wantRejected(t, "oversized operands", resp,
			rejected{codes.ResourceExhausted, []string{"jobA/op/0", "value of 2000 bytes", "1024"}},
			rejected{codes.ResourceExhausted, []string{"jobA/op/0", "key of 2000 bytes", "1024"}})
		var ops []*pb.Op
		for range 100 {
			ops = append(ops, &pb.Op{Type: pb.OpType_OP_TYPE_PUT, State: "v", KeyGroup: kg, Key: key, Value: bytes.Repeat([]byte("y"), 1000)})
		}
		_, err = batchOnce(ctx, rpc, &pb.BatchRequest{InstanceId: in.ID(), Job: "jobA", Seq: 1, Ops: ops})
		wantCode(t, "message over the limit", err, codes.ResourceExhausted)
		// Through the client: refused before it is sent.
		_, err = in.Put("v", key, nil, make([]byte, 1025)).Wait(ctx)
		wantCode(t, "client", err, codes.ResourceExhausted)
		unchanged("oversized")
	})

	t.Run("tcp token", func(t *testing.T) {
		p.mu.Lock()
		addr := p.tcp
		p.mu.Unlock()
		for _, tok := range []string{"", "wrong", "s3cre", "s3cret "} {
			cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			cctx := ctx
			if tok != "" {
				cctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
			}
			r := pb.NewStatedClient(cc)
			_, err = r.ListCheckpoints(cctx, &pb.ListCheckpointsRequest{Job: "jobA"})
			wantCode(t, "unary token "+tok, err, codes.Unauthenticated, "token")
			_, err = batchOnce(cctx, r, &pb.BatchRequest{InstanceId: in.ID(), Job: "jobA", Seq: 1,
				Ops: []*pb.Op{{Type: pb.OpType_OP_TYPE_PUT, State: "v", KeyGroup: kg, Key: key, Value: []byte("evil")}}})
			wantCode(t, "stream token "+tok, err, codes.Unauthenticated)
			cc.Close()
		}
		tc, err := client.Dial(addr, client.Options{Token: "s3cret"})
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		if _, err := tc.ListCheckpoints(ctx, "jobA"); err != nil {
			t.Fatalf("with the token: %v", err)
		}
		unchanged("tcp without token")
	})

	// Still serving, and the metrics saw it all.
	if code, body, err := p.get("/healthz"); err != nil || code != 200 || !strings.Contains(body, "ok") {
		t.Fatalf("healthz: %d %q %v", code, body, err)
	}
	_, body, err := p.get("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`stated_ops_total{backend="lsm",op="put",state_kind="value"}`, `stated_op_errors_total{backend="lsm"`,
		`stated_open_instances{backend="lsm"} 1`, `stated_op_duration_seconds_bucket{backend="lsm"`} {
		if !strings.Contains(body, want) {
			t.Fatalf("metrics lack %s", want)
		}
	}
	if err := in.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.term(20 * time.Second); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
}
