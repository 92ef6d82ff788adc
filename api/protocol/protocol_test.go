package protocol

import (
	"testing"
	"time"

	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
)

// Each converter and its inverse round-trip, so neither end loses a field.
func TestRoundTrip(t *testing.T) {
	task := backend.TaskID{Job: "j", Operator: "op", Subtask: 3}
	if got := TaskFromPB(TaskToPB(task)); got != task {
		t.Errorf("task: %+v, want %+v", got, task)
	}
	sd := backend.StateDescriptor{Name: "s", Kind: backend.StateKind(2), TTL: 1500 * time.Millisecond,
		TTLUpdate: backend.TTLUpdate(1), Aggregate: backend.AggregateFunc(1), Number: backend.NumberType(2)}
	if got := StateFromPB(StateToPB(sd)); got != sd {
		t.Errorf("state: %+v, want %+v", got, sd)
	}
	kg := backend.KeyGroupRange{Start: 5, End: 9}
	if got := KeyGroupsFromPB(KeyGroupsToPB(kg)); got != kg {
		t.Errorf("key groups: %+v, want %+v", got, kg)
	}
	for _, m := range []backend.OperatorStateMode{"", backend.OperatorSplit, backend.OperatorUnion} {
		if got, err := OperatorModeFromPB(OperatorModeToPB(m)); err != nil || got != m {
			t.Errorf("operator mode %q: %q, %v", m, got, err)
		}
	}
	if _, err := OperatorModeFromPB(pb.OperatorStateMode(99)); err == nil {
		t.Error("unknown operator mode accepted")
	}
}

// BenchmarkKeyGroup is the daemon's cost per operation of checking a
// declared key hash (a 12-byte key), to set against an operation's cost
// through the batch stream (api's BenchmarkLSM).
func BenchmarkKeyGroup(b *testing.B) {
	key := []byte("key-00012345")
	sum := 0
	for b.Loop() {
		sum += KeyGroup(key, 128)
	}
	if sum < 0 {
		b.Fatal(sum)
	}
}
