package api_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
)

// TestOpenLSMModeRefusals: an lsm mode chosen for an instance of another
// backend, or a mode the client does not know, is refused with
// INVALID_ARGUMENT naming it; an lsm instance opens in either mode.
// (TestRescaleThroughTheDaemon/lsm-remote-spec checks that the choice
// puts the SSTs in the store and rescales.)
func TestOpenLSMModeRefusals(t *testing.T) {
	h := startDaemon(t, harnessOpts{})
	c := h.dial(client.Options{})
	ctx := ctxT(t)
	open := func(kind backend.Kind, sub int, mode client.LSMMode) error {
		in, err := c.Open(ctx, client.OpenSpec{Task: task("lsmmode", "op", sub), KeyGroups: backend.KeyGroupRange{Start: 0, End: 127},
			Backend: kind, States: allStates, LSM: mode})
		if err == nil {
			in.Close(ctx)
		}
		return err
	}
	err := open(backend.KindHeap, 0, client.LSMRemote)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "lsm mode for a heap instance") {
		t.Fatalf("a heap instance with an lsm mode: %v", err)
	}
	if err := open(backend.KindLSM, 1, client.LSMMode(7)); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "lsm mode 7") {
		t.Fatalf("an unknown lsm mode: %v", err)
	}
	for i, mode := range []client.LSMMode{client.LSMLocal, client.LSMRemote} {
		if err := open(backend.KindLSM, 2+i, mode); err != nil {
			t.Fatalf("an lsm instance in mode %d: %v", mode, err)
		}
	}
}
