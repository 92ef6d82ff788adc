package api

import (
	"context"
	"testing"

	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/daemon"
)

// TestOpCountsOfSampledBatch: in a batch large enough that only every
// latencySample-th operation is timed, every operation is still counted,
// per state kind and op, including the kinds none of whose operations was
// timed; failures are counted as errors.
func TestOpCountsOfSampledBatch(t *testing.T) {
	ctx := context.Background()
	s, _ := newTestInstance(t, backend.KindHeap, 0, ServerOptions{})
	inst, err := s.d.Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: "j", Operator: "kinds"},
		KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, Kind: backend.KindHeap,
		States: []backend.StateDescriptor{
			{Name: "v", Kind: backend.KindValue}, {Name: "l", Kind: backend.KindList}, {Name: "m", Kind: backend.KindMap},
			{Name: "sum", Kind: backend.KindAggregate, Aggregate: backend.AggSum, Number: backend.NumInt64},
			{Name: "t", Kind: backend.KindTimers},
		}})
	if err != nil {
		t.Fatal(err)
	}
	k := []byte("k")
	// One round of 8: with latencySample 4, positions 0 and 4 (value
	// states) are timed, the other kinds never are.
	round := []*pb.Op{
		{Type: pb.OpType_OP_TYPE_PUT, State: "v", Key: k, Value: []byte("x")},
		{Type: pb.OpType_OP_TYPE_AGGREGATE_ADD, State: "sum", Key: k, NumberType: pb.NumberType_NUMBER_TYPE_INT64, IntValue: 1},
		{Type: pb.OpType_OP_TYPE_MAP_PUT, State: "m", Key: k, UserKey: []byte("u"), Value: []byte("y")},
		{Type: pb.OpType_OP_TYPE_LIST_APPEND, State: "l", Key: k}, // no values: fails
		{Type: pb.OpType_OP_TYPE_GET, State: "v", Key: k},
		{Type: pb.OpType_OP_TYPE_GET, State: "nope", Key: k}, // unknown state: fails
		{Type: pb.OpType_OP_TYPE_MAP_GET, State: "m", Key: k, UserKey: []byte("u")},
		{Type: pb.OpType_OP_TYPE_TIMER_REGISTER, State: "t", Key: k, Timestamp: 7},
	}
	const rounds = 3
	var ops []*pb.Op
	for range rounds {
		ops = append(ops, round...)
	}
	if len(ops) < 4*latencySample {
		t.Fatalf("%d operations: too few for sampling", len(ops))
	}
	_, resp := run(t, s, inst, ops...)
	// Per round, results for the two failures, the get and the map get.
	failed := 0
	for _, r := range resp.GetResults() {
		if r.GetCode() != 0 {
			failed++
		}
	}
	if len(resp.GetResults()) != 4*rounds || failed != 2*rounds {
		t.Fatalf("%d results, %d failed; want %d and %d: %+v", len(resp.GetResults()), failed, 4*rounds, 2*rounds, resp.GetResults())
	}

	m := s.d.Metrics()
	hi := daemon.BackendIndex(backend.KindHeap)
	type cell struct {
		sk backend.StateKind
		op daemon.Op
	}
	wantOps := map[cell]uint64{
		{backend.KindValue, daemon.OpPut}:              rounds,
		{backend.KindValue, daemon.OpGet}:              rounds,
		{backend.KindAggregate, daemon.OpAggregateAdd}: rounds,
		{backend.KindMap, daemon.OpMapPut}:             rounds,
		{backend.KindMap, daemon.OpMapGet}:             rounds,
		{backend.KindList, daemon.OpListAppend}:        rounds,
		{0, daemon.OpGet}:                              rounds,
		{backend.KindTimers, daemon.OpTimerRegister}:   rounds,
	}
	wantErrs := map[cell]uint64{
		{backend.KindList, daemon.OpListAppend}: rounds,
		{0, daemon.OpGet}:                       rounds,
	}
	for sk := range len(m.Ops[hi]) {
		for op := range len(m.Ops[hi][sk]) {
			c := cell{backend.StateKind(sk), daemon.Op(op)}
			if got := m.Ops[hi][sk][op].Load(); got != wantOps[c] {
				t.Errorf("ops of state kind %d, %s: %d, want %d", sk, daemon.Op(op), got, wantOps[c])
			}
			if got := m.OpErrors[hi][sk][op].Load(); got != wantErrs[c] {
				t.Errorf("errors of state kind %d, %s: %d, want %d", sk, daemon.Op(op), got, wantErrs[c])
			}
		}
	}
	// Latency: only the timed value operations, 2 per round.
	for sk := range len(m.OpLatency[hi]) {
		want := uint64(0)
		if backend.StateKind(sk) == backend.KindValue {
			want = 2 * rounds
		}
		if got := m.OpLatency[hi][sk].Snapshot().Count; got != want {
			t.Errorf("latency samples of state kind %d: %d, want %d", sk, got, want)
		}
	}
	if got := m.Batches.Load(); got != 1 {
		t.Errorf("batches %d, want 1", got)
	}
}
