package api

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/statedhq/stated/api/internal/wire"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/daemon"
)

// newTestInstance opens one instance of kind behind a server with opts.
func newTestInstance(t *testing.T, kind backend.Kind, maxValue int, opts ServerOptions) (*Server, *daemon.Instance) {
	t.Helper()
	ctx := context.Background()
	d := newTestDaemon(t, maxValue)
	inst, err := d.Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: "j", Operator: "op"},
		KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, Kind: kind,
		States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}, {Name: "t", Kind: backend.KindTimers}}})
	if err != nil {
		t.Fatal(err)
	}
	opts.Logger = quietLog
	return NewServer(d, opts), inst
}

// run applies ops as one batch and returns the encoded response and the
// decoded results.
func run(t *testing.T, s *Server, inst *daemon.Instance, ops ...*pb.Op) (int, *pb.BatchResponse) {
	t.Helper()
	data, err := proto.Marshal(&pb.BatchRequest{Seq: 1 << 40, Ops: ops})
	if err != nil {
		t.Fatal(err)
	}
	bt, err := wire.DecodeBatch(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := s.apply(inst, &bt, 0).Data
	var resp pb.BatchResponse
	if err := proto.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	return len(out), &resp
}

func poll(limit int32) *pb.Op {
	return &pb.Op{Type: pb.OpType_OP_TYPE_TIMER_POLL, State: "t", Timestamp: 1 << 62, Limit: limit}
}

// TestTimerPollWithinMessageLimit: a TIMER_POLL response never exceeds the
// message limit; the timers that do not fit stay registered (more is set)
// and later polls deliver each exactly once, in timestamp order.
func TestTimerPollWithinMessageLimit(t *testing.T) {
	const limit = 16 << 10
	for _, kind := range []backend.Kind{backend.KindHeap, backend.KindLSM} {
		t.Run(string(kind), func(t *testing.T) {
			s, inst := newTestInstance(t, kind, 4<<10, ServerOptions{MaxMessageSize: limit})
			const n = 300
			for i := 0; i < n; i++ {
				// Keys of ~500 bytes: 300 timers are ~150 KiB.
				key := append(bytes.Repeat([]byte{'k'}, 480+i%40), fmt.Sprint(i)...)
				if err := inst.Backend.RegisterTimer("t", backend.Timer{KeyGroup: i % 128, Key: key, Timestamp: int64(i)}); err != nil {
					t.Fatal(err)
				}
			}
			// A read first takes part of the budget.
			if err := inst.Backend.Put("v", backend.Key{KeyGroup: 0, Key: []byte("big")}, bytes.Repeat([]byte{1}, 4<<10)); err != nil {
				t.Fatal(err)
			}
			var got []int64
			polls := 0
			for {
				ops := []*pb.Op{poll(0)}
				if polls%2 == 0 {
					ops = []*pb.Op{{Type: pb.OpType_OP_TYPE_GET, State: "v", Key: []byte("big")}, poll(0)}
				}
				size, resp := run(t, s, inst, ops...)
				polls++
				if size > limit {
					t.Fatalf("poll %d: response of %d bytes over the %d-byte limit", polls, size, limit)
				}
				r := resp.GetResults()[len(resp.GetResults())-1]
				if r.GetCode() != 0 {
					t.Fatalf("poll %d: %s", polls, r.GetError())
				}
				for _, tm := range r.GetTimers() {
					got = append(got, tm.GetTimestamp())
				}
				if !r.GetMore() {
					// Everything due was delivered.
					if _, resp := run(t, s, inst, poll(0)); len(resp.GetResults()) != 0 {
						t.Fatalf("a poll after one without more found %v", resp.GetResults())
					}
					break
				}
				if polls > n {
					t.Fatal("polls do not make progress")
				}
			}
			if len(got) != n {
				t.Fatalf("delivered %d timers of %d", len(got), n)
			}
			for i, ts := range got {
				if ts != int64(i) {
					t.Fatalf("timer %d delivered as %d: order or duplicates", i, ts)
				}
			}
			if polls < 10 {
				t.Fatalf("%d polls for ~150 KiB of timers in 16 KiB responses", polls)
			}
		})
	}
}

// A timer that does not fit after the rest of the batch fails the poll
// (ResourceExhausted) and stays; alone in a batch it is delivered even if
// it is larger than the budget, so it never blocks the timers behind it.
func TestTimerPollLargeTimer(t *testing.T) {
	const limit = 8 << 10
	s, inst := newTestInstance(t, backend.KindHeap, 6<<10, ServerOptions{MaxMessageSize: limit})
	huge := backend.Timer{KeyGroup: 1, Key: bytes.Repeat([]byte{'k'}, 6<<10), Namespace: bytes.Repeat([]byte{'n'}, 6<<10), Timestamp: 1}
	small := backend.Timer{KeyGroup: 2, Key: []byte("s"), Timestamp: 2}
	for _, tm := range []backend.Timer{huge, small} {
		if err := inst.Backend.RegisterTimer("t", tm); err != nil {
			t.Fatal(err)
		}
	}
	if err := inst.Backend.Put("v", backend.Key{KeyGroup: 0, Key: []byte("x")}, []byte("y")); err != nil {
		t.Fatal(err)
	}
	_, resp := run(t, s, inst, &pb.Op{Type: pb.OpType_OP_TYPE_GET, State: "v", Key: []byte("x")}, poll(0))
	if r := resp.GetResults()[1]; codes.Code(r.GetCode()) != codes.ResourceExhausted {
		t.Fatalf("poll after a read with a timer over the budget: %v", r)
	}
	_, resp = run(t, s, inst, poll(0))
	r := resp.GetResults()[0]
	if r.GetCode() != 0 || len(r.GetTimers()) != 1 || r.GetTimers()[0].GetTimestamp() != 1 || !r.GetMore() {
		t.Fatalf("lone poll of the huge timer: code %d, %d timers, more %v", r.GetCode(), len(r.GetTimers()), r.GetMore())
	}
	_, resp = run(t, s, inst, poll(0))
	if r := resp.GetResults()[0]; len(r.GetTimers()) != 1 || r.GetTimers()[0].GetTimestamp() != 2 || r.GetMore() {
		t.Fatalf("the timer behind it: %v", r)
	}
}
