package api_test

import (
	"fmt"
	"strings"
	"testing"

	pb "github.com/statedhq/stated/api/statedpb"
)

// TestTimerPollMoreOnFullPage (issue 37): a TIMER_POLL page that is full
// (the daemon's page cap with limit 0, or the op's limit) while due timers
// remain says more, as MAP_ITERATE does; a client that polls while more is
// set fires every due timer. A page that takes the last due timer does not
// say more. Raw gRPC, on every backend.
func TestTimerPollMoreOnFullPage(t *testing.T) {
	h := startDaemon(t, harnessOpts{})
	rpc := rawConn(t, h)
	const due = 10_005 // the page cap (10,000) and 5 more
	for _, kind := range wireBackends {
		t.Run(strings.ToLower(strings.TrimPrefix(kind.String(), "BACKEND_KIND_")), func(t *testing.T) {
			job := "timers-" + kind.String()
			open, ws := openWire(t, rpc, &pb.OpenRequest{Task: &pb.TaskId{Job: job, Operator: "op"}, KeyGroups: allKeyGroups(),
				BackendKind: kind, States: []*pb.StateDescriptor{{Name: "t", Kind: pb.StateKind_STATE_KIND_TIMERS}}})
			if open.MaxPage != 10_000 {
				t.Fatalf("max_page %d, the test assumes 10000", open.MaxPage)
			}
			register := func(n, from int) {
				req := &pb.BatchRequest{}
				for i := range n {
					key := fmt.Sprintf("k%d", from+i)
					req.Ops = append(req.Ops, &pb.Op{Type: pb.OpType_OP_TYPE_TIMER_REGISTER, State: "t",
						KeyGroup: uint32(keyGroupOf(key)), Key: []byte(key), Timestamp: int64(from + i)})
				}
				res, _ := ws.do(req)
				for _, r := range res {
					if r.Code != 0 {
						t.Fatalf("register: %v", r)
					}
				}
			}
			for i := 0; i < due; i += 5000 {
				register(min(5000, due-i), i)
			}
			poll := func(limit int32) *pb.Result {
				res, _ := ws.do(&pb.BatchRequest{Ops: []*pb.Op{{Type: pb.OpType_OP_TYPE_TIMER_POLL, State: "t", Timestamp: 1 << 40, Limit: limit}}})
				if res[0].Code != 0 {
					t.Fatalf("poll: %v", res[0])
				}
				return res[0]
			}
			check := func(what string, r *pb.Result, n int, more bool) {
				t.Helper()
				if len(r.Timers) != n || r.More != more {
					t.Fatalf("%s: %d timers, more=%v; want %d, more=%v", what, len(r.Timers), r.More, n, more)
				}
			}
			check("limit 0, 10,005 due", poll(0), 10_000, true)
			check("limit 0, 5 due", poll(0), 5, false)
			check("limit 0, none due", poll(0), 0, false)
			register(10, 0)
			check("limit 4, 10 due", poll(4), 4, true)
			check("limit 4, 6 due", poll(4), 4, true)
			check("limit 2, 2 due", poll(2), 2, false)
			check("limit 2, none due", poll(2), 0, false)
		})
	}
}
