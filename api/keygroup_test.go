package api_test

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api/client"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
)

// TestInstanceKeyGroupVectors: an instance of the Go client, opened at each
// max parallelism of api/testdata/keygroups.json, computes the vectors'
// key groups, and the daemon takes a write in each.
func TestInstanceKeyGroupVectors(t *testing.T) {
	ctx := ctxT(t)
	data, err := os.ReadFile("testdata/keygroups.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		MaxParallelisms []int `json:"max_parallelisms"`
		Vectors         []struct {
			KeyHex    string         `json:"key_hex"`
			KeyGroups map[string]int `json:"key_groups"`
		} `json:"vectors"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	h := startDaemon(t, harnessOpts{})
	c := h.dial(client.Options{})
	for i, p := range doc.MaxParallelisms {
		in, err := c.Open(ctx, client.OpenSpec{Task: task("kg", "op"+strconv.Itoa(i), 0), MaxParallelism: p, Parallelism: 1,
			Backend: backend.KindHeap, States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}, CheckKeyGroups: true})
		if err != nil {
			t.Fatal(err)
		}
		// The client declared the hash it computes with, so the daemon
		// checks the key groups below as well.
		if di, err := h.d.Lookup(in.ID(), "kg"); err != nil || !di.VerifyKeyGroups {
			t.Fatalf("max parallelism %d: the instance checks no key group (%v)", p, err)
		}
		for _, v := range doc.Vectors {
			key, err := hex.DecodeString(v.KeyHex)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := in.KeyGroup(key), v.KeyGroups[strconv.Itoa(p)]; got != want {
				t.Errorf("max parallelism %d, key %s: key group %d, want %d", p, v.KeyHex, got, want)
			}
			in.Put("v", key, nil, []byte("x"))
		}
		if err := in.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if err := in.Err(); err != nil {
			t.Fatalf("max parallelism %d: %v", p, err)
		}
		if err := in.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Without CheckKeyGroups nothing is declared (the Go client's default,
	// as before the declaration existed); a client that routes by another
	// hash cannot declare the specified one.
	in, err := c.Open(ctx, client.OpenSpec{Task: task("kg", "plain", 0), Parallelism: 1,
		Backend: backend.KindHeap, States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}})
	if err != nil {
		t.Fatal(err)
	}
	if di, err := h.d.Lookup(in.ID(), "kg"); err != nil || di.VerifyKeyGroups {
		t.Fatalf("declared without CheckKeyGroups (%v)", err)
	}
	other := h.dial(client.Options{KeyHash: func(k []byte) int32 { return int32(len(k)) }})
	_, err = other.Open(ctx, client.OpenSpec{Task: task("kg", "other", 0), Parallelism: 1, CheckKeyGroups: true,
		Backend: backend.KindHeap, States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "KeyHash") {
		t.Fatalf("CheckKeyGroups with another KeyHash: %v", err)
	}
}

// TestDeclaredKeyHash: an instance whose client declared the specified key
// hash at Open has a key group that is not its key's refused (in range or
// not), and the rest of the batch applied; an instance that declared none
// takes it, as the key groups of a client routing by another hash.
func TestDeclaredKeyHash(t *testing.T) {
	ctx := ctxT(t)
	h := startDaemon(t, harnessOpts{})
	rpc := rawConn(t, h)
	states := []*pb.StateDescriptor{{Name: "v", Kind: pb.StateKind_STATE_KIND_VALUE}}
	key := []byte("k42")
	right := backend.KeyGroupForHash(client.FNV1a32(key), backend.DefaultMaxParallelism)
	wrong := (right + 1) % backend.DefaultMaxParallelism
	for _, declared := range []bool{true, false} {
		req := &pb.OpenRequest{Task: &pb.TaskId{Job: "kh", Operator: strconv.FormatBool(declared)}, Parallelism: 1,
			BackendKind: pb.BackendKind_BACKEND_KIND_HEAP, States: states}
		if declared {
			req.KeyHash = pb.KeyHash_KEY_HASH_FNV1A_MURMUR
		}
		open, err := rpc.Open(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if (open.KeyHash == pb.KeyHash_KEY_HASH_FNV1A_MURMUR) != declared {
			t.Fatalf("declared %v: open answers key hash %v", declared, open.KeyHash)
		}
		s, err := rpc.Batch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		put := func(kg int) *pb.Op {
			return &pb.Op{Type: pb.OpType_OP_TYPE_PUT, State: "v", KeyGroup: uint32(kg), Key: key, Value: []byte("x")}
		}
		if err := s.Send(&pb.BatchRequest{InstanceId: open.InstanceId, Job: "kh", Seq: 1, Ops: []*pb.Op{put(wrong), put(right)}}); err != nil {
			t.Fatal(err)
		}
		resp, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if !declared {
			if len(resp.Results) != 0 {
				t.Fatalf("undeclared hash: %v", resp.Results)
			}
			continue
		}
		if len(resp.Results) != 1 || resp.Results[0].Index != 0 || codes.Code(resp.Results[0].Code) != codes.InvalidArgument ||
			!strings.Contains(resp.Results[0].Error, fmt.Sprintf("key group %d is not the key's", wrong)) {
			t.Fatalf("declared hash, wrong key group: %v", resp.Results)
		}
	}
	// An unknown hash is refused at Open.
	_, err := rpc.Open(ctx, &pb.OpenRequest{Task: &pb.TaskId{Job: "kh", Operator: "x"}, Parallelism: 1,
		BackendKind: pb.BackendKind_BACKEND_KIND_HEAP, KeyHash: 7})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "key_hash") {
		t.Fatalf("unknown key hash: %v", err)
	}
}
