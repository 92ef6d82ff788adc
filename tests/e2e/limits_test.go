package e2e

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/statedhq/stated/api/client"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
)

// TestServeStreamLimits: the stream limits of "stated serve" reach the
// daemon: a second batch stream for an instance beyond
// --max-streams-per-instance 1 is refused, and a stream that never names
// its instance ends after --first-batch-timeout.
func TestServeStreamLimits(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	p := start(t, dataDir(t), "--max-streams-per-instance", "1", "--first-batch-timeout", "300ms", "--queue-depth", "2")
	c := p.dial(client.Options{})
	in, err := c.Open(ctx, client.OpenSpec{Task: backend.TaskID{Job: "j", Operator: "op"}, Parallelism: 1,
		Backend: backend.KindHeap, States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}})
	if err != nil {
		t.Fatal(err)
	}
	// The instance's own stream, bound in Open, is its one allowed.
	_, err = batchOnce(ctx, c.RPC(), &pb.BatchRequest{InstanceId: in.ID(), Job: "j", Seq: 1})
	wantCode(t, "second stream", err, codes.ResourceExhausted, "batch streams open (max 1)")

	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	st, err := c.RPC().Batch(sctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv()
	wantCode(t, "silent stream", err, codes.DeadlineExceeded, "no batch request within 300ms")

	// Idle for longer than the timeout, the instance still works.
	time.Sleep(500 * time.Millisecond)
	if _, err := in.Put("v", []byte("k"), nil, []byte("x")).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := in.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.term(20 * time.Second); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
}
