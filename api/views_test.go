package api_test

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
)

// openRaw opens an instance of every state kind over the raw stubs, with
// key groups the client chooses (KEY_HASH_UNSPECIFIED, as an engine that
// computes them itself), and binds its batch stream.
func openRaw(t *testing.T, rpc pb.StatedClient, job string, kind pb.BackendKind, kg *pb.KeyGroupRange) (*pb.OpenResponse, pb.Stated_BatchClient) {
	t.Helper()
	ctx := ctxT(t)
	resp, err := rpc.Open(ctx, &pb.OpenRequest{
		Task: &pb.TaskId{Job: job, Operator: "op"}, KeyGroups: kg, BackendKind: kind,
		States: []*pb.StateDescriptor{
			{Name: "v", Kind: pb.StateKind_STATE_KIND_VALUE},
			{Name: "lst", Kind: pb.StateKind_STATE_KIND_LIST},
			{Name: "m", Kind: pb.StateKind_STATE_KIND_MAP},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := rpc.Batch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pb.BatchRequest{InstanceId: resp.InstanceId, Job: job, Seq: 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	return resp, stream
}

func entryString(e *pb.ViewEntry, states []*pb.StateDescriptor) string {
	return fmt.Sprintf("%d/%s/%s/%s/%s=%s%q", e.GetKeyGroup(), states[e.GetStateId()].GetName(), e.GetKey(), e.GetNamespace(),
		e.GetUserKey(), e.GetValue(), e.GetValues())
}

// scanRaw reads a whole ScanView stream; it returns the entries, the
// number of responses, the last cursor and done.
func scanRaw(t *testing.T, rpc pb.StatedClient, req *pb.ScanViewRequest) ([]string, int, []byte, bool, error) {
	t.Helper()
	stream, err := rpc.ScanView(ctxT(t), req)
	if err != nil {
		return nil, 0, nil, false, err
	}
	var out []string
	var states []*pb.StateDescriptor
	n := 0
	var cursor []byte
	done := false
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, n, cursor, done, nil
		}
		if err != nil {
			return out, n, cursor, done, err
		}
		if n == 0 {
			states = resp.GetStates()
			if len(states) == 0 {
				t.Fatal("the first response of a scan lists no states")
			}
		} else if len(resp.GetStates()) != 0 {
			t.Fatal("a later response of a scan lists the states again")
		}
		n++
		for _, e := range resp.GetEntries() {
			out = append(out, entryString(e, states))
		}
		cursor, done = resp.GetCursor(), resp.GetDone()
	}
}

func wantCode(t *testing.T, err error, code codes.Code, what string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: %v, want %s", what, err, code)
	}
}

// TestViewBarrierOverTheWire: writes, a view barrier and more writes go
// out on the batch stream without waiting for any response; the view holds
// exactly the writes before the barrier, on every backend, and a paged,
// resumed scan returns the same entries as one scan.
func TestViewBarrierOverTheWire(t *testing.T) {
	for _, kind := range []pb.BackendKind{pb.BackendKind_BACKEND_KIND_HEAP, pb.BackendKind_BACKEND_KIND_FILE, pb.BackendKind_BACKEND_KIND_LSM} {
		t.Run(kind.String(), func(t *testing.T) {
			h := startDaemon(t, harnessOpts{})
			rpc := rawConn(t, h)
			kg := &pb.KeyGroupRange{Start: 10, End: 19}
			open, stream := openRaw(t, rpc, "views", kind, kg)
			id, job := open.InstanceId, "views"
			const keys = 200
			write := func(seq uint64, round string) *pb.BatchRequest {
				req := &pb.BatchRequest{Seq: seq}
				for i := 0; i < keys; i++ {
					k := backend.Key{KeyGroup: 10 + i%10, Key: []byte(fmt.Sprintf("k%03d", i)), Namespace: []byte("ns")}
					req.Ops = append(req.Ops,
						&pb.Op{Type: pb.OpType_OP_TYPE_PUT, State: "v", KeyGroup: uint32(k.KeyGroup), Key: k.Key, Namespace: k.Namespace, Value: []byte(round)},
						&pb.Op{Type: pb.OpType_OP_TYPE_LIST_APPEND, State: "lst", KeyGroup: uint32(k.KeyGroup), Key: k.Key, Namespace: k.Namespace, Values: [][]byte{[]byte(round)}},
						&pb.Op{Type: pb.OpType_OP_TYPE_MAP_PUT, State: "m", KeyGroup: uint32(k.KeyGroup), Key: k.Key, Namespace: k.Namespace, UserKey: []byte(round), Value: []byte(round)})
				}
				return req
			}
			// Five write batches, the barrier in the last, five more; no
			// response read in between.
			seq := uint64(1)
			for ; seq <= 5; seq++ {
				req := write(seq, fmt.Sprintf("r%d", seq))
				if seq == 5 {
					req.View = &pb.ViewBarrier{}
				}
				if err := stream.Send(req); err != nil {
					t.Fatal(err)
				}
			}
			for ; seq <= 10; seq++ {
				if err := stream.Send(write(seq, fmt.Sprintf("r%d", seq))); err != nil {
					t.Fatal(err)
				}
			}
			var view *pb.ViewInfo
			for i := uint64(1); i <= 10; i++ {
				resp, err := stream.Recv()
				if err != nil {
					t.Fatal(err)
				}
				if (resp.GetView() != nil) != (i == 5) {
					t.Fatalf("response %d has view outcome %v", i, resp.GetView())
				}
				if i == 5 {
					if resp.GetView().GetCode() != 0 {
						t.Fatalf("view barrier failed: %v", resp.GetView())
					}
					view = resp.GetView().GetView()
				}
			}
			if len(view.GetViewId()) == 0 || view.GetIdleTimeoutMillis() <= 0 || view.GetKeyGroups().GetStart() != 10 || len(view.GetStates()) != 3 {
				t.Fatalf("view info %v", view)
			}
			// The state order within a key group is by name length: m, v, lst.
			if n := []string{view.States[0].Name, view.States[1].Name, view.States[2].Name}; fmt.Sprint(n) != "[m v lst]" {
				t.Fatalf("view states in order %v", n)
			}
			var want []string
			for kgi := 10; kgi <= 19; kgi++ {
				var ks []string
				for i := kgi - 10; i < keys; i += 10 {
					ks = append(ks, fmt.Sprintf("k%03d", i))
				}
				sort.Strings(ks) // same length: bytewise order
				for _, k := range ks {
					for r := 1; r <= 5; r++ {
						want = append(want, fmt.Sprintf("%d/m/%s/ns/r%d=r%d[]", kgi, k, r, r))
					}
				}
				for _, k := range ks {
					want = append(want, fmt.Sprintf("%d/v/%s/ns/=r5[]", kgi, k))
				}
				for _, k := range ks {
					want = append(want, fmt.Sprintf("%d/lst/%s/ns/=[\"r1\" \"r2\" \"r3\" \"r4\" \"r5\"]", kgi, k))
				}
			}
			req := &pb.ScanViewRequest{InstanceId: id, Job: job, ViewId: view.ViewId}
			got, pages, _, done, err := scanRaw(t, rpc, req)
			if err != nil || !done {
				t.Fatalf("scan: %v, done %v", err, done)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("the view holds %d entries (in %d pages), want the %d written before its barrier, in order;\nfirst got  %v\nfirst want %v",
					len(got), pages, len(want), got[:min(5, len(got))], want[:5])
			}
			// Pages of 2 KiB, two per call, resumed from the cursor.
			var paged []string
			var cursor []byte
			calls := 0
			for {
				calls++
				part, n, c, done, err := scanRaw(t, rpc, &pb.ScanViewRequest{InstanceId: id, Job: job, ViewId: view.ViewId,
					Cursor: cursor, PageBytes: 2048, MaxPages: 2})
				if err != nil {
					t.Fatal(err)
				}
				if n > 2 {
					t.Fatalf("max_pages 2 sent %d responses", n)
				}
				paged = append(paged, part...)
				cursor = c
				if done {
					break
				}
			}
			if calls < 5 || fmt.Sprint(paged) != fmt.Sprint(want) {
				t.Fatalf("paged scan in %d calls differs from the whole scan", calls)
			}
			// A sub-range holds exactly its key groups.
			sub, _, _, _, err := scanRaw(t, rpc, &pb.ScanViewRequest{InstanceId: id, Job: job, ViewId: view.ViewId,
				KeyGroups: &pb.KeyGroupRange{Start: 12, End: 13}})
			if err != nil || len(sub) != len(want)/5 {
				t.Fatalf("scan of key groups 12-13: %d entries, %v; want %d", len(sub), err, len(want)/5)
			}

			// Bad input.
			_, _, _, _, err = scanRaw(t, rpc, &pb.ScanViewRequest{InstanceId: id, Job: job, ViewId: view.ViewId, KeyGroups: &pb.KeyGroupRange{Start: 5, End: 12}})
			wantCode(t, err, codes.InvalidArgument, "scan outside the instance's range")
			_, _, _, _, err = scanRaw(t, rpc, &pb.ScanViewRequest{InstanceId: id, Job: job, ViewId: view.ViewId, KeyGroups: &pb.KeyGroupRange{Start: 15, End: 12}})
			wantCode(t, err, codes.InvalidArgument, "scan of an empty range")
			_, _, _, _, err = scanRaw(t, rpc, &pb.ScanViewRequest{InstanceId: id, Job: job, ViewId: view.ViewId, Cursor: []byte("bogus")})
			wantCode(t, err, codes.InvalidArgument, "scan with a bad cursor")
			_, _, c12, _, err := scanRaw(t, rpc, &pb.ScanViewRequest{InstanceId: id, Job: job, ViewId: view.ViewId,
				KeyGroups: &pb.KeyGroupRange{Start: 12, End: 12}, MaxPages: 1, PageBytes: 1})
			if err != nil {
				t.Fatal(err)
			}
			_, _, _, _, err = scanRaw(t, rpc, &pb.ScanViewRequest{InstanceId: id, Job: job, ViewId: view.ViewId,
				KeyGroups: &pb.KeyGroupRange{Start: 14, End: 19}, Cursor: c12})
			wantCode(t, err, codes.InvalidArgument, "a cursor of key group 12 in a scan of 14-19")
			_, _, _, _, err = scanRaw(t, rpc, &pb.ScanViewRequest{InstanceId: id, Job: job, ViewId: []byte("nope")})
			wantCode(t, err, codes.NotFound, "scan of an unknown view")
			_, _, _, _, err = scanRaw(t, rpc, &pb.ScanViewRequest{InstanceId: id, Job: "other", ViewId: view.ViewId})
			wantCode(t, err, codes.PermissionDenied, "scan of another job's view")

			// Release; a second release and a scan after it are NotFound.
			ctx := ctxT(t)
			if _, err := rpc.ReleaseView(ctx, &pb.ReleaseViewRequest{InstanceId: id, Job: job, ViewId: view.ViewId}); err != nil {
				t.Fatal(err)
			}
			_, err = rpc.ReleaseView(ctx, &pb.ReleaseViewRequest{InstanceId: id, Job: job, ViewId: view.ViewId})
			wantCode(t, err, codes.NotFound, "second release")
			_, _, _, _, err = scanRaw(t, rpc, req)
			wantCode(t, err, codes.NotFound, "scan of a released view")

			// A view with a short idle timeout goes by itself.
			if err := stream.Send(&pb.BatchRequest{Seq: 11, View: &pb.ViewBarrier{IdleTimeoutMillis: 50}}); err != nil {
				t.Fatal(err)
			}
			resp, err := stream.Recv()
			if err != nil || resp.GetView().GetCode() != 0 || resp.GetView().GetView().GetIdleTimeoutMillis() != 50 {
				t.Fatalf("view with a 50 ms idle timeout: %v, %v", resp.GetView(), err)
			}
			short := resp.GetView().GetView().GetViewId()
			deadline := time.Now().Add(5 * time.Second)
			for {
				time.Sleep(100 * time.Millisecond)
				_, err = rpc.ReleaseView(ctx, &pb.ReleaseViewRequest{InstanceId: id, Job: job, ViewId: short})
				if status.Code(err) == codes.NotFound {
					break
				}
				if err != nil || time.Now().After(deadline) {
					t.Fatalf("an idle view was not released by its timeout: %v", err)
				}
				// The release above freed it; take another and wait.
				if err := stream.Send(&pb.BatchRequest{Seq: 12, View: &pb.ViewBarrier{IdleTimeoutMillis: 50}}); err != nil {
					t.Fatal(err)
				}
				resp, err := stream.Recv()
				if err != nil {
					t.Fatal(err)
				}
				short = resp.GetView().GetView().GetViewId()
				time.Sleep(300 * time.Millisecond)
			}
			// Too many views fail the barrier alone; the stream goes on. The
			// limit is the one Open advertised, as a client sizes by it.
			if open.GetProtocolVersion() != api.ProtocolVersion || open.GetMaxViewsPerInstance() != 4 {
				t.Fatalf("open advertises protocol revision %d (want %d) and %d views per instance (want the default 4)",
					open.GetProtocolVersion(), api.ProtocolVersion, open.GetMaxViewsPerInstance())
			}
			limit := int(open.GetMaxViewsPerInstance())
			for i := 0; i <= limit; i++ {
				if err := stream.Send(&pb.BatchRequest{Seq: uint64(20 + i), View: &pb.ViewBarrier{},
					Ops: []*pb.Op{{Type: pb.OpType_OP_TYPE_PUT, State: "v", KeyGroup: 10, Key: []byte("x"), Value: []byte("y")}}}); err != nil {
					t.Fatal(err)
				}
				resp, err := stream.Recv()
				if err != nil {
					t.Fatal(err)
				}
				if code := codes.Code(resp.GetView().GetCode()); (i < limit) != (code == codes.OK) || (i == limit && code != codes.ResourceExhausted) {
					t.Fatalf("view %d: %v", i+1, resp.GetView())
				}
			}
		})
	}
}

// TestKeysRegisterLoadOverTheWire: states registered after Open, a bulk
// load, key scans and counts through the raw stubs.
func TestKeysRegisterLoadOverTheWire(t *testing.T) {
	for _, kind := range []pb.BackendKind{pb.BackendKind_BACKEND_KIND_HEAP, pb.BackendKind_BACKEND_KIND_LSM} {
		t.Run(kind.String(), func(t *testing.T) {
			h := startDaemon(t, harnessOpts{})
			rpc := rawConn(t, h)
			ctx := ctxT(t)
			open, _ := openRaw(t, rpc, "keys", kind, &pb.KeyGroupRange{Start: 0, End: 9})
			id, job := open.InstanceId, "keys"
			reg, err := rpc.RegisterStates(ctx, &pb.RegisterStatesRequest{InstanceId: id, Job: job, States: []*pb.StateDescriptor{
				{Name: "late", Kind: pb.StateKind_STATE_KIND_MAP}, {Name: "v", Kind: pb.StateKind_STATE_KIND_VALUE}}})
			if err != nil || len(reg.GetStates()) != 4 {
				t.Fatalf("register: %v, %v", reg, err)
			}
			_, err = rpc.RegisterStates(ctx, &pb.RegisterStatesRequest{InstanceId: id, Job: job, States: []*pb.StateDescriptor{
				{Name: "other", Kind: pb.StateKind_STATE_KIND_VALUE}, {Name: "v", Kind: pb.StateKind_STATE_KIND_LIST}}})
			wantCode(t, err, codes.FailedPrecondition, "register v as a list")
			_, err = rpc.RegisterStates(ctx, &pb.RegisterStatesRequest{InstanceId: id, Job: job, States: []*pb.StateDescriptor{{Name: "x"}}})
			wantCode(t, err, codes.InvalidArgument, "register a state without a kind")

			load := func(reqs ...*pb.LoadRequest) (*pb.LoadResponse, error) {
				stream, err := rpc.Load(ctx)
				if err != nil {
					return nil, err
				}
				for _, r := range reqs {
					if err := stream.Send(r); err != nil && !errors.Is(err, io.EOF) {
						return nil, err
					}
				}
				return stream.CloseAndRecv()
			}
			var first, second []*pb.ViewEntry
			for i := 0; i < 300; i++ {
				e := &pb.ViewEntry{KeyGroup: uint32(i % 10), State: "late", Key: []byte(fmt.Sprintf("k%03d", i)),
					Namespace: []byte(fmt.Sprintf("w%d", i%3)), UserKey: []byte("u"), Value: []byte("x")}
				if i < 150 {
					first = append(first, e)
				} else {
					second = append(second, e)
				}
			}
			res, err := load(&pb.LoadRequest{InstanceId: id, Job: job, Entries: first}, &pb.LoadRequest{Entries: second})
			if err != nil || res.GetEntries() != 300 || res.GetBytes() != 300*(4+2+1+1) {
				t.Fatalf("load: %v, %v", res, err)
			}
			// Every key of namespace w1, in pages of 7.
			var got []string
			var cursor []byte
			for pages := 0; ; pages++ {
				if pages > 100 {
					t.Fatal("key scan does not end")
				}
				resp, err := rpc.ScanKeys(ctx, &pb.ScanKeysRequest{InstanceId: id, Job: job, State: "late", Namespace: []byte("w1"), Limit: 7, Cursor: cursor})
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.GetKeys()) > 7 {
					t.Fatalf("a page of limit 7 has %d keys", len(resp.GetKeys()))
				}
				for _, k := range resp.GetKeys() {
					if string(k.GetNamespace()) != "w1" || int(k.GetKeyGroup()) >= 10 {
						t.Fatalf("key %v", k)
					}
					got = append(got, string(k.GetKey()))
				}
				if !resp.GetMore() {
					break
				}
				cursor = resp.GetCursor()
			}
			if len(got) != 100 {
				t.Fatalf("namespace w1 has %d keys, want 100", len(got))
			}
			all, err := rpc.ScanKeys(ctx, &pb.ScanKeysRequest{InstanceId: id, Job: job, State: "late", KeyGroups: &pb.KeyGroupRange{Start: 3, End: 3}})
			if err != nil || len(all.GetKeys()) != 30 || all.GetMore() {
				t.Fatalf("keys of key group 3: %d, more %v, %v", len(all.GetKeys()), all.GetMore(), err)
			}
			cnt, err := rpc.CountEntries(ctx, &pb.CountEntriesRequest{InstanceId: id, Job: job})
			if err != nil || cnt.GetEntries() != 300 {
				t.Fatalf("count: %v, %v", cnt, err)
			}

			// Bad input.
			_, err = rpc.ScanKeys(ctx, &pb.ScanKeysRequest{InstanceId: id, Job: job, State: "nope"})
			wantCode(t, err, codes.InvalidArgument, "keys of an unknown state")
			_, err = rpc.ScanKeys(ctx, &pb.ScanKeysRequest{InstanceId: id, Job: job, State: "late", Cursor: []byte{9, 9, 9}})
			wantCode(t, err, codes.InvalidArgument, "keys with a bad cursor")
			_, err = rpc.ScanKeys(ctx, &pb.ScanKeysRequest{InstanceId: id, Job: job, State: "late", KeyGroups: &pb.KeyGroupRange{Start: 9, End: 10}})
			wantCode(t, err, codes.InvalidArgument, "keys outside the range")
			_, err = load(&pb.LoadRequest{InstanceId: id, Job: job, Entries: []*pb.ViewEntry{{KeyGroup: 10, State: "v", Key: []byte("k")}}})
			wantCode(t, err, codes.InvalidArgument, "load outside the range")
			_, err = load(&pb.LoadRequest{InstanceId: id, Job: job, Entries: []*pb.ViewEntry{{KeyGroup: 1, State: "nope", Key: []byte("k")}}})
			wantCode(t, err, codes.InvalidArgument, "load into an unknown state")
			_, err = load(&pb.LoadRequest{InstanceId: []byte("nope"), Job: job})
			wantCode(t, err, codes.NotFound, "load into an unknown instance")
			_, err = load(&pb.LoadRequest{InstanceId: id, Job: job}, &pb.LoadRequest{InstanceId: []byte("other"), Entries: first})
			wantCode(t, err, codes.InvalidArgument, "load naming another instance")
			_, err = load()
			wantCode(t, err, codes.InvalidArgument, "load without a first request")
		})
	}
}
