package api_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/api/protocol"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
)

// TestRestoreModeDefault: a restore without a mode claims latest (a task
// that restarts over and over never piles up pinned checkpoints) and does
// not claim an explicit checkpoint id; the same through the client's
// default and through the raw stub with RESTORE_MODE_UNSPECIFIED.
func TestRestoreModeDefault(t *testing.T) {
	ctx := ctxT(t)
	h := startDaemon(t, harnessOpts{})
	c := h.dial(client.Options{})
	tk := task("mode", "op", 0)
	spec := client.OpenSpec{Task: tk, Parallelism: 1, Backend: backend.KindLSM, States: allStates}
	in, err := c.Open(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	id := uint64(0)
	checkpoint := func() {
		t.Helper()
		id++
		in.Put("v", []byte("k"), nil, []byte{byte(id)})
		if _, err := in.Snapshot(ctx, id, false); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CompleteCheckpoint(ctx, "mode", id); err != nil {
			t.Fatal(err)
		}
	}
	pins := func() (retained int, pinned []uint64) {
		t.Helper()
		list, err := c.ListCheckpoints(ctx, "mode")
		if err != nil {
			t.Fatal(err)
		}
		for _, ci := range list {
			if ci.GetRetained() {
				retained++
			}
			if ci.GetPinned() {
				pinned = append(pinned, ci.GetCheckpointId())
			}
		}
		return retained, pinned
	}
	checkpoint()
	for round := 0; round < 6; round++ {
		in.Abandon() // the task process died
		spec.Restore, spec.Replace = &client.Restore{Latest: true}, true
		if round%2 == 1 {
			// A client in another language: the generated stub, mode left
			// unspecified.
			resp, err := c.RPC().Open(ctx, &pb.OpenRequest{Task: protocol.TaskToPB(tk), KeyGroups: &pb.KeyGroupRange{Start: 0, End: 127},
				Backend: "lsm", States: []*pb.StateDescriptor{protocol.StateToPB(allStates[0])}, Replace: true,
				Restore: &pb.RestoreSource{Source: &pb.RestoreSource_Latest{Latest: true}}})
			if err != nil || resp.GetRestoredCheckpointId() != id {
				t.Fatalf("raw open: %v %v", err, resp)
			}
		}
		if in, err = c.Open(ctx, spec); err != nil {
			t.Fatal(err)
		}
		checkpoint()
		checkpoint()
	}
	if n, p := pins(); n != 3 || len(p) != 0 {
		t.Fatalf("after restarts from latest: %d retained, pinned %v; want 3, none", n, p)
	}
	in.Abandon()
	spec.Restore = &client.Restore{CheckpointID: id - 1}
	if in, err = c.Open(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if _, p := pins(); len(p) != 1 || p[0] != id-1 {
		t.Fatalf("after a restore from checkpoint %d: pinned %v", id-1, p)
	}
	if _, err := in.Get("v", []byte("k"), nil).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	in.Abandon()
	spec.Restore = &client.Restore{Latest: true, Claim: true, NoClaim: true}
	if _, err := c.Open(ctx, spec); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("claim and no-claim: %v", err)
	}
	_, err = c.RPC().Open(ctx, &pb.OpenRequest{Task: protocol.TaskToPB(tk), KeyGroups: &pb.KeyGroupRange{Start: 0, End: 127},
		Backend: "lsm", Replace: true, Restore: &pb.RestoreSource{Source: &pb.RestoreSource_Latest{Latest: true}, Mode: 9}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("unknown restore mode: %v", err)
	}
}
